//! llama.cpp's Llama layout mapped back to Hugging Face's: tensor names, the Q/K row order
//! of RoPE, and the configuration from the metadata, so that a GGUF checkpoint reaches the
//! model as the same [`TensorMap`] and [`LlamaConfig`] a safetensors one would.
use std::collections::BTreeSet;
use std::path::Path;

use crate::config::{ConfigIssue, DecoderFamily, LlamaConfig, ModelConfig};
use crate::error::{ModelError, Result};
use crate::rope::RopeScaling;
use crate::tensors::TensorMap;

use super::reader::{GgufFile, GgufMetadata, GgufValue, format_err};

/// The Hugging Face name of a llama.cpp Llama tensor, or `None` for names outside the Llama
/// layout (those are kept under their GGUF name).
pub fn hf_tensor_name(gguf_name: &str) -> Option<String> {
    let (stem, suffix) = gguf_name.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    let top = match stem {
        "token_embd" => Some("model.embed_tokens".to_string()),
        "output_norm" => Some("model.norm".to_string()),
        "output" => Some("lm_head".to_string()),
        _ => None,
    };
    if let Some(t) = top {
        return Some(format!("{t}.{suffix}"));
    }
    let rest = stem.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match part {
        "attn_q" => "self_attn.q_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// Undoes llama.cpp's Q/K row permutation.
///
/// `convert_hf_to_gguf.py` reorders the output rows of `q_proj`/`k_proj` so that ggml's
/// interleaved RoPE (rotating pairs `(2i, 2i+1)`) computes what HF's rotate-half RoPE (rotating
/// `(i, i + hd/2)`) computes: per head, rows viewed as `[2, hd/2]` are transposed to `[hd/2, 2]`.
/// Here GGUF row `h·hd + 2i + j` is moved back to HF row `h·hd + j·hd/2 + i`. `rows × cols`
/// is the row-major tensor (`cols = 1` for a bias). Returns `None` when the rows do not split
/// into `n_heads` heads of even size.
pub fn unpermute_rope_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_heads: usize,
) -> Option<Vec<f32>> {
    if n_heads == 0 || !rows.is_multiple_of(n_heads) || data.len() != rows * cols {
        return None;
    }
    let hd = rows / n_heads;
    if !hd.is_multiple_of(2) {
        return None;
    }
    let half = hd / 2;
    let mut out = vec![0.0f32; data.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for j in 0..2 {
                let src = h * hd + 2 * i + j;
                let dst = h * hd + j * half + i;
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    Some(out)
}

/// The inverse of [`unpermute_rope_rows`]: what llama.cpp's converter does to HF rows. Public
/// so that tests (and a future GGUF writer) can produce llama.cpp's layout.
pub fn permute_rope_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_heads: usize,
) -> Option<Vec<f32>> {
    if n_heads == 0
        || !rows.is_multiple_of(n_heads)
        || data.len() != rows * cols
        || !(rows / n_heads).is_multiple_of(2)
    {
        return None;
    }
    let hd = rows / n_heads;
    let half = hd / 2;
    let mut out = vec![0.0f32; data.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for j in 0..2 {
                let hf = h * hd + j * half + i;
                let gg = h * hd + 2 * i + j;
                out[gg * cols..(gg + 1) * cols].copy_from_slice(&data[hf * cols..(hf + 1) * cols]);
            }
        }
    }
    Some(out)
}

/// The GGUF key (after the `{arch}.` prefix) of each `config.json` field, so that a value
/// outside its domain is reported under the name it has in the file.
const GGUF_KEYS: &[(&str, &str)] = &[
    ("vocab_size", "vocab_size"),
    ("hidden_size", "embedding_length"),
    ("intermediate_size", "feed_forward_length"),
    ("num_hidden_layers", "block_count"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("head_dim", "attention.key_length"),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ("rope_theta", "rope.freq_base"),
    ("max_position_embeddings", "context_length"),
];

/// llama.cpp's architectures that are Llama-family decoders, with the family each is.
const ARCHITECTURES: &[(&str, DecoderFamily)] = &[
    ("llama", DecoderFamily::Llama),
    ("qwen2", DecoderFamily::Qwen2),
    ("qwen3", DecoderFamily::Qwen3),
];

/// The metadata of one architecture: keys are read under its `{arch}.` prefix.
struct ArchKeys<'a> {
    meta: &'a GgufMetadata,
    arch: &'a str,
}

impl ArchKeys<'_> {
    fn key(&self, rest: &str) -> String {
        format!("{}.{rest}", self.arch)
    }

    /// The full GGUF key of a `config.json` field (token ids live under `tokenizer.ggml.`).
    fn key_of(&self, field: &str) -> String {
        match field {
            "bos_token_id" | "eos_token_id" => format!("tokenizer.ggml.{field}"),
            _ => GGUF_KEYS
                .iter()
                .find(|(hf, _)| *hf == field)
                .map_or(field.to_string(), |(_, k)| self.key(k)),
        }
    }

    /// A required size: an unsigned integer that fits in `usize`.
    fn size(&self, rest: &str) -> Result<usize> {
        let key = self.key(rest);
        self.opt_size(rest)?
            .ok_or_else(|| self.meta.config_err(&key, "missing"))
    }

    fn opt_size(&self, rest: &str) -> Result<Option<usize>> {
        let key = self.key(rest);
        self.meta
            .opt_u64(&key)?
            .map(|v| {
                usize::try_from(v).map_err(|_| {
                    self.meta
                        .config_err(&key, format!("{v} does not fit in usize"))
                })
            })
            .transpose()
    }
}

fn token_id(meta: &GgufMetadata, key: &str) -> Result<Option<u32>> {
    meta.opt_u64(key)?
        .map(|v| {
            u32::try_from(v).map_err(|_| meta.config_err(key, format!("{v} is not a token id")))
        })
        .transpose()
}

/// The [`LlamaConfig`] of a llama.cpp `llama`, `qwen2` or `qwen3` GGUF, from its metadata
/// (and the names of its tensors, which say whether projections carry biases), with every
/// value checked against its domain ([`LlamaConfig::validate`]) and against the tensor infos
/// (the blocks and the embedding the file holds); errors name the GGUF key.
///
/// Keys (llama.cpp `LLM_KV_*`, under the architecture's prefix): `context_length`,
/// `embedding_length`, `block_count`, `feed_forward_length`, `attention.head_count`,
/// `attention.head_count_kv` (default: head count), `attention.key_length` (default:
/// embedding / heads), `rope.freq_base` (default 10000), `attention.layer_norm_rms_epsilon`,
/// `rope.scaling.type` (`none` or `linear` with `rope.scaling.factor`); vocabulary size from
/// `vocab_size` or the length of `tokenizer.ggml.tokens`; tied embeddings when there is no
/// `output.weight`. Llama 3's RoPE scaling is a tensor (`rope_freqs`), not metadata: the
/// header alone leaves it out, and [`read_gguf`] sets it from the tensor
/// ([`rope_scaling_from_divisors`]).
pub fn llama_config(meta: &GgufMetadata) -> Result<LlamaConfig> {
    let arch = meta
        .architecture()
        .ok_or_else(|| meta.config_err("general.architecture", "missing"))?;
    let Some(&(arch, family)) = ARCHITECTURES.iter().find(|(a, _)| *a == arch) else {
        return Err(meta.config_err(
            "general.architecture",
            format!("`{arch}` is not supported (llama, qwen2 and qwen3 are)"),
        ));
    };
    let k = ArchKeys { meta, arch };
    let heads = k.size("attention.head_count")?;
    let head_dim = k.opt_size("attention.key_length")?;
    if let (Some(kl), Some(vl)) = (head_dim, k.opt_size("attention.value_length")?)
        && kl != vl
    {
        return Err(meta.config_err(
            &k.key("attention.value_length"),
            format!("{vl} differs from key_length {kl}, which is not supported"),
        ));
    }
    let vocab = match k.opt_size("vocab_size")? {
        Some(v) => v,
        None => match meta
            .get("tokenizer.ggml.tokens")
            .and_then(GgufValue::as_array)
        {
            Some(toks) => toks.len(),
            None => meta
                .tensor("token_embd.weight")
                .and_then(|t| t.dims.get(1).copied())
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(|| {
                    meta.config_err(
                        &k.key("vocab_size"),
                        "missing, and no tokenizer.ggml.tokens",
                    )
                })?,
        },
    };
    let eps_key = k.key("attention.layer_norm_rms_epsilon");
    let eps = meta
        .opt_f64(&eps_key)?
        .ok_or_else(|| meta.config_err(&eps_key, "missing"))?;
    let mut c = LlamaConfig::plain(
        vocab,
        k.size("embedding_length")?,
        k.size("feed_forward_length")?,
        k.size("block_count")?,
        heads,
        k.opt_size("attention.head_count_kv")?.unwrap_or(heads),
        k.size("context_length")?,
    );
    c.family = family;
    c.head_dim = head_dim;
    c.rms_norm_eps = eps;
    c.rope_theta = meta.opt_f64(&k.key("rope.freq_base"))?.unwrap_or(10000.0);
    c.tie_word_embeddings = meta.tensor("output.weight").is_none();
    c.bos_token_id = token_id(meta, "tokenizer.ggml.bos_token_id")?;
    c.eos_token_id = token_id(meta, "tokenizer.ggml.eos_token_id")?;
    c.qkv_bias = meta.tensor("blk.0.attn_q.bias").is_some();
    c.o_bias = meta.tensor("blk.0.attn_output.bias").is_some();
    c.mlp_bias = meta.tensor("blk.0.ffn_up.bias").is_some();
    c.qk_norm = meta.tensor("blk.0.attn_q_norm.weight").is_some();
    c.validate()
        .map_err(|ConfigIssue { field, reason }| meta.config_err(&k.key_of(field), reason))?;
    c.head_dim = Some(c.head_dim());
    c.rope_scaling = scaling_from_metadata(&k)?;
    check_tensor_infos(meta, &c)?;
    Ok(c)
}

/// `{arch}.rope.scaling.type`: `none`, or `linear` with its factor; others are refused.
fn scaling_from_metadata(k: &ArchKeys) -> Result<Option<RopeScaling>> {
    let type_key = k.key("rope.scaling.type");
    match k.meta.get_str(&type_key) {
        None | Some("none") => Ok(None),
        Some("linear") => {
            let factor_key = k.key("rope.scaling.factor");
            let factor = k
                .meta
                .opt_f64(&factor_key)?
                .filter(|f| f.is_finite() && *f > 0.0)
                .ok_or_else(|| k.meta.config_err(&factor_key, "expected a number > 0"))?;
            Ok(Some(RopeScaling::Linear { factor }))
        }
        Some(t) => Err(k.meta.config_err(
            &type_key,
            format!("RoPE scaling `{t}` is not supported (none and linear are)"),
        )),
    }
}

/// Llama 3's `rope_scaling` recovered from the `rope_freqs` divisors llama.cpp's converter
/// writes in its place (`inv_freq[i] / rope_freqs[i]`).
///
/// The divisors are 1 for wavelengths below `old / high_freq_factor`, `factor` above
/// `old / low_freq_factor`, and `1 / ((1 − s)/factor + s)` between, where
/// `s = (old/λ − low) / (high − low)` is affine in `1/λ`. `factor` is the largest divisor; two
/// points of the band between fix the two wavelength bounds, and with `low_freq_factor` = 1 (as
/// in every Llama 3.x release) `old` and `high_freq_factor` follow. The result is accepted only
/// if it reproduces every divisor to 1e-5; a band with fewer than two points cannot be
/// recovered and is refused.
pub fn rope_scaling_from_divisors(
    divisors: &[f64],
    head_dim: usize,
    theta: f64,
) -> Option<RopeScaling> {
    let factor = divisors.iter().copied().fold(f64::NAN, f64::max);
    if divisors.len() != head_dim / 2 || !(factor.is_finite() && factor > 1.0) {
        return None;
    }
    let inv = crate::rope::inv_freq(head_dim, theta, None);
    // (1/λ, s) for each divisor strictly inside the band.
    let band: Vec<(f64, f64)> = divisors
        .iter()
        .zip(&inv)
        .filter(|(d, _)| **d > 1.0 + 1e-6 && **d < factor - 1e-6)
        .map(|(d, f)| {
            let s = (1.0 / d - 1.0 / factor) / (1.0 - 1.0 / factor);
            (*f as f64 / (2.0 * std::f64::consts::PI), s)
        })
        .collect();
    let [(x0, s0), .., (x1, s1)] = band[..] else {
        return None;
    };
    // s = a·(1/λ) − b with a = old / (high − low), b = low / (high − low), low = 1.
    let a = (s1 - s0) / (x1 - x0);
    let b = a * x0 - s0;
    if !(a > 0.0 && b > 0.0) {
        return None;
    }
    let old = a / b;
    // The divisors are f32: the parameters are known to about six digits, and a config states
    // them in few (8, 4, 8192), so they are rounded there before the check below.
    let six_digits = |x: f64| format!("{x:.5e}").parse::<f64>().unwrap_or(x);
    let scaling = RopeScaling::Llama3 {
        factor: six_digits(factor),
        low_freq_factor: 1.0,
        high_freq_factor: six_digits(1.0 + 1.0 / b),
        original_max_position_embeddings: old.round() as usize,
    };
    let again = scaling.frequency_divisors(head_dim, theta);
    let close = again
        .iter()
        .zip(divisors)
        .all(|(x, y)| (x - y).abs() <= 1e-5 * y.abs());
    close.then_some(scaling)
}

/// The HF `config.json` equivalent of a llama.cpp Llama GGUF's metadata (see
/// [`llama_config`], which checks it).
pub fn llama_hf_config_json(meta: &GgufMetadata) -> Result<serde_json::Value> {
    Ok(ModelConfig::Llama(llama_config(meta)?).to_hf_json())
}

/// Checks the configuration against the tensor infos: the file holds every block the
/// configuration names, and the embedding has its shape.
fn check_tensor_infos(meta: &GgufMetadata, c: &LlamaConfig) -> Result<()> {
    let blocks: BTreeSet<usize> = meta
        .tensors
        .iter()
        .filter_map(|t| t.name.strip_prefix("blk.")?.split_once('.')?.0.parse().ok())
        .collect();
    if let Some(missing) = (0..c.num_hidden_layers).find(|i| !blocks.contains(i)) {
        return Err(meta.config_err(
            &format!("{}.block_count", c.family.model_type()),
            format!(
                "{} blocks, but the file has no tensors for block {missing} (it has {} blocks)",
                c.num_hidden_layers,
                blocks.len()
            ),
        ));
    }
    let embd = meta
        .tensor("token_embd.weight")
        .ok_or_else(|| ModelError::MissingTensor {
            path: meta.path.clone(),
            tensor: "token_embd.weight".into(),
        })?;
    let expected = [c.hidden_size as u64, c.vocab_size as u64];
    if embd.dims != expected {
        let (field, value) = if embd.dims.get(1) != Some(&expected[1]) {
            ("vocab_size", c.vocab_size)
        } else {
            ("embedding_length", c.hidden_size)
        };
        let field = format!("{}.{field}", c.family.model_type());
        return Err(meta.config_err(
            &field,
            format!(
                "{value} does not match token_embd.weight, whose dims are {:?} (expected {expected:?})",
                embd.dims
            ),
        ));
    }
    Ok(())
}

/// Reads a Llama GGUF: an HF-style config, every tensor dequantised to f32 under its HF name in
/// HF layout (Q/K rows un-permuted to rotate-half RoPE order), and the metadata (which holds
/// the tokenizer). The header is read once; then each tensor's bytes are read once, in file
/// order.
pub fn read_gguf(path: &Path) -> Result<(ModelConfig, TensorMap, GgufMetadata)> {
    let file = GgufFile::open(path)?;
    let meta = &file.meta;
    // Before anything else, so that a file this reader cannot use costs no dequantisation.
    if let Some(t) = meta
        .tensors
        .iter()
        .find(|t| t.ggml_type.block_layout().is_none())
    {
        return Err(ModelError::UnsupportedDtype {
            path: meta.path.clone(),
            tensor: t.name.clone(),
            dtype: t.ggml_type.name(),
        });
    }
    let mut c = llama_config(meta)?;
    let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);
    // llama.cpp's converter permutes Q/K rows for its `llama` architecture only.
    let permuted = c.family == DecoderFamily::Llama;

    let mut order: Vec<_> = meta.tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    let mut map = TensorMap::new(path);
    for info in order {
        let mut t = file.tensor_f32(info)?;
        let name = hf_tensor_name(&info.name).unwrap_or_else(|| info.name.clone());
        let rope_heads = if !permuted {
            None
        } else if name.contains(".self_attn.q_proj.") {
            Some(heads)
        } else if name.contains(".self_attn.k_proj.") {
            Some(kv_heads)
        } else {
            None
        };
        if let Some(n_heads) = rope_heads {
            let rows = t.shape[0];
            let cols = t.shape[1..].iter().product();
            t.data = unpermute_rope_rows(&t.data, rows, cols, n_heads).ok_or_else(|| {
                format_err(
                    path,
                    format!(
                        "tensor `{}` with shape {:?} does not split into {n_heads} heads of even size",
                        info.name, t.shape
                    ),
                )
            })?;
        }
        map.insert(name, t);
    }
    if let Some(freqs) = map.tensors.remove(ROPE_FREQS) {
        c.rope_scaling = Some(scaling_from_rope_freqs(path, &freqs.data, &c)?);
    }
    Ok((ModelConfig::Llama(c), map, file.meta))
}

/// llama.cpp's tensor of per-frequency RoPE divisors (Llama 3.1 and later).
const ROPE_FREQS: &str = "rope_freqs.weight";

fn scaling_from_rope_freqs(path: &Path, divisors: &[f32], c: &LlamaConfig) -> Result<RopeScaling> {
    if c.rope_scaling.is_some() {
        return Err(format_err(
            path,
            format!("`{ROPE_FREQS}` and a rope.scaling.type both scale RoPE"),
        ));
    }
    let divisors: Vec<f64> = divisors.iter().map(|&d| d as f64).collect();
    rope_scaling_from_divisors(&divisors, c.head_dim(), c.rope_theta).ok_or_else(|| {
        format_err(
            path,
            format!("`{ROPE_FREQS}` holds divisors that no llama3 rope_scaling reproduces"),
        )
    })
}
