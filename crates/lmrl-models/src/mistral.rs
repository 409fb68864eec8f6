//! Mistral (HF `MistralForCausalLM`): Llama's trunk without biases, with a `head_dim` that may
//! be set apart from `hidden_size / num_attention_heads` and, in the first releases, a
//! `sliding_window` over which each token attends. Within the window sliding attention is
//! full attention, so sequences up to it are computed exactly and longer ones are refused
//! ([`LlamaConfig::context_length`]). Built and run as a [`LlamaForCausalLm`] whose
//! [`LlamaConfig`] says so.
use serde_json::{Value, json};

use crate::config::{Fields, LlamaConfig};
use crate::error::Result;
use crate::llama::LlamaForCausalLm;

/// A Mistral model: the Llama-family decoder with Mistral's options.
pub type MistralForCausalLm = LlamaForCausalLm;

/// Mistral's options: the sliding window (`null` in later releases).
pub(crate) fn read_options(f: &Fields, c: &mut LlamaConfig) -> Result<()> {
    c.sliding_window = f.opt_usize("sliding_window")?;
    Ok(())
}

/// The fields transformers writes for Mistral beside the common ones.
pub(crate) fn hf_options(c: &LlamaConfig) -> Value {
    json!({ "sliding_window": c.sliding_window })
}
