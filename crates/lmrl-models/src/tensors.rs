//! Raw checkpoint tensors, read into f32 and indexed by their Hugging Face names.
//!
//! Every loader (safetensors, GGUF) produces a [`TensorMap`]; models then take what they need
//! through [`TensorMap::take`], which checks the shape and names the file on error.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{ModelError, Result};

/// A dense row-major f32 tensor as read from a checkpoint.
#[derive(Debug, Clone)]
pub struct RawTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl RawTensor {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Self { shape, data }
    }

    /// Swaps the two axes of a 2-D tensor (`[r, c]` → `[c, r]`).
    pub fn transposed(&self) -> Self {
        let (r, c) = (self.shape[0], self.shape[1]);
        let mut out = vec![0.0; self.data.len()];
        for i in 0..r {
            for j in 0..c {
                out[j * r + i] = self.data[i * c + j];
            }
        }
        Self::new(vec![c, r], out)
    }
}

/// Named tensors of one checkpoint file, with the file's path kept for error messages.
#[derive(Debug, Clone, Default)]
pub struct TensorMap {
    pub path: PathBuf,
    pub tensors: HashMap<String, RawTensor>,
}

impl TensorMap {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            tensors: HashMap::new(),
        }
    }

    pub fn insert(&mut self, name: impl Into<String>, t: RawTensor) {
        self.tensors.insert(name.into(), t);
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Removes `name`, checking that its shape is `expected`.
    pub fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor> {
        let t = self
            .tensors
            .remove(name)
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
            })?;
        if t.shape != expected {
            return Err(ModelError::ShapeMismatch {
                path: self.path.clone(),
                tensor: name.to_string(),
                found: t.shape,
                expected: expected.to_vec(),
            });
        }
        Ok(t)
    }

    /// Takes `name` as a burn tensor of rank `D` on `device`.
    pub fn tensor<const D: usize>(
        &mut self,
        name: &str,
        expected: [usize; D],
        device: &Device,
    ) -> Result<Tensor<D>> {
        let t = self.take(name, &expected)?;
        Ok(Tensor::from_data(TensorData::new(t.data, t.shape), device))
    }

    /// Reads every tensor of a `.safetensors` file (F32, F16 and BF16 are converted to f32).
    pub fn from_safetensors(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| ModelError::Format {
            path: path.to_path_buf(),
            format: "safetensors",
            reason: e.to_string(),
        })?;
        let mut map = Self::new(path);
        for (name, view) in st.tensors() {
            let data = view.data();
            let values: Vec<f32> = match view.dtype() {
                safetensors::Dtype::F32 => data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                safetensors::Dtype::F16 => data
                    .chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                safetensors::Dtype::BF16 => data
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                other => {
                    return Err(ModelError::UnsupportedDtype {
                        path: path.to_path_buf(),
                        tensor: name,
                        dtype: format!("{other:?}"),
                    });
                }
            };
            map.insert(name, RawTensor::new(view.shape().to_vec(), values));
        }
        Ok(map)
    }

    /// Strips `prefix` from every name that has it (e.g. `transformer.` in GPT-2 files written
    /// by `save_pretrained`, absent from the hub's `gpt2`).
    pub fn strip_prefix(&mut self, prefix: &str) {
        let tensors = std::mem::take(&mut self.tensors);
        self.tensors = tensors
            .into_iter()
            .map(|(k, v)| match k.strip_prefix(prefix) {
                Some(s) => (s.to_string(), v),
                None => (k, v),
            })
            .collect();
    }
}
