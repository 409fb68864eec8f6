//! Writing a model as a Hugging Face checkpoint (`save_pretrained`).
use std::path::Path;

use crate::error::{ModelError, Result};
use crate::loader::{CONFIG_FILE, WEIGHTS_FILE, write_atomic, write_safetensors};
use crate::tensors::RawTensor;
use crate::tokenizer::LmTokenizer;

/// A model that can be saved as a Hugging Face checkpoint that `transformers` loads.
pub trait Pretrained {
    /// The `config.json` `transformers` would write for this model.
    fn hf_config(&self) -> serde_json::Value;

    /// Every weight under its Hugging Face name, in Hugging Face's layout.
    fn hf_tensors(&self) -> Vec<(String, RawTensor)>;

    /// The Hugging Face name of the module at burn's `module_path` (e.g.
    /// `model.layers.0.self_attn.q_proj`), which names its LoRA factors in PEFT's adapter files
    /// (`crate::save_peft_adapter`). The default is the path itself, right for a model whose
    /// fields follow Hugging Face's names.
    fn hf_module_name(&self, module_path: &str) -> String {
        module_path.to_string()
    }

    /// Writes `config.json` and `model.safetensors` into `dir` (created if missing), each to a
    /// temporary file first and then renamed into place. LoRA adapters, if any, are written
    /// merged into the weights they adapt.
    fn save_pretrained(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        write_safetensors(&dir.join(WEIGHTS_FILE), &self.hf_tensors())?;
        let json = serde_json::to_string_pretty(&self.hf_config())
            .map_err(|e| ModelError::Input(format!("cannot serialise config: {e}")))?;
        write_atomic(&dir.join(CONFIG_FILE), json.as_bytes())
    }

    /// [`Pretrained::save_pretrained`] and [`LmTokenizer::save`] into one `dir`: a directory
    /// that `transformers` (`AutoModelForCausalLM` and `AutoTokenizer`) and
    /// [`crate::AutoLm::from_pretrained`] with [`LmTokenizer::load_for_model`] load whole, with
    /// the ids generation stops on. A tokenizer with ids beyond the model's vocabulary is
    /// refused before anything is written, as loading would refuse the pair.
    fn save_pretrained_with_tokenizer(&self, tokenizer: &LmTokenizer, dir: &Path) -> Result<()> {
        let config = self.hf_config();
        let vocab = config.get("vocab_size").and_then(serde_json::Value::as_u64);
        if let Some(vocab) = vocab
            && tokenizer.vocab_size() as u64 > vocab
        {
            return Err(ModelError::Input(format!(
                "the tokenizer has {} ids, the model's vocabulary only {vocab}",
                tokenizer.vocab_size()
            )));
        }
        self.save_pretrained(dir)?;
        tokenizer.save(dir)
    }
}
