//! llama.cpp's Llama layout mapped back to Hugging Face's: tensor names, the Q/K row order
//! of RoPE, and the configuration from the metadata, so that a GGUF checkpoint reaches the
//! model as the same [`TensorMap`] and [`LlamaConfig`] a safetensors one would.
use std::collections::BTreeSet;
use std::path::Path;

use crate::config::{ConfigIssue, LlamaConfig, ModelConfig};
use crate::error::{ModelError, Result};
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

/// The GGUF key of each `config.json` field, so that a value outside its domain is reported
/// under the name it has in the file.
const GGUF_KEYS: &[(&str, &str)] = &[
    ("vocab_size", "llama.vocab_size"),
    ("hidden_size", "llama.embedding_length"),
    ("intermediate_size", "llama.feed_forward_length"),
    ("num_hidden_layers", "llama.block_count"),
    ("num_attention_heads", "llama.attention.head_count"),
    ("num_key_value_heads", "llama.attention.head_count_kv"),
    ("head_dim", "llama.attention.key_length"),
    ("rms_norm_eps", "llama.attention.layer_norm_rms_epsilon"),
    ("rope_theta", "llama.rope.freq_base"),
    ("max_position_embeddings", "llama.context_length"),
    ("bos_token_id", "tokenizer.ggml.bos_token_id"),
    ("eos_token_id", "tokenizer.ggml.eos_token_id"),
];

fn gguf_key(field: &str) -> &str {
    GGUF_KEYS
        .iter()
        .find(|(hf, _)| *hf == field)
        .map_or(field, |(_, key)| key)
}

/// A required size: an unsigned integer that fits in `usize`.
fn size(meta: &GgufMetadata, key: &str) -> Result<usize> {
    let v = meta.require_u64(key)?;
    usize::try_from(v).map_err(|_| meta.config_err(key, format!("{v} does not fit in usize")))
}

fn opt_size(meta: &GgufMetadata, key: &str) -> Result<Option<usize>> {
    meta.opt_u64(key)?
        .map(|v| {
            usize::try_from(v)
                .map_err(|_| meta.config_err(key, format!("{v} does not fit in usize")))
        })
        .transpose()
}

fn token_id(meta: &GgufMetadata, key: &str) -> Result<Option<u32>> {
    meta.opt_u64(key)?
        .map(|v| {
            u32::try_from(v).map_err(|_| meta.config_err(key, format!("{v} is not a token id")))
        })
        .transpose()
}

/// The [`LlamaConfig`] of a llama.cpp Llama GGUF, from its metadata alone, with every value
/// checked against its domain ([`LlamaConfig::validate`]) and against the tensor infos (the
/// blocks and the embedding the file holds); errors name the GGUF key.
///
/// Keys (llama.cpp `LLM_KV_*`): `llama.context_length`, `.embedding_length`, `.block_count`,
/// `.feed_forward_length`, `.attention.head_count`, `.attention.head_count_kv` (default: head
/// count), `.attention.key_length` (default: embedding / heads), `.rope.freq_base` (default
/// 10000), `.attention.layer_norm_rms_epsilon`; vocabulary size from `llama.vocab_size` or the
/// length of `tokenizer.ggml.tokens`; tied embeddings when there is no `output.weight`.
pub fn llama_config(meta: &GgufMetadata) -> Result<LlamaConfig> {
    let arch = meta
        .architecture()
        .ok_or_else(|| meta.config_err("general.architecture", "missing"))?;
    if arch != "llama" {
        return Err(meta.config_err(
            "general.architecture",
            format!("`{arch}` is not supported (only llama)"),
        ));
    }
    if let Some(t) = meta.get_str("llama.rope.scaling.type")
        && t != "none"
    {
        return Err(meta.config_err(
            "llama.rope.scaling.type",
            format!("RoPE scaling `{t}` is not supported"),
        ));
    }
    let heads = size(meta, "llama.attention.head_count")?;
    let head_dim = opt_size(meta, "llama.attention.key_length")?;
    if let (Some(k), Some(v)) = (head_dim, opt_size(meta, "llama.attention.value_length")?)
        && k != v
    {
        return Err(meta.config_err(
            "llama.attention.value_length",
            format!("{v} differs from key_length {k}, which is not supported"),
        ));
    }
    let vocab = match opt_size(meta, "llama.vocab_size")? {
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
                    meta.config_err("llama.vocab_size", "missing, and no tokenizer.ggml.tokens")
                })?,
        },
    };
    let eps = meta
        .opt_f64("llama.attention.layer_norm_rms_epsilon")?
        .ok_or_else(|| meta.config_err("llama.attention.layer_norm_rms_epsilon", "missing"))?;
    let c = LlamaConfig {
        vocab_size: vocab,
        hidden_size: size(meta, "llama.embedding_length")?,
        intermediate_size: size(meta, "llama.feed_forward_length")?,
        num_hidden_layers: size(meta, "llama.block_count")?,
        num_attention_heads: heads,
        num_key_value_heads: opt_size(meta, "llama.attention.head_count_kv")?.unwrap_or(heads),
        head_dim,
        rms_norm_eps: eps,
        rope_theta: meta.opt_f64("llama.rope.freq_base")?.unwrap_or(10000.0),
        max_position_embeddings: size(meta, "llama.context_length")?,
        tie_word_embeddings: meta.tensor("output.weight").is_none(),
        bos_token_id: token_id(meta, "tokenizer.ggml.bos_token_id")?,
        eos_token_id: token_id(meta, "tokenizer.ggml.eos_token_id")?,
    };
    c.validate()
        .map_err(|ConfigIssue { field, reason }| meta.config_err(gguf_key(field), reason))?;
    check_tensor_infos(meta, &c)?;
    Ok(c)
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
            "llama.block_count",
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
            ("llama.vocab_size", c.vocab_size)
        } else {
            ("llama.embedding_length", c.hidden_size)
        };
        return Err(meta.config_err(
            field,
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
    let c = llama_config(meta)?;
    let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);

    let mut order: Vec<_> = meta.tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    let mut map = TensorMap::new(path);
    for info in order {
        let mut t = file.tensor_f32(info)?;
        let name = hf_tensor_name(&info.name).unwrap_or_else(|| info.name.clone());
        let rope_heads = if name.contains(".self_attn.q_proj.") {
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
    Ok((ModelConfig::Llama(c), map, file.meta))
}
