//! Qwen3 dense models (HF `Qwen3ForCausalLM`): Llama's trunk with an RMSNorm over each head of
//! `q` and `k` before RoPE (`q_norm`, `k_norm`), a `head_dim` set apart from
//! `hidden_size / num_attention_heads` (128 by default), and `attention_bias` on all four
//! attention projections. Built and run as a [`LlamaForCausalLm`] whose [`LlamaConfig`] says
//! so; this file holds what a Qwen3 `config.json` sets apart.
use serde_json::{Value, json};

use crate::config::{Fields, LlamaConfig};
use crate::error::Result;
use crate::llama::LlamaForCausalLm;

/// A Qwen3 model: the Llama-family decoder with Qwen3's options.
pub type Qwen3ForCausalLm = LlamaForCausalLm;

/// Qwen3's options: per-head q/k norms, its default `head_dim`, biases and window.
pub(crate) fn read_options(f: &Fields, c: &mut LlamaConfig) -> Result<()> {
    c.qk_norm = true;
    c.head_dim = Some(f.usize_or("head_dim", 128)?);
    let bias = f.bool_or("attention_bias", false)?;
    (c.qkv_bias, c.o_bias) = (bias, bias);
    c.sliding_window = crate::qwen2::sliding_window(f, c.num_hidden_layers)?;
    Ok(())
}

/// The fields transformers writes for Qwen3 beside the common ones.
pub(crate) fn hf_options(c: &LlamaConfig) -> Value {
    let mut v = crate::qwen2::hf_options(c);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("attention_bias".into(), json!(c.qkv_bias));
    }
    v
}
