//! Causal language models in burn for RL fine-tuning.
pub mod attention;
pub mod cache;
pub mod config;
pub mod error;
pub mod generation;
pub mod gguf;
pub mod gpt2;
pub mod llama;
pub mod loader;
pub mod lora;
pub mod model;
pub mod sampling;
pub mod scoring;
pub mod tensors;
pub mod tokenizer;
pub mod value_head;

pub use cache::KvCache;
pub use config::{Gpt2Config, LlamaConfig, ModelConfig};
pub use error::{ModelError, Result};
pub use generation::{Generation, generate};
pub use gguf::{GgufFile, GgufMetadata, GgufValue, read_gguf};
pub use loader::{causal_lm_from_tensors, load_causal_lm, save_pretrained};
pub use lora::{LoraConfig, apply_lora, merge_lora};
pub use model::{CausalLm, LmOutput};
pub use sampling::{GenerationConfig, Sampling};
pub use scoring::{
    QueryResponseBatch, RefScored, Scored, response_logprobs, response_values, score,
    score_reference,
};
pub use tensors::{RawTensor, TensorMap};
pub use tokenizer::LmTokenizer;
pub use value_head::{LmWithValueHead, ValueHead, ValueHeadInit};
