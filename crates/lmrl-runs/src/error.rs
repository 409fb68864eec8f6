use std::path::{Path, PathBuf};

/// Errors of run bookkeeping; each names the file involved.
///
/// The operating system's reason of an [`RunError::Io`] is its `source()`, not part of its
/// message: print errors with their chain (`anyhow`'s `{:#}`, `lmrl_train::chain`), which then
/// shows it once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A file operation failed; `op` says which (`read`, `write`, `create`, `rename`, …).
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
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
    /// A checkpoint file that does not match its recorded checksum, or is missing.
    #[error("{path} {reason}")]
    Checksum { path: PathBuf, reason: String },
    #[error("cannot draw {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
}

pub type Result<T, E = RunError> = std::result::Result<T, E>;

/// The [`RunError::Io`] of operation `op` (`"read"`, `"write"`, …) on `path`.
pub(crate) fn io<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> RunError + 'a {
    move |source| RunError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// `e` and its causes on one line (`a: b: c`), a cause left out when the text before already
/// holds it (libraries that repeat their source in their message).
pub(crate) fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_names_its_operation_and_shows_the_os_reason_once() {
        let e = io("read", Path::new("/x/state.toml"))(std::io::Error::from_raw_os_error(30));
        assert_eq!(e.to_string(), "cannot read /x/state.toml");
        let t = chain_text(&e);
        assert_eq!(t.matches("(os error 30)").count(), 1, "{t}");
        assert!(t.starts_with("cannot read /x/state.toml: "), "{t}");
    }
}
