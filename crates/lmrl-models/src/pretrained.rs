//! Writing a model as a Hugging Face checkpoint (`save_pretrained`).
use std::path::Path;

use crate::error::{ModelError, Result};
use crate::loader::{CONFIG_FILE, WEIGHTS_FILE, write_atomic, write_safetensors};
use crate::tensors::RawTensor;

/// A model that can be saved as a Hugging Face checkpoint that `transformers` loads.
pub trait Pretrained {
    /// The `config.json` `transformers` would write for this model.
    fn hf_config(&self) -> serde_json::Value;

    /// Every weight under its Hugging Face name, in Hugging Face's layout.
    fn hf_tensors(&self) -> Vec<(String, RawTensor)>;

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
}
