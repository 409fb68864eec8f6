//! Causal language models in burn for RL fine-tuning.
pub mod error;
pub mod tensors;

pub use error::{ModelError, Result};
pub use tensors::{RawTensor, TensorMap};
