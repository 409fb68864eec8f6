//! The one error type of the models crate.
use std::path::PathBuf;

/// Everything that can go wrong when loading, running or generating with a model.
///
/// Each variant names the file, tensor or field involved so that a user can act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid {format} file: {reason}")]
    Format {
        path: PathBuf,
        format: &'static str,
        reason: String,
    },
    #[error("{path}: tensor `{tensor}` is missing")]
    MissingTensor { path: PathBuf, tensor: String },
    #[error("{path}: tensor `{tensor}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        path: PathBuf,
        tensor: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{path}: tensor `{tensor}` has unsupported dtype {dtype}")]
    UnsupportedDtype {
        path: PathBuf,
        tensor: String,
        dtype: String,
    },
    #[error("{path}: field `{field}`: {reason}")]
    Config {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// A configuration that is valid on its own but does not fit the weights beside it.
    #[error("{path}: the weights do not match config field `{field}`: {reason}")]
    WeightsMismatch {
        path: PathBuf,
        field: String,
        reason: String,
    },
    #[error(
        "token id {id} at row {row}, position {pos} is out of range for vocabulary size {vocab}"
    )]
    TokenOutOfRange {
        id: i64,
        row: usize,
        pos: usize,
        vocab: usize,
    },
    #[error("sequence of length {len} exceeds the model's context of {max} positions")]
    ContextTooLong { len: usize, max: usize },
    #[error("invalid input: {0}")]
    Input(String),
    #[error("tokenizer {path}: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    /// A heap setting ([`crate::HostMemory::parse`]) that cannot be read.
    #[error("host memory setting {spec:?}: {reason}")]
    HostMemory { spec: String, reason: String },
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
