//! Typed errors of the dataset readers. Every variant names the file and, where the problem sits
//! in one row, the 1-based line and the field, so a user can open the file at the right place.

use std::path::{Path, PathBuf};

/// Errors from reading datasets (IMDB, Pang & Lee, ASDiv, GSM8K) and building prompts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file or directory could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file holds no data rows (zero bytes, only blank lines, or only a header).
    #[error("{path}: no data rows (empty file or directory)")]
    Empty { path: PathBuf },
    /// A required column is absent from the CSV header.
    #[error("{path}: header has no column {column:?} (header: {header:?})")]
    MissingColumn {
        path: PathBuf,
        column: String,
        header: Vec<String>,
    },
    /// A CSV row is structurally broken: wrong number of fields (often an unbalanced quote that
    /// swallowed the following lines) or a parser error.
    #[error("{path}:{line}: malformed CSV row: {message}")]
    Csv {
        path: PathBuf,
        line: u64,
        message: String,
    },
    /// A JSONL line is not valid JSON, or not a JSON object.
    #[error("{path}:{line}: invalid JSON line: {message}")]
    Json {
        path: PathBuf,
        line: u64,
        message: String,
    },
    /// A row lacks a field it must have (e.g. the label).
    #[error("{path}:{line}: missing field {field:?}")]
    MissingField {
        path: PathBuf,
        line: u64,
        field: String,
    },
    /// A field is present but its value cannot be used.
    #[error("{path}:{line}: field {field:?} has invalid value {value:?} (expected {expected})")]
    InvalidValue {
        path: PathBuf,
        line: u64,
        field: String,
        value: String,
        expected: String,
    },
    /// Bytes that are not UTF-8. `field` is `None` when the whole line could not be decoded
    /// before splitting it into fields (JSONL).
    #[error("{path}:{line}: {} is not valid UTF-8", .field.as_deref().map(|f| format!("field {f:?}")).unwrap_or_else(|| "line".to_string()))]
    NotUtf8 {
        path: PathBuf,
        line: u64,
        field: Option<String>,
    },
    /// A caller-supplied parameter is out of range (split fraction, length bounds).
    #[error("invalid parameter {name}: {message}")]
    InvalidParameter { name: &'static str, message: String },
}

impl DataError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.into(),
            source,
        }
    }

    /// The file concerned (`None` for a bad parameter).
    pub fn path(&self) -> Option<&Path> {
        match self {
            DataError::Io { path, .. }
            | DataError::Empty { path }
            | DataError::MissingColumn { path, .. }
            | DataError::Csv { path, .. }
            | DataError::Json { path, .. }
            | DataError::MissingField { path, .. }
            | DataError::InvalidValue { path, .. }
            | DataError::NotUtf8 { path, .. } => Some(path),
            DataError::InvalidParameter { .. } => None,
        }
    }

    /// The 1-based line of the row concerned, for errors about one row.
    pub fn line(&self) -> Option<u64> {
        match self {
            DataError::Csv { line, .. }
            | DataError::Json { line, .. }
            | DataError::MissingField { line, .. }
            | DataError::InvalidValue { line, .. }
            | DataError::NotUtf8 { line, .. } => Some(*line),
            _ => None,
        }
    }

    /// The message without its leading `path:line: `, for quoting one error inside another.
    pub(crate) fn reason(&self) -> String {
        let full = self.to_string();
        let prefix = match (self.path(), self.line()) {
            (Some(p), Some(l)) => format!("{}:{l}: ", p.display()),
            (Some(p), None) => format!("{}: ", p.display()),
            _ => String::new(),
        };
        match full.strip_prefix(&prefix) {
            Some(rest) => rest.to_string(),
            None => full,
        }
    }

    /// Whether this error concerns one row only, so that `skip_bad_rows` may skip it. Errors
    /// about the whole file (I/O, empty, missing header column) are never skipped.
    pub fn is_row_error(&self) -> bool {
        matches!(
            self,
            DataError::Csv { .. }
                | DataError::Json { .. }
                | DataError::MissingField { .. }
                | DataError::InvalidValue { .. }
                | DataError::NotUtf8 { .. }
        )
    }
}

/// Options shared by all readers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Skip rows that fail to parse (and count them) instead of failing on the first one.
    /// Off by default: silently dropping data hides broken exports.
    pub skip_bad_rows: bool,
}

impl ReadOptions {
    /// Fail on the first bad row (the default).
    pub fn strict() -> Self {
        Self {
            skip_bad_rows: false,
        }
    }

    /// Skip bad rows, reporting them in [`ReadReport::skipped`].
    pub fn skip_bad_rows() -> Self {
        Self {
            skip_bad_rows: true,
        }
    }
}

/// What a reader returns: the parsed items plus what it left out.
#[derive(Debug)]
pub struct ReadReport<T> {
    pub items: Vec<T>,
    /// Rows that could not be parsed, in file order, skipped because `skip_bad_rows` was set
    /// (always empty otherwise: the first such row is returned as the error). Each names the
    /// file, the 1-based line ([`DataError::line`]) and what was wrong; its `Display` is
    /// `path:line: reason`.
    pub skipped: Vec<DataError>,
    /// Rows that parsed but were dropped by design, e.g. ASDiv problems whose answer holds no
    /// single number. Always 0 for the review readers.
    pub filtered: usize,
}

impl<T> ReadReport<T> {
    pub(crate) fn new() -> Self {
        Self {
            items: Vec::new(),
            skipped: Vec::new(),
            filtered: 0,
        }
    }

    /// Number of bad rows skipped.
    pub fn skipped_count(&self) -> usize {
        self.skipped.len()
    }

    /// The 1-based lines of the skipped rows, in file order.
    pub fn skipped_lines(&self) -> Vec<u64> {
        self.skipped.iter().filter_map(DataError::line).collect()
    }

    /// Either record a row error (when skipping) or return it.
    pub(crate) fn row_error(&mut self, err: DataError, opts: ReadOptions) -> Result<(), DataError> {
        if opts.skip_bad_rows && err.is_row_error() {
            self.skipped.push(err);
            Ok(())
        } else {
            Err(err)
        }
    }
}
