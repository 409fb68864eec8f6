//! The spaCy TextCatBOW port against spaCy's own outputs (`tests/fixtures/textcat-imdb`).
mod common;

use lmrl_rewards::{
    Reward, Sample, SentimentContext, SpacyTokenizer, TextCat, TextCatScore, TextScorer,
};

fn cases() -> Vec<(String, Vec<String>, f64)> {
    let v = common::read_json("textcat-imdb/expected.json");
    v["cases"]
        .as_array()
        .expect("cases array")
        .iter()
        .map(|c| {
            let text = c["text"].as_str().expect("text").to_string();
            let tokens = c["tokens"]
                .as_array()
                .expect("tokens")
                .iter()
                .map(|t| t.as_str().expect("token").to_string())
                .collect();
            (text, tokens, c["p_pos"].as_f64().expect("p_pos"))
        })
        .collect()
}

/// Token-level agreement of a tokenizer with spaCy's tokens on the fixture texts:
/// (cases with identical token lists, total cases, LCS-matched tokens, spaCy tokens).
fn agreement(tok: &SpacyTokenizer) -> (usize, usize, usize, usize) {
    let (mut same, mut n, mut matched, mut total) = (0, 0, 0, 0);
    for (text, want, _) in cases() {
        let got = tok.tokenize(&text);
        n += 1;
        same += usize::from(got == want);
        total += want.len();
        matched += lcs(&got, &want);
        if got != want {
            eprintln!("token mismatch on {text:?}:\n  ours  {got:?}\n  spaCy {want:?}");
        }
    }
    (same, n, matched, total)
}

fn lcs(a: &[String], b: &[String]) -> usize {
    let mut dp = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in 0..a.len() {
        for j in 0..b.len() {
            dp[i + 1][j + 1] = if a[i] == b[j] {
                dp[i][j] + 1
            } else {
                dp[i][j + 1].max(dp[i + 1][j])
            };
        }
    }
    dp[a.len()][b.len()]
}

/// Runs without assets: the built-in tokenizer reproduces spaCy's tokens on the fixture.
#[test]
fn builtin_tokenizer_matches_spacy_tokens() {
    let (same, n, matched, total) = agreement(&SpacyTokenizer::english());
    eprintln!("built-in tokenizer: {same}/{n} texts identical, {matched}/{total} tokens");
    assert_eq!(same, n, "every fixture text tokenizes exactly as spaCy");
}

fn load() -> TextCat {
    TextCat::load(&common::asset("imdb-textcat")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn spacy_tokens_give_spacy_probabilities() {
    let tc = load();
    assert_eq!(tc.labels(), ["POS", "NEG"]);
    let mut worst = 0f64;
    for (text, tokens, p_pos) in cases() {
        let got = tc.predict_tokens(&tokens);
        if tokens.is_empty() {
            // spaCy reports 0 here; we use the bias-only prior (documented decision).
            assert_eq!(p_pos, 0.0);
            assert!((got.p_pos + got.p_neg - 1.0).abs() < 1e-6);
            assert!(
                got.logit.abs() < 0.1,
                "empty text is near-neutral: {}",
                got.logit
            );
            continue;
        }
        let err = (f64::from(got.p_pos) - p_pos).abs();
        worst = worst.max(err);
        assert!(err < 1e-5, "{text:?}: ours {} vs spaCy {p_pos}", got.p_pos);
        // The logit reward is consistent with the probability: sigmoid(logit) = P(POS).
        let sig = 1.0 / (1.0 + (-f64::from(got.logit)).exp());
        assert!(
            (sig - p_pos).abs() < 1e-5,
            "{text:?}: sigmoid(logit) {sig} vs {p_pos}"
        );
    }
    eprintln!("max |ΔP(POS)| with spaCy's tokens: {worst:.2e}");
}

#[test]
fn own_tokenizer_same_class() {
    let tc = load();
    let (same, n, matched, total) = agreement(tc.tokenizer());
    eprintln!("pipeline-exception tokenizer: {same}/{n} texts identical, {matched}/{total} tokens");
    let (mut agree, mut count) = (0, 0);
    for (text, tokens, p_pos) in cases() {
        if tokens.is_empty() {
            continue;
        }
        count += 1;
        let ours = tc.predict(&text);
        agree += usize::from((ours.p_pos > 0.5) == (p_pos > 0.5));
    }
    eprintln!("same class as spaCy on {agree}/{count} texts");
    assert!(agree * 100 >= count * 95, "{agree}/{count}");
    // Through the trait object: the text scored is query + response.
    let want = [tc.predict("I loved it."), tc.predict("I hated it.")];
    let ctx = SentimentContext::new("I ");
    let r: Box<dyn Reward<SentimentContext>> = Box::new(tc.clone());
    let s = r
        .score(&[
            Sample::new("prompt", "loved it.", &ctx),
            Sample::new("prompt", "hated it.", &ctx),
        ])
        .expect("scores");
    assert_eq!(s, [want[0].logit, want[1].logit]);
    assert!(s[0] > 0.0 && s[1] < 0.0, "{s:?}");
    let p = tc
        .with_score(TextCatScore::Probability)
        .score_texts(&["I loved it.", "I hated it."])
        .expect("scores");
    assert_eq!(p, [want[0].p_pos, want[1].p_pos]);
    assert!(p[0] > 0.5 && p[1] < 0.5, "{p:?}");
}
