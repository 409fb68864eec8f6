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
        return Ok(p);
    }
    cache.resolve(name).map_err(|source| TrainError::Asset {
        name: name.into(),
        source,
    })
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

/// The padding id of the RL batches: the tokenizer's, else EOS, else 0.
pub fn pad_id(tok: &LmTokenizer, config: &ModelConfig) -> u32 {
    tok.pad_token_id()
        .or(tok.eos_token_id())
        .or(config.eos_token_id())
        .unwrap_or(0)
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
