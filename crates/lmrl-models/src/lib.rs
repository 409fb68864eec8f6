//! Causal language models in burn for RL fine-tuning.
//!
//! - [`CausalLm`]: the trait generation, scoring, the value head, LoRA and the RL learners are
//!   written against. GPT-2 ([`Gpt2LmHeadModel`]) and the Llama family ([`LlamaForCausalLm`]:
//!   Llama 2/3.x, SmolLM2, and Mistral, Qwen2/Qwen2.5 and Qwen3, whose differences are options of
//!   [`LlamaConfig`] set by [`DecoderFamily`]) implement it; so can any other architecture,
//!   without an edit here ([`attention`] has the pieces GPT-2 and Llama share).
//! - [`AutoLm`]: what the loaders return — a model read from a Hugging Face directory
//!   (`config.json` + safetensors, sharded or not, f32/f16/bf16) or a GGUF file
//!   ([`AutoLm::from_pretrained`]); saved back in Hugging Face format through
//!   [`Pretrained::save_pretrained`], or with its tokenizer in one call
//!   ([`Pretrained::save_pretrained_with_tokenizer`]).
//! - [`generate`]: batched sampling with a KV cache, as HF `generate`, set by a
//!   [`GenerationConfig`] (`GenerationConfig::for_tokenizer(&tok).with_max_new_tokens(n)`);
//!   [`score`] / [`score_reference`]: TRL's `batched_forward_pass` at the response tokens.
//! - [`LmWithValueHead`]: TRL's `AutoModelForCausalLMWithValueHead`; [`apply_lora`]: LoRA
//!   adapters; [`LmTokenizer`]: GPT-2 BPE, `tokenizer.json` and GGUF vocabularies, with the
//!   model's EOS ids and [`ChatTemplate`] (rendered as transformers' `apply_chat_template`).
//! - [`HostMemory`]: heap settings a CPU-backend program may apply first in `main`, so that
//!   tensor buffers are reused instead of page-faulted in anew each step; [`WriteMode`]: whether
//!   checkpoint files are written past the page cache. Both are off unless the program asks.
mod activation;
pub mod attention;
mod auto;
mod cache;
mod chat;
mod config;
mod error;
mod file_write;
#[cfg(feature = "flex")]
mod fused;
mod generation;
pub mod gguf;
mod gpt2;
mod host_memory;
mod layers;
mod llama;
mod lm;
mod loader;
mod log_softmax;
mod lora;
mod mistral;
mod packing;
mod peft;
mod pretrained;
mod qwen2;
mod qwen3;
mod rope;
mod sampling;
mod scoring;
mod tensors;
mod tokenizer;
mod value_head;

pub use activation::{Activation, gelu_tanh, silu};
pub use auto::AutoLm;
pub use cache::{KvCache, LayerKv};
pub use chat::{ChatMessage, ChatTemplate};
pub use config::{DecoderFamily, Gpt2Config, LlamaConfig, ModelConfig};
pub use error::{ModelError, Result};
pub use file_write::{WriteMode, set_write_mode, write_mode};
#[cfg(feature = "flex")]
pub use fused::simd_allowed as simd_kernels_allowed;
pub use generation::{Generation, generate, left_pad, validate_prompts};
pub use gpt2::{Gpt2Attention, Gpt2Block, Gpt2LmHeadModel, Gpt2Mlp};
pub use host_memory::{AppliedHostMemory, HostMemory, HugePageHeap};
pub use layers::dense;
pub use llama::{LlamaAttention, LlamaDecoderLayer, LlamaForCausalLm, LlamaMlp, LlamaModel};
pub use lm::{
    CausalLm, LmOutput, arange_positions, logits_at_every_position, next_token_logprobs,
    validate_ids,
};
pub use loader::{
    CONFIG_FILE, WEIGHTS_FILE, WEIGHTS_INDEX_FILE, causal_lm_from_tensors, read_weights,
    write_atomic, write_atomic_parts, write_safetensors,
};
pub use log_softmax::{entropy_rows, gather_columns, kl_rows, log_softmax};
pub use lora::{LoraBranch, LoraConfig, apply_lora, lora_parameter_count, merge_lora};
pub use mistral::MistralForCausalLm;
pub use packing::Packing;
pub use peft::{
    ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, load_peft_adapter, read_peft_config,
    save_peft_adapter,
};
pub use pretrained::Pretrained;
pub use qwen2::Qwen2ForCausalLm;
pub use qwen3::Qwen3ForCausalLm;
pub use rope::{Rope, RopeScaling};
pub use sampling::{
    Choice, DEFAULT_MAX_NEW_TOKENS, GenerationConfig, Sampling, TokenChooser,
    apply_repetition_penalty, apply_temperature, presence_mask, process_logits, row_seed,
    suppress_early_eos, top_k_filter, top_p_filter,
};
pub use scoring::{
    QueryResponseBatch, RefScored, Scored, response_hidden_and_values, response_hidden_states,
    response_logprobs, response_token_logprobs, response_values, score, score_reference,
};
pub use tensors::{RawTensor, TensorMap};
pub use tokenizer::{GPT2_EOS, LmTokenizer};
pub use value_head::{LmWithValueHead, VALUE_HEAD_FILE, ValueHead, ValueHeadInit};
