use std::path::PathBuf;

/// Errors of run bookkeeping; each names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("cannot write checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    /// A checkpoint that cannot be resumed: not this run's, or inconsistent.
    #[error("{path} {reason}")]
    Resume { path: PathBuf, reason: String },
    /// A learner's weights or training state could not be read back from `path`.
    #[error("cannot restore {what} in {path}")]
    Restore {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: crate::checkpoint::FillError,
    },
    #[error("cannot draw {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
    #[error("cannot read {path}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `config.toml` that is not TOML, has unknown keys or values of the wrong type.
    #[error("invalid settings in {path}")]
    ConfigSyntax {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    /// `--resume` given with flags that would change what the run computes.
    #[error(
        "--resume continues {path} with its own config.toml; only --iterations, \
         --checkpoint-every, --samples-every and --cache-dir may be given, not {flags}"
    )]
    ResumeSettings { path: PathBuf, flags: String },
    #[error(transparent)]
    Config(#[from] crate::settings::ConfigError),
    #[error("cannot locate the asset cache")]
    AssetCache(#[source] lmrl_data::AssetError),
    #[error("`{name}` is neither an existing path nor an asset that could be fetched")]
    Asset {
        name: String,
        #[source]
        source: lmrl_data::AssetError,
    },
    #[error("cannot read {path}")]
    ReadModel {
        path: PathBuf,
        #[source]
        source: lmrl_models::ModelError,
    },
    #[error("no tokenizer for the model {path}")]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: lmrl_models::ModelError,
    },
    /// A tokenizer that can produce ids past the model's embedding table.
    #[error(
        "the tokenizer of {path} has {tokenizer} tokens but the model's vocabulary has only \
         {model}: they do not belong together"
    )]
    VocabularyMismatch {
        path: PathBuf,
        tokenizer: usize,
        model: usize,
    },
    #[error(transparent)]
    Model(#[from] lmrl_models::ModelError),
}

pub type Result<T, E = RunError> = std::result::Result<T, E>;

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}
