//! The readers under test take paths: each input is written to a file in a directory of this
//! process (in memory where `/dev/shm` exists), overwritten by the next input.
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This process's scratch directory.
pub fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new("/dev/shm");
        let base = match base.is_dir() {
            true => base.to_path_buf(),
            false => std::env::temp_dir(),
        };
        let d = base.join(format!("lmrl-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("scratch directory");
        d
    })
}

/// Writes `bytes` to `name` in the scratch directory (`sub` creates a subdirectory).
pub fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir().join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("scratch subdirectory");
    }
    std::fs::write(&p, bytes).expect("scratch file");
    p
}
