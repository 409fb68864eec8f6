//! DistilBERT classifier logits against transformers (`tests/fixtures/distilbert-tiny`).
//! Built only with the `distilbert` feature (`required-features` in Cargo.toml).
mod common;

use burn::tensor::{Device, Int, Tensor, TensorData};
use lmrl_rewards::{
    BertTokenizer, DistilBertReward, Reward, Sample, SentimentContext, TextScorer, load_distilbert,
};

fn matrix(v: &serde_json::Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("number"))
                .collect()
        })
        .collect()
}

#[test]
fn logits_match_transformers() {
    let device = Device::flex();
    let model = load_distilbert(&common::fixture("distilbert-tiny"), &device)
        .unwrap_or_else(|e| panic!("{e}"));
    let fx = common::read_json("distilbert-tiny/expected.json");
    let ids = matrix(&fx["forward"]["input_ids"]);
    let mask = matrix(&fx["forward"]["attention_mask"]);
    let want = matrix(&fx["forward"]["logits"]);
    let (b, s) = (ids.len(), ids[0].len());
    let flat = |m: &[Vec<f64>]| m.iter().flatten().map(|&x| x as i64).collect::<Vec<_>>();
    let input = Tensor::<2, Int>::from_data(TensorData::new(flat(&ids), [b, s]), &device);
    let am = Tensor::<2, Int>::from_data(TensorData::new(flat(&mask), [b, s]), &device);
    let got: Vec<f32> = model
        .logits(input, am)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 logits");
    assert_eq!(got.len(), b * 2);
    for (i, row) in want.iter().enumerate() {
        for (j, &w) in row.iter().enumerate() {
            let g = f64::from(got[i * 2 + j]);
            assert!((g - w).abs() < 1e-6, "logit[{i}][{j}]: ours {g} vs HF {w}");
        }
    }
    // The host-side path pads rows itself with pad_token_id = 0 and must agree.
    let rows: Vec<Vec<u32>> = ids
        .iter()
        .zip(&mask)
        .map(|(r, m)| {
            r.iter()
                .zip(m)
                .filter(|(_, m)| **m > 0.0)
                .map(|(x, _)| *x as u32)
                .collect()
        })
        .collect();
    let host = model
        .logits_for_ids(&rows, &device)
        .unwrap_or_else(|e| panic!("{e}"));
    for (i, row) in want.iter().enumerate() {
        assert!(
            (f64::from(host[i][1]) - row[1]).abs() < 1e-6,
            "row {i}: {:?} vs {row:?}",
            host[i]
        );
    }
    assert_eq!(model.config().positive_index(), 1);
    assert!(
        model.check_inputs(&[vec![5000]]).is_err(),
        "ids beyond the vocabulary are rejected"
    );
}

#[test]
fn missing_tensor_is_named() {
    let dir = std::env::temp_dir().join(format!("lmrl-rewards-distilbert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    std::fs::copy(
        common::fixture("distilbert-tiny/config.json"),
        dir.join("config.json"),
    )
    .expect("copy");
    std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").expect("write");
    let err = load_distilbert(&dir, &Device::flex()).expect_err("bad file");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wordpiece_from_vocab_txt() {
    let dir = std::env::temp_dir().join(format!("lmrl-rewards-vocab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let vocab = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", ",", "world", "!", "great", "##est", "film",
    ];
    std::fs::write(dir.join("vocab.txt"), vocab.join("\n") + "\n").expect("write vocab");
    let tok = BertTokenizer::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    // Lower-cased, punctuation split, WordPiece continuation, [CLS]/[SEP] added.
    assert_eq!(
        tok.encode("Hello, WORLD!", 64).expect("encode"),
        [2, 4, 5, 6, 7, 3]
    );
    assert_eq!(
        tok.encode("greatest film xyz", 64).expect("encode"),
        [2, 8, 9, 10, 1, 3]
    );
    // Truncation keeps the final [SEP].
    assert_eq!(
        tok.encode("hello hello hello hello", 4).expect("encode"),
        [2, 4, 4, 3]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Text → WordPiece → classifier → POSITIVE logit, end to end: a vocabulary that names the
/// fixture's ids (`[CLS]` = 986, `[SEP]` = 981, `w<id>` otherwise) turns a text into the
/// fixture's first row, whose logits transformers computed.
#[test]
fn reward_is_the_positive_logit_of_the_text() {
    let dir = std::env::temp_dir().join(format!("lmrl-rewards-scorer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(
            common::fixture(&format!("distilbert-tiny/{f}")),
            dir.join(f),
        )
        .expect("copy");
    }
    let vocab: Vec<String> = (0..1000)
        .map(|i| match i {
            0 => "[PAD]".to_string(),
            1 => "[UNK]".to_string(),
            981 => "[SEP]".to_string(),
            986 => "[CLS]".to_string(),
            _ => format!("w{i}"),
        })
        .collect();
    std::fs::write(dir.join("vocab.txt"), vocab.join("\n") + "\n").expect("write vocab");
    let fx = common::read_json("distilbert-tiny/expected.json");
    let ids = matrix(&fx["forward"]["input_ids"]);
    let want = matrix(&fx["forward"]["logits"])[0][1];
    let row: Vec<u32> = ids[0].iter().map(|&x| x as u32).collect();
    assert_eq!(
        (row.first(), row.last()),
        (Some(&986), Some(&981)),
        "the fixture's first row is [CLS] … [SEP]"
    );
    let words = row[1..row.len() - 1]
        .iter()
        .map(|x| format!("w{x}"))
        .collect::<Vec<_>>()
        .join(" ");

    let r = DistilBertReward::load(&dir, &Device::flex()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(TextScorer::name(&r), "distilbert");
    let got = r.score_texts(&[&words, ""]).expect("scores");
    assert!(
        (f64::from(got[0]) - want).abs() < 1e-6,
        "ours {} vs HF {want}",
        got[0]
    );
    assert!(
        got[1].is_finite(),
        "an empty text is [CLS] [SEP]: {}",
        got[1]
    );
    // The tiny random model's logits barely move with the input (dropping a word moves this one
    // by 3e-5), so the tolerance is 1e-6 rather than a looser one that any text would meet.
    let dropped = r.score_texts(&[&words[4..]]).expect("score");
    assert!(
        (f64::from(dropped[0]) - want).abs() > 1e-5,
        "{}",
        dropped[0]
    );
    // As a sentiment reward the text is query + response, whatever the prompt was.
    let (q, resp) = words.split_at(words.find(" w360").expect("w360 in the first row"));
    let ctx = SentimentContext::new(q);
    let dynr: Box<dyn Reward<SentimentContext>> = Box::new(r);
    let s = dynr
        .score(&[Sample::new("a longer merged prompt", resp, &ctx)])
        .expect("score");
    assert!((s[0] - got[0]).abs() < 1e-6, "{} vs {}", s[0], got[0]);
    let _ = std::fs::remove_dir_all(&dir);
}
