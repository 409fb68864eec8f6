//! `DistilBertForSequenceClassification` (Sanh et al. 2019) in burn, loaded from a Hugging Face
//! checkpoint (`config.json` + `model.safetensors`), with its WordPiece tokenizer.
//!
//! Architecture, as in `transformers`' `modeling_distilbert.py`:
//! word + learned position embeddings → LayerNorm (ε = 1e-12) → `n_layers` × [multi-head
//! self-attention (scores `QKᵀ/√d_head`, padded keys masked) → `sa_layer_norm(attn + x)` →
//! FFN `lin2(gelu(lin1(h)))` → `output_layer_norm(ffn + h)`] → the `[CLS]` (first) hidden state →
//! `pre_classifier` → ReLU → `classifier`. Dropout is inference-off throughout.
//!
//! The reward is the POSITIVE logit, `logits[:, 1]` (the gpt2-imdb sentiment reward of TRL's
//! examples, `lvwerra/distilbert-imdb` logits).
use std::path::{Path, PathBuf};

use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::{gelu, relu, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};
use lmrl_models::TensorMap;
use serde::Deserialize;
use tokenizers::Tokenizer;

use crate::{RewardError, TextScorer};

/// LayerNorm epsilon of DistilBERT (hard-coded in `transformers`).
const LN_EPS: f64 = 1e-12;

/// The fields of a DistilBERT `config.json` that the forward pass needs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct DistilBertConfig {
    pub vocab_size: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub hidden_dim: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_activation")]
    pub activation: String,
    #[serde(default)]
    pub pad_token_id: u32,
    /// Number of labels = len(id2label) (2 for binary sentiment).
    #[serde(default)]
    pub id2label: std::collections::BTreeMap<String, String>,
}

fn default_activation() -> String {
    "gelu".into()
}

impl DistilBertConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, RewardError> {
        let text = std::fs::read_to_string(path).map_err(|e| RewardError::io(path, e))?;
        let cfg: Self = serde_json::from_str(&text).map_err(|e| {
            RewardError::format(path, "<root>", format!("a DistilBERT config ({e})"))
        })?;
        if cfg.n_heads == 0 || !cfg.dim.is_multiple_of(cfg.n_heads) {
            return Err(RewardError::format(
                path,
                "n_heads",
                format!("a divisor of dim = {}, found {}", cfg.dim, cfg.n_heads),
            ));
        }
        if cfg.activation != "gelu" && cfg.activation != "relu" {
            return Err(RewardError::format(
                path,
                "activation",
                format!("\"gelu\" or \"relu\", found {:?}", cfg.activation),
            ));
        }
        Ok(cfg)
    }

    /// Number of output classes (2 when `id2label` is absent).
    pub fn num_labels(&self) -> usize {
        if self.id2label.is_empty() {
            2
        } else {
            self.id2label.len()
        }
    }

    /// Index of the positive class: the label named POSITIVE/POS (case-insensitive), else 1.
    pub fn positive_index(&self) -> usize {
        self.id2label
            .iter()
            .find(|(_, v)| matches!(v.to_ascii_uppercase().as_str(), "POSITIVE" | "POS"))
            .and_then(|(k, _)| k.parse().ok())
            .unwrap_or(1)
    }
}

#[derive(Module, Debug)]
struct Attention {
    q_lin: Linear,
    k_lin: Linear,
    v_lin: Linear,
    out_lin: Linear,
    n_heads: usize,
}

#[derive(Module, Debug)]
struct Layer {
    attention: Attention,
    sa_layer_norm: LayerNorm,
    lin1: Linear,
    lin2: Linear,
    output_layer_norm: LayerNorm,
    relu_ffn: bool,
}

/// `DistilBertForSequenceClassification` (inference).
#[derive(Module, Debug)]
pub struct DistilBert {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    pre_classifier: Linear,
    classifier: Linear,
    #[module(skip)]
    config: DistilBertConfig,
}

fn linear(
    t: &mut TensorMap,
    name: &str,
    d_in: usize,
    d_out: usize,
    device: &Device,
) -> Result<Linear, RewardError> {
    let w = t
        .take(&format!("{name}.weight"), &[d_out, d_in])?
        .transposed();
    let b = t.tensor::<1>(&format!("{name}.bias"), [d_out], device)?;
    let mut lin = LinearConfig::new(d_in, d_out).init(device);
    lin.weight = Param::from_tensor(Tensor::from_data(TensorData::new(w.data, w.shape), device));
    lin.bias = Some(Param::from_tensor(b));
    Ok(lin)
}

fn layer_norm(
    t: &mut TensorMap,
    name: &str,
    d: usize,
    device: &Device,
) -> Result<LayerNorm, RewardError> {
    let mut ln = LayerNormConfig::new(d).with_epsilon(LN_EPS).init(device);
    ln.gamma = Param::from_tensor(t.tensor::<1>(&format!("{name}.weight"), [d], device)?);
    ln.beta = Some(Param::from_tensor(t.tensor::<1>(
        &format!("{name}.bias"),
        [d],
        device,
    )?));
    Ok(ln)
}

fn embedding(
    t: &mut TensorMap,
    name: &str,
    n: usize,
    d: usize,
    device: &Device,
) -> Result<Embedding, RewardError> {
    let mut e = EmbeddingConfig::new(n, d).init(device);
    e.weight = Param::from_tensor(t.tensor::<2>(&format!("{name}.weight"), [n, d], device)?);
    Ok(e)
}

/// Loads a DistilBERT sequence classifier from an HF directory (`config.json`,
/// `model.safetensors`). HF `nn.Linear` weights are `[out, in]` and are transposed for burn.
pub fn load_distilbert(dir: &Path, device: &Device) -> Result<DistilBert, RewardError> {
    let config = DistilBertConfig::from_file(&dir.join("config.json"))?;
    let tensors = TensorMap::from_safetensors(&dir.join("model.safetensors"))?;
    DistilBert::from_tensors(config, tensors, device)
}

impl DistilBert {
    /// Builds the model from HF-named tensors (prefix `distilbert.` for the encoder).
    pub fn from_tensors(
        config: DistilBertConfig,
        mut t: TensorMap,
        device: &Device,
    ) -> Result<Self, RewardError> {
        let c = &config;
        let d = c.dim;
        let p = "distilbert";
        let word_embeddings = embedding(
            &mut t,
            &format!("{p}.embeddings.word_embeddings"),
            c.vocab_size,
            d,
            device,
        )?;
        let position_embeddings = embedding(
            &mut t,
            &format!("{p}.embeddings.position_embeddings"),
            c.max_position_embeddings,
            d,
            device,
        )?;
        let embed_norm = layer_norm(&mut t, &format!("{p}.embeddings.LayerNorm"), d, device)?;
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let l = format!("{p}.transformer.layer.{i}");
            let attention = Attention {
                q_lin: linear(&mut t, &format!("{l}.attention.q_lin"), d, d, device)?,
                k_lin: linear(&mut t, &format!("{l}.attention.k_lin"), d, d, device)?,
                v_lin: linear(&mut t, &format!("{l}.attention.v_lin"), d, d, device)?,
                out_lin: linear(&mut t, &format!("{l}.attention.out_lin"), d, d, device)?,
                n_heads: c.n_heads,
            };
            layers.push(Layer {
                attention,
                sa_layer_norm: layer_norm(&mut t, &format!("{l}.sa_layer_norm"), d, device)?,
                lin1: linear(&mut t, &format!("{l}.ffn.lin1"), d, c.hidden_dim, device)?,
                lin2: linear(&mut t, &format!("{l}.ffn.lin2"), c.hidden_dim, d, device)?,
                output_layer_norm: layer_norm(
                    &mut t,
                    &format!("{l}.output_layer_norm"),
                    d,
                    device,
                )?,
                relu_ffn: c.activation == "relu",
            });
        }
        let pre_classifier = linear(&mut t, "pre_classifier", d, d, device)?;
        let classifier = linear(&mut t, "classifier", d, c.num_labels(), device)?;
        Ok(Self {
            word_embeddings,
            position_embeddings,
            embed_norm,
            layers,
            pre_classifier,
            classifier,
            config,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &DistilBertConfig {
        &self.config
    }

    /// Classification logits `[B, num_labels]` for `input_ids` / `attention_mask` `[B, S]`
    /// (1 = real token, 0 = padding; padded keys are masked out of attention, as in HF).
    /// The caller keeps ids below `vocab_size` and `S ≤ max_position_embeddings`
    /// ([`DistilBert::check_inputs`] validates host-side ids).
    pub fn logits(&self, input_ids: Tensor<2, Int>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
        let [b, s] = input_ids.dims();
        let device = input_ids.device();
        let positions = Tensor::<1, Int>::arange(0..s as i64, &device)
            .unsqueeze_dim::<2>(0)
            .repeat_dim(0, b);
        let x =
            self.word_embeddings.forward(input_ids) + self.position_embeddings.forward(positions);
        let mut h = self.embed_norm.forward(x);
        // [B, 1, 1, S] true where the key is padding.
        let key_pad = attention_mask
            .equal_elem(0)
            .unsqueeze_dim::<3>(1)
            .unsqueeze_dim::<4>(1);
        for layer in &self.layers {
            h = layer.forward(h, key_pad.clone());
        }
        let d = self.config.dim;
        let cls = h.slice([0..b, 0..1, 0..d]).reshape([b, d]);
        let pooled = relu(self.pre_classifier.forward(cls));
        self.classifier.forward(pooled)
    }

    /// Validates host-side token ids against the vocabulary and context size.
    pub fn check_inputs(&self, ids: &[Vec<u32>]) -> Result<(), RewardError> {
        let c = &self.config;
        for (row, r) in ids.iter().enumerate() {
            if r.len() > c.max_position_embeddings {
                return Err(RewardError::Input(format!(
                    "row {row}: {} tokens exceed max_position_embeddings = {}",
                    r.len(),
                    c.max_position_embeddings
                )));
            }
            if let Some((pos, id)) = r
                .iter()
                .enumerate()
                .find(|(_, id)| **id as usize >= c.vocab_size)
            {
                return Err(RewardError::Input(format!(
                    "row {row}, position {pos}: token id {id} ≥ vocab_size {}",
                    c.vocab_size
                )));
            }
        }
        Ok(())
    }

    /// Right-pads id rows with `pad_token_id` and runs [`DistilBert::logits`]; returns the
    /// logits as host rows `[B][num_labels]`.
    pub fn logits_for_ids(
        &self,
        ids: &[Vec<u32>],
        device: &Device,
    ) -> Result<Vec<Vec<f32>>, RewardError> {
        self.check_inputs(ids)?;
        let b = ids.len();
        if b == 0 {
            return Ok(Vec::new());
        }
        let s = ids.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let pad = self.config.pad_token_id as i64;
        let mut id_data = Vec::with_capacity(b * s);
        let mut mask_data = Vec::with_capacity(b * s);
        for r in ids {
            for j in 0..s {
                id_data.push(r.get(j).map_or(pad, |&v| i64::from(v)));
                mask_data.push(i64::from(j < r.len()));
            }
        }
        let input = Tensor::<2, Int>::from_data(TensorData::new(id_data, [b, s]), device);
        let mask = Tensor::<2, Int>::from_data(TensorData::new(mask_data, [b, s]), device);
        let out = self.logits(input, mask);
        let n = self.config.num_labels();
        let flat: Vec<f32> = out
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .map_err(|e| RewardError::Input(format!("reading logits back: {e:?}")))?;
        Ok(flat.chunks(n).map(<[f32]>::to_vec).collect())
    }
}

impl Layer {
    fn forward(&self, x: Tensor<3>, key_pad: Tensor<4, burn::tensor::Bool>) -> Tensor<3> {
        let a = self.attention.forward(x.clone(), key_pad);
        let h = self.sa_layer_norm.forward(a + x);
        let f = self.lin1.forward(h.clone());
        let f = if self.relu_ffn { relu(f) } else { gelu(f) };
        let f = self.lin2.forward(f);
        self.output_layer_norm.forward(f + h)
    }
}

impl Attention {
    fn forward(&self, x: Tensor<3>, key_pad: Tensor<4, burn::tensor::Bool>) -> Tensor<3> {
        let [b, s, d] = x.dims();
        let nh = self.n_heads;
        let hd = d / nh;
        let split = |t: Tensor<3>| t.reshape([b, s, nh, hd]).swap_dims(1, 2);
        let q = split(self.q_lin.forward(x.clone())).div_scalar((hd as f64).sqrt());
        let k = split(self.k_lin.forward(x.clone()));
        let v = split(self.v_lin.forward(x));
        let scores = q.matmul(k.swap_dims(2, 3)); // [B, H, S, S]
        let scores = scores.mask_fill(key_pad.expand([b, nh, s, s]), f32::MIN);
        let w = softmax(scores, 3);
        let ctx = w.matmul(v).swap_dims(1, 2).reshape([b, s, d]);
        self.out_lin.forward(ctx)
    }
}

/// A WordPiece tokenizer for DistilBERT: lower-casing BERT normalisation, BERT
/// pre-tokenisation, WordPiece, `[CLS] … [SEP]`; truncated to the model's context.
pub struct BertTokenizer {
    inner: Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for BertTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertTokenizer")
            .field("path", &self.path)
            .finish()
    }
}

impl BertTokenizer {
    /// `dir/tokenizer.json` if present, else `dir/vocab.txt` (uncased BERT pipeline).
    pub fn load(dir: &Path) -> Result<Self, RewardError> {
        let tj = dir.join("tokenizer.json");
        if tj.is_file() {
            let inner = Tokenizer::from_file(&tj).map_err(|e| RewardError::Tokenizer {
                path: tj.clone(),
                reason: e.to_string(),
            })?;
            return Ok(Self { inner, path: tj });
        }
        Self::from_vocab(&dir.join("vocab.txt"))
    }

    /// Builds the uncased BERT pipeline from a WordPiece `vocab.txt`.
    pub fn from_vocab(vocab: &Path) -> Result<Self, RewardError> {
        use tokenizers::models::wordpiece::WordPiece;
        use tokenizers::normalizers::BertNormalizer;
        use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
        use tokenizers::processors::bert::BertProcessing;
        let err = |reason: String| RewardError::Tokenizer {
            path: vocab.to_path_buf(),
            reason,
        };
        let path_str = vocab
            .to_str()
            .ok_or_else(|| err("path is not UTF-8".into()))?;
        if !vocab.is_file() {
            return Err(RewardError::MissingAsset {
                what: "tokenizer.json or vocab.txt".into(),
                path: vocab.to_path_buf(),
                hint: "save the classifier's tokenizer next to its weights".into(),
            });
        }
        let wp = WordPiece::from_file(path_str)
            .unk_token("[UNK]".into())
            .build()
            .map_err(|e| err(e.to_string()))?;
        let mut inner = Tokenizer::new(wp);
        let id = |t: &str| {
            inner
                .token_to_id(t)
                .ok_or_else(|| err(format!("vocabulary lacks {t}")))
        };
        let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
        inner
            .with_normalizer(Some(BertNormalizer::new(true, true, None, true)))
            .with_pre_tokenizer(Some(BertPreTokenizer))
            .with_post_processor(Some(BertProcessing::new(
                ("[SEP]".into(), sep),
                ("[CLS]".into(), cls),
            )));
        Ok(Self {
            inner,
            path: vocab.to_path_buf(),
        })
    }

    /// Token ids with `[CLS]`/`[SEP]`, truncated to `max_len` (keeping the final `[SEP]`).
    pub fn encode(&self, text: &str, max_len: usize) -> Result<Vec<u32>, RewardError> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| RewardError::Tokenizer {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
        let mut ids = enc.get_ids().to_vec();
        if ids.len() > max_len && max_len >= 2 {
            let last = ids[ids.len() - 1];
            ids.truncate(max_len - 1);
            ids.push(last);
        }
        Ok(ids)
    }
}

/// DistilBERT classifier + tokenizer as a [`TextScorer`]: the POSITIVE logit of each text.
pub struct DistilBertReward {
    model: DistilBert,
    tokenizer: BertTokenizer,
    device: Device,
}

impl std::fmt::Debug for DistilBertReward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistilBertReward")
            .field("config", self.model.config())
            .field("tokenizer", &self.tokenizer)
            .finish_non_exhaustive()
    }
}

impl DistilBertReward {
    /// Loads model and tokenizer from one HF directory.
    pub fn load(dir: &Path, device: &Device) -> Result<Self, RewardError> {
        Ok(Self {
            model: load_distilbert(dir, device)?,
            tokenizer: BertTokenizer::load(dir)?,
            device: device.clone(),
        })
    }
}

impl TextScorer for DistilBertReward {
    fn name(&self) -> &str {
        "distilbert"
    }

    fn score_texts(&self, texts: &[&str]) -> Result<Vec<f32>, RewardError> {
        let max = self.model.config().max_position_embeddings;
        let ids = texts
            .iter()
            .map(|t| self.tokenizer.encode(t, max))
            .collect::<Result<Vec<_>, _>>()?;
        let pos = self.model.config().positive_index();
        let logits = self.model.logits_for_ids(&ids, &self.device)?;
        logits
            .iter()
            .map(|row| {
                row.get(pos).copied().ok_or_else(|| {
                    RewardError::Input(format!("no logit for the positive class {pos}"))
                })
            })
            .collect()
    }
}
