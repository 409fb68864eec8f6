//! Model hyper-parameters, read from and written to Hugging Face `config.json`.
//!
//! Parsing is done field by field (rather than through `serde_json::from_value`) so that every
//! error names the exact `config.json` field that is missing or malformed. Unknown fields are
//! ignored, as `transformers` does.
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::{ModelError, Result};
use crate::rope::{RopeScaling, inv_freq};

/// GPT-2 hyper-parameters (`transformers.GPT2Config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpt2Config {
    pub vocab_size: usize,
    /// Context length: rows of the learned position table `wpe`.
    pub n_positions: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    /// Width of the MLP; `None` means `4 * n_embd`.
    pub n_inner: Option<usize>,
    pub layer_norm_epsilon: f64,
    /// `gelu_new` (tanh approximation, GPT-2's own) or `gelu` (exact erf form).
    pub activation_function: String,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
}

impl Gpt2Config {
    /// MLP width (`n_inner` or `4 * n_embd`).
    pub fn inner_dim(&self) -> usize {
        self.n_inner.unwrap_or(4 * self.n_embd)
    }

    /// Per-head width `n_embd / n_head`.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }
}

/// The Hugging Face decoders that share Llama's trunk (pre-norm RMSNorm blocks, rotate-half
/// RoPE, grouped-query attention, SwiGLU MLP) and differ only in options of [`LlamaConfig`]:
/// which projections carry a bias, per-head q/k norms, the RoPE scaling, the attention window.
/// Each has its own file for what sets it apart (`qwen2.rs`, `qwen3.rs`, `mistral.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DecoderFamily {
    /// `LlamaForCausalLM` (Llama 2, Llama 3.x, SmolLM2, TinyLlama).
    #[default]
    Llama,
    /// `MistralForCausalLM`.
    Mistral,
    /// `Qwen2ForCausalLM` (Qwen2, Qwen2.5).
    Qwen2,
    /// `Qwen3ForCausalLM` (dense Qwen3).
    Qwen3,
}

impl DecoderFamily {
    /// HF `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }

    /// HF `architectures[0]`.
    pub fn architecture(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Mistral => "MistralForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
        }
    }
}

/// Hyper-parameters of the Llama-family decoders (`transformers.LlamaConfig`, and the
/// `MistralConfig`, `Qwen2Config` and `Qwen3Config` that differ from it only in
/// [`DecoderFamily`]'s options), also used for GGUF models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Key/value heads: equal to `num_attention_heads` for multi-head attention, fewer for
    /// grouped-query attention, 1 for multi-query attention.
    pub num_key_value_heads: usize,
    /// Per-head width; `None` means `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    pub rms_norm_eps: f64,
    /// RoPE base θ: inverse frequencies are `θ^(-2i/head_dim)`.
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    /// Whether `lm_head` shares the token embedding matrix.
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// Which HF architecture this is (what `config.json` is written as).
    #[serde(default)]
    pub family: DecoderFamily,
    /// Bias on `q_proj`, `k_proj`, `v_proj` (Qwen2 always; Llama and Qwen3 with
    /// `attention_bias`).
    #[serde(default)]
    pub qkv_bias: bool,
    /// Bias on `o_proj` (Llama and Qwen3 with `attention_bias`).
    #[serde(default)]
    pub o_bias: bool,
    /// Bias on the MLP projections (Llama's `mlp_bias`).
    #[serde(default)]
    pub mlp_bias: bool,
    /// RMSNorm over each head of `q` and `k` before RoPE (Qwen3's `q_norm`, `k_norm`).
    #[serde(default)]
    pub qk_norm: bool,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// Attention span of a sliding-window model. Within the window sliding attention equals
    /// full attention, so sequences up to it are computed exactly and longer ones are refused
    /// ([`LlamaConfig::context_length`]).
    #[serde(default)]
    pub sliding_window: Option<usize>,
}

impl LlamaConfig {
    /// Per-head width (`head_dim` or `hidden_size / num_attention_heads`).
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// The longest sequence this model computes exactly: `max_position_embeddings`, or the
    /// sliding window when that is shorter.
    pub fn context_length(&self) -> usize {
        match self.sliding_window {
            Some(w) => w.min(self.max_position_embeddings),
            None => self.max_position_embeddings,
        }
    }

    /// RoPE inverse frequencies, with `rope_scaling` applied.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        inv_freq(self.head_dim(), self.rope_theta, self.rope_scaling.as_ref())
    }

    /// A Llama config with every option off (no biases, no q/k norms, no RoPE scaling, no
    /// window): the fields every family sets, the rest at Llama's values.
    #[allow(clippy::too_many_arguments)]
    pub fn plain(
        vocab_size: usize,
        hidden_size: usize,
        intermediate_size: usize,
        num_hidden_layers: usize,
        num_attention_heads: usize,
        num_key_value_heads: usize,
        max_position_embeddings: usize,
    ) -> Self {
        Self {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim: None,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            max_position_embeddings,
            tie_word_embeddings: false,
            bos_token_id: None,
            eos_token_id: None,
            family: DecoderFamily::Llama,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
            rope_scaling: None,
            sliding_window: None,
        }
    }
}

/// Upper bound on every width read from a checkpoint (vocabulary, hidden size, MLP width,
/// heads, head dim). The largest real models are two orders of magnitude below it; the bound
/// keeps products such as `3 * n_embd` or `heads * head_dim` far from overflow and rejects
/// corrupt values before anything is sized from them.
pub const MAX_WIDTH: usize = 1 << 24;
/// Upper bound on the layer count (real models have at most a few hundred).
pub const MAX_LAYERS: usize = 1 << 16;
/// Upper bound on the context length: position ids are integer tensors, 32-bit on some
/// backends.
pub const MAX_POSITIONS: usize = i32::MAX as usize;

/// A value outside its domain: the `config.json` field and what was expected. Callers turn
/// it into [`ModelError::Config`] with their own file and, for GGUF, their own key names.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigIssue {
    pub field: &'static str,
    pub reason: String,
}

fn issue(field: &'static str, reason: impl Into<String>) -> ConfigIssue {
    ConfigIssue {
        field,
        reason: reason.into(),
    }
}

fn check_range(field: &'static str, v: usize, min: usize, max: usize) -> Result<(), ConfigIssue> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(issue(field, format!("{v} is outside {min}..={max}")))
    }
}

fn check_positive_finite(field: &'static str, v: f64) -> Result<(), ConfigIssue> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(issue(field, format!("{v} must be a finite number > 0")))
    }
}

fn check_token(field: &'static str, id: Option<u32>, vocab: usize) -> Result<(), ConfigIssue> {
    match id {
        Some(id) if id as usize >= vocab => Err(issue(
            field,
            format!("{id} is outside the vocabulary of {vocab} tokens"),
        )),
        _ => Ok(()),
    }
}

impl Gpt2Config {
    /// Checks every value against its domain, so that nothing sized from the config can
    /// overflow or allocate without bound and no layer is built with an invalid parameter.
    pub fn validate(&self) -> Result<(), ConfigIssue> {
        check_range("vocab_size", self.vocab_size, 1, MAX_WIDTH)?;
        check_range("n_positions", self.n_positions, 1, MAX_POSITIONS)?;
        check_range("n_embd", self.n_embd, 1, MAX_WIDTH)?;
        check_range("n_layer", self.n_layer, 1, MAX_LAYERS)?;
        check_range("n_head", self.n_head, 1, self.n_embd)?;
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(issue(
                "n_head",
                format!("{} must divide n_embd {}", self.n_head, self.n_embd),
            ));
        }
        if let Some(inner) = self.n_inner {
            check_range("n_inner", inner, 1, MAX_WIDTH)?;
        }
        check_positive_finite("layer_norm_epsilon", self.layer_norm_epsilon)?;
        if crate::activation::Activation::from_hf(&self.activation_function).is_none() {
            return Err(issue(
                "activation_function",
                format!(
                    "`{}` is not supported (gelu_new/gelu/gelu_pytorch_tanh/gelu_fast are)",
                    self.activation_function
                ),
            ));
        }
        check_token("bos_token_id", self.bos_token_id, self.vocab_size)?;
        check_token("eos_token_id", self.eos_token_id, self.vocab_size)
    }
}

impl LlamaConfig {
    /// Checks every value against its domain (see [`Gpt2Config::validate`]).
    pub fn validate(&self) -> Result<(), ConfigIssue> {
        check_range("vocab_size", self.vocab_size, 1, MAX_WIDTH)?;
        check_range("hidden_size", self.hidden_size, 1, MAX_WIDTH)?;
        check_range("intermediate_size", self.intermediate_size, 1, MAX_WIDTH)?;
        check_range("num_hidden_layers", self.num_hidden_layers, 1, MAX_LAYERS)?;
        check_range(
            "num_attention_heads",
            self.num_attention_heads,
            1,
            MAX_WIDTH,
        )?;
        let (heads, kv) = (self.num_attention_heads, self.num_key_value_heads);
        if kv == 0 || !heads.is_multiple_of(kv) {
            return Err(issue(
                "num_key_value_heads",
                format!("{kv} must divide num_attention_heads {heads}"),
            ));
        }
        match self.head_dim {
            Some(hd) => check_range("head_dim", hd, 1, MAX_WIDTH)?,
            None if !self.hidden_size.is_multiple_of(heads) => {
                return Err(issue(
                    "num_attention_heads",
                    format!("{heads} must divide hidden_size {}", self.hidden_size),
                ));
            }
            None => {}
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(issue(
                "head_dim",
                format!("{} must be even for RoPE", self.head_dim()),
            ));
        }
        check_range(
            "max_position_embeddings",
            self.max_position_embeddings,
            1,
            MAX_POSITIONS,
        )?;
        check_positive_finite("rms_norm_eps", self.rms_norm_eps)?;
        check_positive_finite("rope_theta", self.rope_theta)?;
        if let Some(w) = self.sliding_window {
            check_range("sliding_window", w, 1, MAX_POSITIONS)?;
        }
        check_token("bos_token_id", self.bos_token_id, self.vocab_size)?;
        check_token("eos_token_id", self.eos_token_id, self.vocab_size)
    }
}

/// The architectures this crate can run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ModelConfig {
    Gpt2(Gpt2Config),
    Llama(LlamaConfig),
}

impl ModelConfig {
    /// Parses an HF `config.json` value; errors name `path` and the offending field.
    ///
    /// The architecture comes from `model_type` (or, failing that, `architectures[0]`);
    /// anything other than GPT-2 or Llama is a [`ModelError::Config`] on `model_type`.
    pub fn from_hf_json(path: &Path, v: &Value) -> Result<Self> {
        let f = Fields { path, v };
        let obj = v
            .as_object()
            .ok_or_else(|| f.err("<root>", "not a JSON object"))?;
        match model_kind(&f, obj)? {
            Kind::Gpt2 => parse_gpt2(&f).map(Self::Gpt2),
            Kind::Decoder(family) => parse_decoder(&f, family).map(Self::Llama),
        }
    }

    /// Reads and parses a `config.json` file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let v: Value = serde_json::from_str(&text).map_err(|e| ModelError::Format {
            path: path.to_path_buf(),
            format: "JSON",
            reason: e.to_string(),
        })?;
        Self::from_hf_json(path, &v)
    }

    /// The HF `config.json` that `transformers` would write for this model.
    pub fn to_hf_json(&self) -> Value {
        match self {
            Self::Gpt2(c) => json!({
                "architectures": ["GPT2LMHeadModel"],
                "model_type": "gpt2",
                "vocab_size": c.vocab_size,
                "n_positions": c.n_positions,
                "n_ctx": c.n_positions,
                "n_embd": c.n_embd,
                "n_layer": c.n_layer,
                "n_head": c.n_head,
                "n_inner": c.n_inner,
                "layer_norm_epsilon": c.layer_norm_epsilon,
                "activation_function": c.activation_function,
                "bos_token_id": c.bos_token_id,
                "eos_token_id": c.eos_token_id,
                "tie_word_embeddings": true,
                "torch_dtype": "float32",
            }),
            Self::Llama(c) => decoder_hf_json(c),
        }
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Gpt2(c) => c.vocab_size,
            Self::Llama(c) => c.vocab_size,
        }
    }

    /// Width of the residual stream (`n_embd` / `hidden_size`): the value head's input size.
    pub fn hidden_size(&self) -> usize {
        match self {
            Self::Gpt2(c) => c.n_embd,
            Self::Llama(c) => c.hidden_size,
        }
    }

    /// Longest sequence (past + new tokens) the model accepts.
    pub fn max_positions(&self) -> usize {
        match self {
            Self::Gpt2(c) => c.n_positions,
            Self::Llama(c) => c.context_length(),
        }
    }

    pub fn eos_token_id(&self) -> Option<u32> {
        match self {
            Self::Gpt2(c) => c.eos_token_id,
            Self::Llama(c) => c.eos_token_id,
        }
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        match self {
            Self::Gpt2(c) => c.bos_token_id,
            Self::Llama(c) => c.bos_token_id,
        }
    }

    pub fn num_layers(&self) -> usize {
        match self {
            Self::Gpt2(c) => c.n_layer,
            Self::Llama(c) => c.num_hidden_layers,
        }
    }
}

enum Kind {
    Gpt2,
    Decoder(DecoderFamily),
}

/// Picks the architecture from `model_type`, else from `architectures[0]`.
fn model_kind(f: &Fields, obj: &Map<String, Value>) -> Result<Kind> {
    const FAMILIES: [DecoderFamily; 4] = [
        DecoderFamily::Llama,
        DecoderFamily::Mistral,
        DecoderFamily::Qwen2,
        DecoderFamily::Qwen3,
    ];
    let supported = "gpt2, llama, mistral, qwen2 and qwen3 are";
    if let Some(mt) = obj.get("model_type").and_then(Value::as_str) {
        if mt == "gpt2" {
            return Ok(Kind::Gpt2);
        }
        return match FAMILIES.into_iter().find(|fam| fam.model_type() == mt) {
            Some(fam) => Ok(Kind::Decoder(fam)),
            None => Err(f.err(
                "model_type",
                &format!("unsupported architecture `{mt}` ({supported})"),
            )),
        };
    }
    let arch = obj
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str);
    match arch {
        Some("GPT2LMHeadModel") | Some("GPT2Model") => Ok(Kind::Gpt2),
        Some("LlamaModel") => Ok(Kind::Decoder(DecoderFamily::Llama)),
        Some(a) => match FAMILIES.into_iter().find(|fam| fam.architecture() == a) {
            Some(fam) => Ok(Kind::Decoder(fam)),
            None => Err(f.err(
                "model_type",
                &format!("unsupported architecture `{a}` ({supported})"),
            )),
        },
        None => Err(f.err("model_type", "missing (and no `architectures` entry)")),
    }
}

fn parse_gpt2(f: &Fields) -> Result<Gpt2Config> {
    let c = Gpt2Config {
        vocab_size: f.usize("vocab_size")?,
        n_positions: f.usize_or("n_positions", 1024)?,
        n_embd: f.usize("n_embd")?,
        n_layer: f.usize("n_layer")?,
        n_head: f.usize("n_head")?,
        n_inner: f.opt_usize("n_inner")?,
        layer_norm_epsilon: f.f64_or("layer_norm_epsilon", 1e-5)?,
        activation_function: f.str_or("activation_function", "gelu_new")?,
        bos_token_id: f.token_id("bos_token_id")?,
        eos_token_id: f.token_id("eos_token_id")?,
    };
    c.validate().map_err(|i| f.err(i.field, &i.reason))?;
    Ok(c)
}

/// The fields every Llama-family `config.json` has, at transformers' defaults for `family`;
/// then the family's own options ([`crate::qwen2`], [`crate::qwen3`], [`crate::mistral`]).
fn parse_decoder(f: &Fields, family: DecoderFamily) -> Result<LlamaConfig> {
    let heads = f.usize("num_attention_heads")?;
    let max_positions = match family {
        DecoderFamily::Llama => 2048,
        DecoderFamily::Mistral => 4096 * 32,
        DecoderFamily::Qwen2 | DecoderFamily::Qwen3 => 32768,
    };
    let mut c = LlamaConfig::plain(
        f.usize("vocab_size")?,
        f.usize("hidden_size")?,
        f.usize("intermediate_size")?,
        f.usize("num_hidden_layers")?,
        heads,
        f.usize_or("num_key_value_heads", heads)?,
        f.usize_or("max_position_embeddings", max_positions)?,
    );
    c.family = family;
    c.head_dim = f.opt_usize("head_dim")?;
    c.rms_norm_eps = f.f64_or("rms_norm_eps", 1e-6)?;
    c.rope_theta = match f.get("rope_parameters").and_then(|p| p.get("rope_theta")) {
        Some(t) => t
            .as_f64()
            .ok_or_else(|| f.err("rope_parameters.rope_theta", "expected a number"))?,
        None => f.f64_or("rope_theta", 10000.0)?,
    };
    c.tie_word_embeddings = f.bool_or("tie_word_embeddings", false)?;
    c.bos_token_id = f.token_id("bos_token_id")?;
    c.eos_token_id = f.token_id("eos_token_id")?;
    c.rope_scaling = rope_scaling(f)?;
    match family {
        DecoderFamily::Llama => {
            let bias = f.bool_or("attention_bias", false)?;
            (c.qkv_bias, c.o_bias) = (bias, bias);
            c.mlp_bias = f.bool_or("mlp_bias", false)?;
        }
        DecoderFamily::Mistral => crate::mistral::read_options(f, &mut c)?,
        DecoderFamily::Qwen2 => crate::qwen2::read_options(f, &mut c)?,
        DecoderFamily::Qwen3 => crate::qwen3::read_options(f, &mut c)?,
    }
    c.validate().map_err(|i| f.err(i.field, &i.reason))?;
    // One spelling of the head width, whether the file states it or implies it.
    c.head_dim = Some(c.head_dim());
    let act = f.str_or("hidden_act", "silu")?;
    if act != "silu" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported (only silu)"),
        ));
    }
    Ok(c)
}

/// `rope_scaling`, or the `rope_parameters` object of configs written by transformers 5
/// (which also carries `rope_theta`, read by [`parse_decoder`] from the top level only when
/// `rope_parameters` does not set it).
fn rope_scaling(f: &Fields) -> Result<Option<RopeScaling>> {
    let (field, v) = match f.get("rope_parameters") {
        Some(p) => ("rope_parameters", Some(p)),
        None => ("rope_scaling", f.get("rope_scaling")),
    };
    RopeScaling::from_hf_json(v).map_err(|i| {
        let name = i.field.replacen("rope_scaling", field, 1);
        f.err(name.trim_end_matches('.'), &i.reason)
    })
}

/// The `config.json` transformers writes for a Llama-family model.
fn decoder_hf_json(c: &LlamaConfig) -> Value {
    let mut v = json!({
        "architectures": [c.family.architecture()],
        "model_type": c.family.model_type(),
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim(),
        "hidden_act": "silu",
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling.as_ref().map(RopeScaling::to_hf_json),
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
        "attention_dropout": 0.0,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "torch_dtype": "float32",
    });
    let extra = match c.family {
        DecoderFamily::Llama => json!({"attention_bias": c.qkv_bias, "mlp_bias": c.mlp_bias}),
        DecoderFamily::Mistral => crate::mistral::hf_options(c),
        DecoderFamily::Qwen2 => crate::qwen2::hf_options(c),
        DecoderFamily::Qwen3 => crate::qwen3::hf_options(c),
    };
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    v
}

/// A JSON value for an error message, cut short so that a huge value cannot flood it.
fn describe(x: &Value) -> String {
    const MAX: usize = 40;
    let s = x.to_string();
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Typed access to the fields of one `config.json`, with errors naming file and field.
pub(crate) struct Fields<'a> {
    path: &'a Path,
    v: &'a Value,
}

impl Fields<'_> {
    pub(crate) fn err(&self, field: &str, reason: &str) -> ModelError {
        ModelError::Config {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            reason: reason.to_string(),
        }
    }

    /// The field's value, `None` when absent or `null`.
    pub(crate) fn get(&self, field: &str) -> Option<&Value> {
        self.v.get(field).filter(|x| !x.is_null())
    }

    pub(crate) fn opt_usize(&self, field: &str) -> Result<Option<usize>> {
        self.get(field)
            .map(|x| {
                x.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        self.err(
                            field,
                            &format!("expected a non-negative integer, found {}", describe(x)),
                        )
                    })
            })
            .transpose()
    }

    pub(crate) fn usize(&self, field: &str) -> Result<usize> {
        self.opt_usize(field)?
            .ok_or_else(|| self.err(field, "missing"))
    }

    pub(crate) fn usize_or(&self, field: &str, default: usize) -> Result<usize> {
        Ok(self.opt_usize(field)?.unwrap_or(default))
    }

    pub(crate) fn f64_or(&self, field: &str, default: f64) -> Result<f64> {
        match self.get(field) {
            None => Ok(default),
            Some(x) => x.as_f64().ok_or_else(|| {
                self.err(field, &format!("expected a number, found {}", describe(x)))
            }),
        }
    }

    pub(crate) fn bool_or(&self, field: &str, default: bool) -> Result<bool> {
        match self.get(field) {
            None => Ok(default),
            Some(x) => x
                .as_bool()
                .ok_or_else(|| self.err(field, "expected a boolean")),
        }
    }

    pub(crate) fn str_or(&self, field: &str, default: &str) -> Result<String> {
        match self.get(field) {
            None => Ok(default.to_string()),
            Some(x) => x
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| self.err(field, "expected a string")),
        }
    }

    /// A token id; HF also allows a list (e.g. several EOS ids), of which the first is kept.
    pub(crate) fn token_id(&self, field: &str) -> Result<Option<u32>> {
        let x = match self.get(field) {
            None => return Ok(None),
            Some(Value::Array(a)) => match a.first() {
                None => return Ok(None),
                Some(first) => first,
            },
            Some(x) => x,
        };
        x.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| self.err(field, "expected a token id"))
    }
}
