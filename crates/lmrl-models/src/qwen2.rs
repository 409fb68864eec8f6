//! Qwen2 and Qwen2.5 (HF `Qwen2ForCausalLM`): Llama's trunk with a bias on the `q`, `k` and
//! `v` projections (none on `o_proj`), RoPE θ = 10⁶ in the released models, and a head tied to
//! the embedding in the small ones. Built and run as a [`LlamaForCausalLm`] whose
//! [`LlamaConfig`] says so; this file holds what a Qwen2 `config.json` sets apart.
use serde_json::{Value, json};

use crate::config::{Fields, LlamaConfig};
use crate::error::Result;
use crate::llama::LlamaForCausalLm;

/// A Qwen2/Qwen2.5 model: the Llama-family decoder with Qwen2's options.
pub type Qwen2ForCausalLm = LlamaForCausalLm;

/// Qwen2's options: the q/k/v biases and the sliding window.
pub(crate) fn read_options(f: &Fields, c: &mut LlamaConfig) -> Result<()> {
    c.qkv_bias = true;
    c.sliding_window = sliding_window(f, c.num_hidden_layers)?;
    Ok(())
}

/// The attention window, shared with Qwen3: `sliding_window` when `use_sliding_window` is set
/// and some layer slides (a `sliding_attention` entry of `layer_types`, or, in configs without
/// that list, any layer from `max_window_layers` on), else none.
pub(crate) fn sliding_window(f: &Fields, layers: usize) -> Result<Option<usize>> {
    if !f.bool_or("use_sliding_window", false)? {
        return Ok(None);
    }
    let slides = match f.get("layer_types").and_then(|v| v.as_array()) {
        Some(types) => types
            .iter()
            .any(|t| t.as_str() == Some("sliding_attention")),
        None => f.usize_or("max_window_layers", 28)? < layers,
    };
    match slides {
        true => Ok(Some(f.usize_or("sliding_window", 4096)?)),
        false => Ok(None),
    }
}

/// The fields transformers writes for Qwen2 beside the common ones.
pub(crate) fn hf_options(c: &LlamaConfig) -> Value {
    json!({
        "use_sliding_window": c.sliding_window.is_some(),
        "sliding_window": c.sliding_window,
        "max_window_layers": if c.sliding_window.is_some() { 0 } else { c.num_hidden_layers },
    })
}
