//! Turning the names a run is given into things on disk: the asset cache, a model path (an
//! existing path, else a named asset fetched into the cache), and the policy's tokenizer checked
//! against its model.
use std::path::{Path, PathBuf};

use lmrl_data::AssetCache;
use lmrl_models::{LmTokenizer, ModelConfig};

use crate::error::{Result, TrainError};

/// The asset cache at `dir`, or the default location (`$LMRL_CACHE`, else `~/.cache/lmrl`).
pub fn asset_cache(dir: Option<&Path>) -> Result<AssetCache> {
    Ok(match dir {
        Some(d) => AssetCache::new(d),
        None => AssetCache::from_env().map_err(TrainError::AssetCache)?,
    })
}

/// A path on disk if `name` exists, else a named asset resolved (and fetched) by the cache.
pub fn resolve_path_or_asset(cache: &AssetCache, name: &str) -> Result<PathBuf> {
    let p = PathBuf::from(name);
    if p.exists() {
        verify_model(&p)?;
        return Ok(p);
    }
    cache.resolve(name).map_err(|source| TrainError::Asset {
        name: name.into(),
        source,
    })
}

/// Checks the files of checkpoint `ckpt` under `part` (`""`: all) against the checksums it
/// recorded when it was written; a checkpoint written before checksums existed is loaded
/// unchecked, with a note saying so.
pub fn verify_checkpoint(ckpt: &Path, part: &str) -> Result<()> {
    match lmrl_runs::verify(ckpt, part)? {
        lmrl_runs::Verified::Checked { .. } => {}
        lmrl_runs::Verified::NoManifest => eprintln!(
            "note: checkpoint {} has no {} (written before checkpoints carried checksums): its \
             files are not verified",
            ckpt.display(),
            lmrl_runs::MANIFEST_FILE
        ),
    }
    Ok(())
}

/// Checks a model about to be loaded from `path` when it is part of a checkpoint — a
/// checkpoint directory, or a copy in one (`iter-N/policy`, `iter-N/llm1`) — against the
/// checkpoint's checksums. Anything else (a model directory, a `.gguf` file) is left alone.
pub fn verify_model(path: &Path) -> Result<()> {
    let is_ckpt = |d: &Path| {
        d.join(lmrl_runs::MANIFEST_FILE).is_file() || d.join(lmrl_runs::STATE_FILE).is_file()
    };
    if path.is_dir() && is_ckpt(path) {
        return verify_checkpoint(path, "");
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if path.is_dir() && is_ckpt(parent) => {
            verify_checkpoint(parent, &name.to_string_lossy())
        }
        _ => Ok(()),
    }
}

/// The model's configuration without loading its weights: `config.json` of a Hugging Face
/// directory, or the metadata of a `.gguf` file.
pub fn model_config(path: &Path) -> Result<ModelConfig> {
    let err = |source| TrainError::Model {
        path: path.to_path_buf(),
        source,
    };
    if path.is_file() {
        let meta = lmrl_models::gguf::GgufMetadata::read(path).map_err(err)?;
        return Ok(ModelConfig::Llama(
            lmrl_models::gguf::llama_config(&meta).map_err(err)?,
        ));
    }
    ModelConfig::from_file(&path.join(lmrl_models::CONFIG_FILE)).map_err(err)
}

/// The model's tokenizer and configuration, checked against each other: every token id the
/// tokenizer can produce must be an embedding row of the model.
pub fn load_tokenizer(model_path: &Path) -> Result<(LmTokenizer, ModelConfig)> {
    let config = model_config(model_path)?;
    let tok = LmTokenizer::load_for_model(model_path).map_err(|source| TrainError::Tokenizer {
        path: model_path.to_path_buf(),
        source,
    })?;
    let (tokenizer, model) = (tok.vocab_size(), config.vocab_size());
    if tokenizer > model {
        return Err(TrainError::VocabularyMismatch {
            path: model_path.to_path_buf(),
            tokenizer,
            model,
        });
    }
    Ok((tok, config))
}

/// The padding id of the RL batches: the tokenizer's rule ([`LmTokenizer::pad_token_id`]: its
/// pad token, else its EOS), else the model's own EOS (`model_eos`), else 0 — what
/// `GenerationConfig::for_tokenizer` pads with whenever the tokenizer names either.
pub fn pad_id(tok: &LmTokenizer, model_eos: Option<u32>) -> u32 {
    tok.pad_token_id().or(model_eos).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_path_is_taken_as_it_is_and_a_missing_model_is_named() {
        let cache = AssetCache::new(std::env::temp_dir().join("lmrl-train-no-cache"));
        let here = std::env::temp_dir();
        assert_eq!(
            resolve_path_or_asset(&cache, here.to_str().unwrap()).unwrap(),
            here
        );
        let missing = Path::new("/nonexistent-lmrl/model");
        let e = load_tokenizer(missing).unwrap_err().to_string();
        assert!(e.contains("/nonexistent-lmrl/model"), "{e}");
    }
}
