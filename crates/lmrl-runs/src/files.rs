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
        io("write", path)(e)
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

/// The temporary [`atomic_write`] writes `path` through: `.NAME.tmp-PID` beside it.
fn tmp_sibling(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}{TMP_MARK}{}", std::process::id()))
}

const TMP_MARK: &str = ".tmp-";

/// Whether `name` is one of [`atomic_write`]'s temporaries (`.NAME.tmp-PID`).
fn is_atomic_temporary(name: &str) -> bool {
    name.starts_with('.')
        && name
            .rsplit_once(TMP_MARK)
            .is_some_and(|(head, pid)| head.len() > 1 && pid.parse::<u32>().is_ok())
}

/// Removes the temporaries that [`atomic_write`] calls of killed processes left in `dir`
/// (`.NAME.tmp-PID`), and returns what it removed. Call it only where no live process writes
/// into `dir` (a run directory whose lock is held): a temporary of a live writer would be
/// taken from under it.
pub fn remove_stale_temporaries(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        if is_atomic_temporary(&name) && p.is_file() && std::fs::remove_file(&p).is_ok() {
            removed.push(p);
        }
    }
    removed.sort();
    removed
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
    fn stale_temporaries_are_removed_and_nothing_else() {
        let dir = tempfile_dir("stale");
        for n in [
            ".config.toml.tmp-4242",
            ".LATEST.tmp-7",
            "config.toml",
            ".lock",
            ".x.tmp-abc",
        ] {
            std::fs::write(dir.join(n), "x").unwrap();
        }
        let removed = remove_stale_temporaries(&dir);
        assert_eq!(
            removed,
            vec![dir.join(".LATEST.tmp-7"), dir.join(".config.toml.tmp-4242")]
        );
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".lock", ".x.tmp-abc", "config.toml"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("lmrl-runs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn atomic_write_into_missing_dir_is_an_error_naming_the_file() {
        let p = Path::new("/nonexistent-dir-lmrl/x.toml");
        let err = atomic_write(p, b"x").unwrap_err().to_string();
        assert_eq!(err, "cannot write /nonexistent-dir-lmrl/x.toml");
    }
}
