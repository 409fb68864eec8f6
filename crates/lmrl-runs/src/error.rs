use std::path::PathBuf;

/// Errors of run bookkeeping; each names the file involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    #[error("cannot draw {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
}

pub type Result<T, E = RunError> = std::result::Result<T, E>;

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}
