//! [`AutoLm`]: the architectures this crate ships, behind one type (Hugging Face
//! `AutoModelForCausalLM`), as the loaders return them.
use std::path::Path;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor};

use crate::cache::KvCache;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::gpt2::Gpt2LmHeadModel;
use crate::llama::LlamaForCausalLm;
use crate::lm::CausalLm;
use crate::packing::Packing;
use crate::pretrained::Pretrained;
use crate::tensors::RawTensor;

/// A GPT-2 or Llama causal LM, whichever a checkpoint holds.
///
/// The training code is generic over [`CausalLm`]; this enum is only how the loaders hand back
/// a model whose architecture is known at run time. A new architecture does not go here: it
/// implements [`CausalLm`] (and [`Pretrained`] to be saved in Hugging Face format) itself.
#[derive(Module, Debug)]
pub enum AutoLm {
    Gpt2(Gpt2LmHeadModel),
    Llama(LlamaForCausalLm),
}

impl AutoLm {
    /// A randomly initialised model (HF `_init_weights`: N(0, 0.02) weights, zero biases).
    pub fn init(config: &ModelConfig, device: &Device) -> Self {
        match config {
            ModelConfig::Gpt2(c) => Self::Gpt2(Gpt2LmHeadModel::init(c, device)),
            ModelConfig::Llama(c) => Self::Llama(LlamaForCausalLm::init(c, device)),
        }
    }

    /// Loads a model from a Hugging Face directory (`config.json` + `model.safetensors`, or a
    /// sharded `model.safetensors.index.json`) or from a `.gguf` file.
    pub fn from_pretrained(path: &Path, device: &Device) -> Result<Self> {
        crate::loader::load_causal_lm(path, device)
    }

    /// The hyper-parameters this model was built from.
    pub fn config(&self) -> ModelConfig {
        match self {
            Self::Gpt2(m) => ModelConfig::Gpt2(m.config.clone()),
            Self::Llama(m) => ModelConfig::Llama(m.config.clone()),
        }
    }
}

impl CausalLm for AutoLm {
    fn hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        match self {
            Self::Gpt2(m) => m.hidden_states(input_ids, position_ids, attention_mask, cache),
            Self::Llama(m) => m.hidden_states(input_ids, position_ids, attention_mask, cache),
        }
    }

    fn packed_hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        packing: &Packing,
    ) -> Tensor<3> {
        match self {
            Self::Gpt2(m) => m.packed_hidden_states(input_ids, position_ids, packing),
            Self::Llama(m) => m.packed_hidden_states(input_ids, position_ids, packing),
        }
    }

    fn lm_head(&self, hidden: Tensor<2>) -> Tensor<2> {
        match self {
            Self::Gpt2(m) => m.lm_head(hidden),
            Self::Llama(m) => m.lm_head(hidden),
        }
    }

    fn vocab_size(&self) -> usize {
        self.config().vocab_size()
    }

    fn hidden_size(&self) -> usize {
        self.config().hidden_size()
    }

    fn max_positions(&self) -> usize {
        self.config().max_positions()
    }

    fn eos_token_id(&self) -> Option<u32> {
        self.config().eos_token_id()
    }
}

impl Pretrained for AutoLm {
    fn hf_config(&self) -> serde_json::Value {
        self.config().to_hf_json()
    }

    fn hf_tensors(&self) -> Vec<(String, RawTensor)> {
        match self {
            Self::Gpt2(m) => m.hf_tensors(),
            Self::Llama(m) => m.hf_tensors(),
        }
    }

    /// burn's path starts with the variant; GPT-2's fields sit under HF's `transformer.`.
    fn hf_module_name(&self, module_path: &str) -> String {
        match self {
            Self::Gpt2(_) => {
                let p = module_path.strip_prefix("Gpt2.").unwrap_or(module_path);
                format!("transformer.{p}")
            }
            Self::Llama(_) => {
                let p = module_path.strip_prefix("Llama.").unwrap_or(module_path);
                p.to_string()
            }
        }
    }
}
