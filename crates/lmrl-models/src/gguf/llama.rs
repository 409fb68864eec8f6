//! llama.cpp's Llama layout mapped back to Hugging Face's: tensor names, the Q/K row order
//! of RoPE, and the configuration from the metadata, so that a GGUF checkpoint reaches the
//! model as the same [`TensorMap`] and configuration a safetensors one would.
use std::path::Path;

use crate::config::ModelConfig;
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

/// The HF `config.json` equivalent of a llama.cpp Llama GGUF's metadata.
///
/// Keys (llama.cpp `LLM_KV_*`): `llama.context_length`, `.embedding_length`, `.block_count`,
/// `.feed_forward_length`, `.attention.head_count`, `.attention.head_count_kv` (default: head
/// count), `.attention.key_length` (default: embedding / heads), `.rope.freq_base` (default
/// 10000), `.attention.layer_norm_rms_epsilon`; vocabulary size from `llama.vocab_size` or the
/// length of `tokenizer.ggml.tokens`; tied embeddings when there is no `output.weight`.
pub fn llama_hf_config_json(meta: &GgufMetadata) -> Result<serde_json::Value> {
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
    let hidden = meta.require_u64("llama.embedding_length")?;
    let heads = meta.require_u64("llama.attention.head_count")?;
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(meta.config_err(
            "llama.attention.head_count",
            format!("{heads} heads do not divide embedding_length {hidden}"),
        ));
    }
    let kv_heads = meta
        .opt_u64("llama.attention.head_count_kv")?
        .unwrap_or(heads);
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(meta.config_err(
            "llama.attention.head_count_kv",
            format!("{kv_heads} key/value heads do not divide {heads} heads"),
        ));
    }
    let head_dim = meta
        .opt_u64("llama.attention.key_length")?
        .unwrap_or(hidden / heads);
    let vocab = match meta.opt_u64("llama.vocab_size")? {
        Some(v) => v,
        None => match meta
            .get("tokenizer.ggml.tokens")
            .and_then(GgufValue::as_array)
        {
            Some(toks) => toks.len() as u64,
            None => meta
                .tensor("token_embd.weight")
                .and_then(|t| t.dims.get(1).copied())
                .ok_or_else(|| {
                    meta.config_err("llama.vocab_size", "missing, and no tokenizer.ggml.tokens")
                })?,
        },
    };
    let eps = meta
        .opt_f64("llama.attention.layer_norm_rms_epsilon")?
        .ok_or_else(|| meta.config_err("llama.attention.layer_norm_rms_epsilon", "missing"))?;
    let rope_theta = meta.opt_f64("llama.rope.freq_base")?.unwrap_or(10000.0);
    let tie = meta.tensor("output.weight").is_none();
    let mut cfg = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": false,
        "mlp_bias": false,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": meta.require_u64("llama.feed_forward_length")?,
        "num_hidden_layers": meta.require_u64("llama.block_count")?,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": eps,
        "rope_theta": rope_theta,
        "max_position_embeddings": meta.require_u64("llama.context_length")?,
        "tie_word_embeddings": tie,
    });
    for (key, field) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ] {
        if let Some(id) = meta.opt_u64(key)? {
            cfg[field] = serde_json::json!(id);
        }
    }
    Ok(cfg)
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
    let config = ModelConfig::from_hf_json(path, &llama_hf_config_json(meta)?)?;
    let heads = meta.require_u64("llama.attention.head_count")? as usize;
    let kv_heads = meta
        .opt_u64("llama.attention.head_count_kv")?
        .map_or(heads, |v| v as usize);

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
    Ok((config, map, file.meta))
}
