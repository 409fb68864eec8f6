//! Checkpoint directories of a run: `<run>/checkpoints/iter-NNNNNN/`, each written completely
//! into a hidden temporary sibling and then renamed into place, so a crash, a Ctrl-C or a full
//! disk in the middle of a save never damages the previous checkpoint. `LATEST` (written
//! atomically after the rename) names the newest complete checkpoint.
use std::path::{Path, PathBuf};

use crate::error::{Result, RunError, io};
use crate::files::atomic_write;

/// The checkpoints of one run.
#[derive(Debug, Clone)]
pub struct CheckpointDir {
    root: PathBuf,
}

/// What [`CheckpointDir::save`] needs from the caller: it fills the directory it is given.
pub type FillError = Box<dyn std::error::Error + Send + Sync>;

const PREFIX: &str = "iter-";
const LATEST: &str = "LATEST";

impl CheckpointDir {
    /// Checkpoints under `root` (usually `<run>/checkpoints`); nothing is created yet.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory holding the checkpoints.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the checkpoint taken after `iterations` completed iterations lives.
    pub fn path_for(&self, iterations: usize) -> PathBuf {
        self.root.join(format!("{PREFIX}{iterations:06}"))
    }

    /// Writes a checkpoint: `fill` writes every file into a fresh temporary directory, which is
    /// then synced and renamed to `iter-NNNNNN` (replacing an older checkpoint of the same
    /// number), and `LATEST` is updated. On any error — `ENOSPC` included — the temporary
    /// directory is removed and every earlier checkpoint is left as it was.
    pub fn save(
        &self,
        iterations: usize,
        fill: impl FnOnce(&Path) -> std::result::Result<(), FillError>,
    ) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.root).map_err(io(&self.root))?;
        let dest = self.path_for(iterations);
        let tmp = self.root.join(format!(
            ".tmp-{PREFIX}{iterations:06}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        let result = (|| -> std::result::Result<(), RunError> {
            std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
            fill(&tmp).map_err(|e| checkpoint_error(&dest, e))?;
            sync_tree(&tmp)?;
            if dest.exists() {
                // Same iteration saved twice (e.g. Ctrl-C right after a periodic save): move the
                // old one aside first so a failure below still leaves one complete copy.
                let old = self.root.join(format!(".old-{PREFIX}{iterations:06}"));
                let _ = std::fs::remove_dir_all(&old);
                std::fs::rename(&dest, &old).map_err(io(&dest))?;
                std::fs::rename(&tmp, &dest).map_err(io(&dest))?;
                let _ = std::fs::remove_dir_all(&old);
            } else {
                std::fs::rename(&tmp, &dest).map_err(io(&dest))?;
            }
            sync_dir(&self.root);
            atomic_write(&self.root.join(LATEST), dest_name(iterations).as_bytes())
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result.map(|()| dest)
    }

    /// Every complete checkpoint, oldest first, as `(iterations, path)`. Temporary and partial
    /// directories (names starting with `.`) are ignored.
    pub fn list(&self) -> Result<Vec<(usize, PathBuf)>> {
        if !self.root.exists() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.root).map_err(io(&self.root))? {
            let entry = entry.map_err(io(&self.root))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(n) = name
                .strip_prefix(PREFIX)
                .and_then(|n| n.parse::<usize>().ok())
                && entry.path().is_dir()
            {
                out.push((n, entry.path()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The newest complete checkpoint, if any.
    pub fn latest(&self) -> Result<Option<(usize, PathBuf)>> {
        Ok(self.list()?.pop())
    }

    /// Deletes all but the newest `keep` checkpoints (`keep` ≥ 1 is enforced).
    pub fn prune(&self, keep: usize) -> Result<()> {
        let all = self.list()?;
        let n = all.len().saturating_sub(keep.max(1));
        for (_, p) in all.into_iter().take(n) {
            std::fs::remove_dir_all(&p).map_err(io(&p))?;
        }
        Ok(())
    }
}

fn dest_name(iterations: usize) -> String {
    format!("{PREFIX}{iterations:06}\n")
}

fn checkpoint_error(dest: &Path, e: FillError) -> RunError {
    let disk_full = error_chain_has(&*e, |k| k == std::io::ErrorKind::StorageFull);
    let reason = if disk_full {
        format!(
            "the disk is full ({e}); earlier checkpoints, if any, are intact — free space and resume"
        )
    } else {
        e.to_string()
    };
    RunError::Checkpoint {
        path: dest.to_path_buf(),
        reason,
    }
}

fn error_chain_has(
    e: &(dyn std::error::Error + 'static),
    pred: impl Fn(std::io::ErrorKind) -> bool,
) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(ioe) = err.downcast_ref::<std::io::Error>()
            && pred(ioe.kind())
        {
            return true;
        }
        // Some libraries keep the OS error only in the message.
        if err.to_string().contains("No space left on device") {
            return true;
        }
        cur = err.source();
    }
    false
}

/// fsyncs every file below `dir` (and the directories), so the rename publishes data that is
/// really on disk.
fn sync_tree(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let p = entry.map_err(io(dir))?.path();
        if p.is_dir() {
            sync_tree(&p)?;
        } else {
            let f = std::fs::File::open(&p).map_err(io(&p))?;
            f.sync_all().map_err(io(&p))?;
        }
    }
    sync_dir(dir);
    Ok(())
}

fn sync_dir(dir: &Path) {
    // Directory fsync is best effort: not every filesystem supports it.
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lmrl-ckpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn save_list_latest_and_prune() {
        let d = tmpdir("basic");
        let c = CheckpointDir::new(d.join("checkpoints"));
        assert!(c.latest().unwrap().is_none());
        for it in [2, 4, 6] {
            c.save(it, |dir| {
                std::fs::write(dir.join("w.bin"), it.to_string())?;
                Ok(())
            })
            .unwrap();
        }
        let (n, p) = c.latest().unwrap().unwrap();
        assert_eq!(n, 6);
        assert_eq!(std::fs::read_to_string(p.join("w.bin")).unwrap(), "6");
        assert_eq!(
            std::fs::read_to_string(c.root().join(LATEST)).unwrap(),
            "iter-000006\n"
        );
        c.prune(2).unwrap();
        let left: Vec<usize> = c.list().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(left, vec![4, 6]);
        // Saving the same iteration again replaces it.
        c.save(6, |dir| {
            std::fs::write(dir.join("w.bin"), "again")?;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(c.path_for(6).join("w.bin")).unwrap(),
            "again"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// `/dev/full` answers every write with ENOSPC: a save that hits it must fail with a
    /// "disk is full" message and leave the earlier checkpoint and no temporary directory.
    #[test]
    fn full_disk_keeps_previous_checkpoint() {
        let d = tmpdir("full");
        let c = CheckpointDir::new(d.join("checkpoints"));
        c.save(1, |dir| {
            std::fs::write(dir.join("w.bin"), "one")?;
            Ok(())
        })
        .unwrap();
        let err = c
            .save(2, |dir| {
                std::fs::write(dir.join("partial.bin"), "half")?;
                let mut f = std::fs::OpenOptions::new().write(true).open("/dev/full")?;
                f.write_all(&[0u8; 4096])?;
                f.flush()?;
                Ok(())
            })
            .unwrap_err()
            .to_string();
        if Path::new("/dev/full").exists() {
            assert!(err.contains("disk is full"), "{err}");
        }
        let all = c.list().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(
            std::fs::read_to_string(all[0].1.join("w.bin")).unwrap(),
            "one"
        );
        let hidden = std::fs::read_dir(c.root())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".tmp")
            })
            .count();
        assert_eq!(hidden, 0, "temporary checkpoint directory left behind");
        assert_eq!(
            std::fs::read_to_string(c.root().join(LATEST)).unwrap(),
            "iter-000001\n"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
