//! What the loop asks of a model beyond [`CausalLm`]: to be written into a checkpoint and read
//! back exactly ([`TrainModel`]), and for an app's `train` command, to be found from its
//! `[run] model` setting ([`LoadModel`]). [`AutoLm`] (GPT-2 and the Llama family from Hugging
//! Face files or GGUF) implements both; a model of one's own implements them in a few lines
//! with [`save_record`] and [`load_record`] (burn's own record format).
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use lmrl_data::AssetCache;
use lmrl_models::{
    AutoLm, CausalLm, LmTokenizer, LoraConfig, ModelConfig, Pretrained, load_peft_adapter,
    save_peft_adapter,
};

use crate::error::{Result, TrainError};

/// An error of a model's own saving or loading code.
pub type ModelIoError = Box<dyn std::error::Error + Send + Sync>;

/// A model the loop trains: cloned into each learner, written into every checkpoint and read
/// back from one exactly (resume continues with the very numbers of an uninterrupted run).
pub trait TrainModel: CausalLm + Clone + Send + Sized {
    /// Writes the weights of a trained copy into the checkpoint directory `dir` (which exists).
    /// For `AutoLm` this is a Hugging Face checkpoint that transformers loads.
    fn save_weights(&self, dir: &Path) -> std::result::Result<(), ModelIoError>;

    /// The copy [`TrainModel::save_weights`] wrote into `dir`, on `device`. `base` is the
    /// model the run started from, for formats that hold only the weights and need the
    /// structure to load them into.
    fn load_weights(
        base: &Self,
        dir: &Path,
        device: &Device,
    ) -> std::result::Result<Self, ModelIoError>;

    /// The LoRA adapters of rank `rank` and scale `alpha` on this architecture's projections;
    /// `None` (the default) when the model names no targets, and a LoRA run is refused.
    fn lora_targets(&self, rank: usize, alpha: f64) -> Option<LoraConfig> {
        let _ = (rank, alpha);
        None
    }

    /// Writes the LoRA adapters of this adapted copy into the checkpoint directory `dir`, for
    /// an exact resume (the merged weights cannot give them back). The default is burn's
    /// record of the whole adapted model ([`LORA_RECORD_FILE`]); `AutoLm` writes PEFT's format.
    fn save_adapters(
        &self,
        lora: &LoraConfig,
        dir: &Path,
    ) -> std::result::Result<(), ModelIoError> {
        let _ = lora;
        write_record(self, &dir.join(LORA_RECORD_FILE))
    }

    /// `base` with the adapters [`TrainModel::save_adapters`] wrote into `dir`, exactly.
    fn load_adapters(
        base: &Self,
        lora: &LoraConfig,
        dir: &Path,
    ) -> std::result::Result<Self, ModelIoError> {
        let adapted = lmrl_models::apply_lora(base.clone(), lora)?;
        read_record(adapted, &dir.join(LORA_RECORD_FILE))
    }
}

/// [`TrainModel::save_adapters`]' default file: burn's record of the adapted model.
pub const LORA_RECORD_FILE: &str = "lora_model.bpk";

/// The subdirectory of a copy's checkpoint where `AutoLm` writes its LoRA adapters in PEFT's
/// format (`peft.PeftModel.from_pretrained(base, "<copy>/adapter")`).
pub const ADAPTER_DIR: &str = "adapter";

/// What a task may need to know of the policy before its weights are loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// Where the model was found (a directory or file), for messages and the loader.
    pub location: PathBuf,
    /// Longest context the model accepts.
    pub max_positions: usize,
    /// The end-of-sequence id of the model's own configuration, if it names one.
    pub eos_token_id: Option<u32>,
}

/// How an app's `train` command gets the policy `[run] model` names. Split in two so that a
/// run with a wrong setting is refused before the slow part: [`LoadModel::describe`] reads the
/// tokenizer and a few facts, the task is built from them, and only then are the weights read.
pub trait LoadModel: TrainModel {
    /// The tokenizer and [`ModelInfo`] of `model` (a path or a named asset in `cache`).
    fn describe(model: &str, cache: &AssetCache) -> Result<(LmTokenizer, ModelInfo)>;

    /// The pretrained weights [`LoadModel::describe`] found, on `device` (with autodiff: the
    /// copies train from it).
    fn load(info: &ModelInfo, device: &Device) -> Result<Self>;
}

/// Writes `model` into `dir/model.bpk` with burn's recorder: a [`TrainModel::save_weights`] for
/// a model of one's own.
pub fn save_record<M: Module>(model: &M, dir: &Path) -> std::result::Result<(), ModelIoError> {
    write_record(model, &dir.join(RECORD_FILE))
}

/// Reads what [`save_record`] wrote in `dir` into a copy of `base`'s structure, on `device`.
pub fn load_record<M: Module>(
    base: &M,
    dir: &Path,
    device: &Device,
) -> std::result::Result<M, ModelIoError> {
    read_record(base.clone().fork(device), &dir.join(RECORD_FILE))
}

/// `model` as burn's record in file `f`.
fn write_record<M: Module>(model: &M, f: &Path) -> std::result::Result<(), ModelIoError> {
    model
        .clone()
        .save_file(f)
        .map_err(|e| format!("cannot write {}: {e:?}", f.display()).into())
}

/// The record in file `f` loaded into `model`'s structure.
fn read_record<M: Module>(model: M, f: &Path) -> std::result::Result<M, ModelIoError> {
    model
        .try_load_file(f)
        .map_err(|e| format!("cannot load {}: {e:?}", f.display()).into())
}

/// The file of [`save_record`].
pub const RECORD_FILE: &str = "model.bpk";

impl TrainModel for AutoLm {
    fn save_weights(&self, dir: &Path) -> std::result::Result<(), ModelIoError> {
        Ok(self.save_pretrained(dir)?)
    }

    fn load_weights(
        _base: &Self,
        dir: &Path,
        device: &Device,
    ) -> std::result::Result<Self, ModelIoError> {
        Ok(AutoLm::from_pretrained(dir, device)?)
    }

    /// Every attention and MLP projection (the Llama family) or every GPT-2 projection.
    fn lora_targets(&self, rank: usize, alpha: f64) -> Option<LoraConfig> {
        Some(lora_targets(rank, alpha, &self.config()))
    }

    /// PEFT's format in [`ADAPTER_DIR`].
    fn save_adapters(
        &self,
        lora: &LoraConfig,
        dir: &Path,
    ) -> std::result::Result<(), ModelIoError> {
        Ok(save_peft_adapter(self, lora, None, &dir.join(ADAPTER_DIR))?)
    }

    /// Refuses adapters whose settings differ from the run's.
    fn load_adapters(
        base: &Self,
        lora: &LoraConfig,
        dir: &Path,
    ) -> std::result::Result<Self, ModelIoError> {
        let d = dir.join(ADAPTER_DIR);
        let (model, saved) = load_peft_adapter(base.clone(), &d)?;
        if !saved.same_adapters(lora) {
            return Err(format!(
                "the adapters in {} were made with {saved:?}, but this run's LoRA settings are {lora:?}",
                d.display()
            )
            .into());
        }
        Ok(model)
    }
}

impl LoadModel for AutoLm {
    fn describe(model: &str, cache: &AssetCache) -> Result<(LmTokenizer, ModelInfo)> {
        let location = crate::assets::resolve_path_or_asset(cache, model)?;
        let (tokenizer, config) = crate::assets::load_tokenizer(&location)?;
        let info = ModelInfo {
            location,
            max_positions: config.max_positions(),
            eos_token_id: config.eos_token_id(),
        };
        Ok((tokenizer, info))
    }

    fn load(info: &ModelInfo, device: &Device) -> Result<Self> {
        AutoLm::from_pretrained(&info.location, device).map_err(|source| TrainError::Model {
            path: info.location.clone(),
            source,
        })
    }
}

/// The LoRA adapters of `rank`: every attention and MLP projection (Llama) or every GPT-2
/// projection, scale α / rank ([`LoraConfig::for_model`]).
pub fn lora_targets(rank: usize, alpha: f64, model: &ModelConfig) -> LoraConfig {
    LoraConfig::for_model(model, rank, alpha)
}
