//! VADER compound scores against the Python package (`tests/fixtures/vader/expected.json`).
mod common;

use lmrl_rewards::Vader;

#[test]
fn compound_matches_vader_sentiment() {
    let v = Vader::load(&common::asset("vader")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        v.lexicon_len(),
        7506,
        "distinct tokens of vader_lexicon.txt"
    );
    let fx = common::read_json("vader/expected.json");
    let cases = fx["cases"].as_array().expect("cases");
    assert!(cases.len() >= 50);
    for c in cases {
        let text = c["text"].as_str().expect("text");
        let want = c["compound"].as_f64().expect("compound");
        let got = v.compound(text);
        assert!(
            (got - want).abs() < 1e-9,
            "{text:?}: ours {got} vs VADER {want}"
        );
    }
}
