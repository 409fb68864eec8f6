//! The one error type of the rewards crate.
use std::path::PathBuf;

/// Everything that can go wrong when loading or running a reward model.
///
/// Variants name the file and the field (or tensor) involved and what was expected, so that a
/// user can fix a broken or mismatched asset without reading the code.
/// `#[non_exhaustive]`: new rewards may need new variants, and the `Model` variant exists only
/// with the `distilbert` feature.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RewardError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: field `{field}`: expected {expected}")]
    Format {
        path: PathBuf,
        field: String,
        expected: String,
    },
    #[error("asset not found: {what} (looked in {path}); {hint}")]
    MissingAsset {
        what: String,
        path: PathBuf,
        hint: String,
    },
    #[cfg(feature = "distilbert")]
    #[error("model error: {0}")]
    Model(#[from] lmrl_models::ModelError),
    #[error("tokenizer {path}: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    #[error("invalid input: {0}")]
    Input(String),
    #[error("reward `{reward}` returned {found} scores for {expected} samples")]
    ScoreCount {
        reward: String,
        expected: usize,
        found: usize,
    },
}

impl RewardError {
    /// Shorthand for a [`RewardError::Format`] error.
    pub(crate) fn format(
        path: impl Into<PathBuf>,
        field: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Self::Format {
            path: path.into(),
            field: field.into(),
            expected: expected.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
