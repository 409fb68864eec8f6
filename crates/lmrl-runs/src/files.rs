//! Whole-file writes that are never seen half-done.
use std::io::Write;
use std::path::Path;

use crate::error::{Result, RunError, io};

/// Writes `bytes` to `path` through a temporary sibling, fsync and rename, so readers (and a
/// resumed run) see either the old file or the new one, never a truncated one — also when the
/// disk fills up mid-write.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_sibling(path);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path)(e)
    })
}

/// Serialises `value` as TOML and writes it atomically.
pub fn write_toml<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = toml::to_string_pretty(value).map_err(|e| RunError::Format {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    atomic_write(path, text.as_bytes())
}

fn tmp_sibling(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_file() {
        let dir = std::env::temp_dir().join(format!("lmrl-runs-aw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.txt");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atomic_write_into_missing_dir_is_an_error_naming_the_file() {
        let p = Path::new("/nonexistent-dir-lmrl/x.toml");
        let err = atomic_write(p, b"x").unwrap_err().to_string();
        assert!(err.contains("/nonexistent-dir-lmrl/x.toml"), "{err}");
    }
}
