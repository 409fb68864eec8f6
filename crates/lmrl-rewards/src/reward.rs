//! The [`Reward`] trait shared by every scorer.
use std::path::PathBuf;

use crate::RewardError;

/// A scalar reward for each `(prompt, response)` pair of a batch.
///
/// This is the `score` that TRL's PPO loop receives per episode (one scalar per sequence,
/// added to the last response token's KL-penalised reward). The trait is object safe, so an
/// application can pick its reward at run time as a `Box<dyn Reward>`.
pub trait Reward {
    /// A short human-readable name for logs ("textcat-imdb", "vader", "gsm8k", …).
    fn name(&self) -> &str;

    /// Scores each pair; the output has exactly one value per input pair, in order.
    fn score(&self, batch: &[(&str, &str)]) -> Result<Vec<f32>, RewardError>;
}

impl<R: Reward + ?Sized> Reward for Box<R> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn score(&self, batch: &[(&str, &str)]) -> Result<Vec<f32>, RewardError> {
        (**self).score(batch)
    }
}

/// The default directory of a cached asset: `$HOME/.cache/lmrl/<name>`.
///
/// Returns `None` when `HOME` is unset. Loaders also accept explicit paths (and the textcat
/// loader honours `LMRL_TEXTCAT_DIR`), so this is only the fallback.
pub fn default_asset_dir(name: &str) -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("lmrl").join(name))
}
