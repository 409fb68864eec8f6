//! Checkpoint directories of a run: `<run>/checkpoints/iter-NNNNNN/`, each written completely
//! into a hidden temporary sibling and then renamed into place, so a crash, a Ctrl-C or a full
//! disk in the middle of a save never damages the previous checkpoint. `LATEST` (written
//! atomically after the rename) names the newest complete checkpoint.
//!
//! Hidden entries are work in progress of one save or prune: `.tmp-iter-NNNNNN-PID` (being
//! filled), `.old-iter-NNNNNN` (a checkpoint of the same number being replaced) and
//! `.del-iter-NNNNNN-PID` (an old checkpoint being deleted). A process killed in the middle
//! leaves them behind; [`CheckpointDir::recover`] puts things right on the next start.
use std::path::{Path, PathBuf};

use crate::error::{Result, RunError, chain_text, io};
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
/// A save's directory being filled: `.tmp-iter-NNNNNN-PID`.
const TMP: &str = ".tmp-";
/// A checkpoint being replaced by one of the same number: `.old-iter-NNNNNN`.
const OLD: &str = ".old-";
/// A checkpoint being pruned: `.del-iter-NNNNNN-PID`.
const DEL: &str = ".del-";
/// A checkpoint that could not be resumed, moved out of the way: `unusable-iter-NNNNNN`.
const UNUSABLE: &str = "unusable-";

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

    /// Writes a checkpoint: `fill` writes every file into a fresh temporary directory, whose
    /// files' checksums are then recorded in it ([`crate::MANIFEST_FILE`]), which is then
    /// synced and renamed to `iter-NNNNNN` (replacing an older checkpoint of the same
    /// number), and `LATEST` is updated. On any error — `ENOSPC` included — the temporary
    /// directory is removed and every earlier checkpoint is left as it was; the message says
    /// which one that is, or that there is none.
    pub fn save(
        &self,
        iterations: usize,
        fill: impl FnOnce(&Path) -> std::result::Result<(), FillError>,
    ) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.root).map_err(io("create", &self.root))?;
        let dest = self.path_for(iterations);
        let tmp = self.root.join(format!(
            "{TMP}{PREFIX}{iterations:06}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        let result = (|| -> std::result::Result<(), RunError> {
            std::fs::create_dir_all(&tmp).map_err(io("create", &tmp))?;
            fill(&tmp).map_err(|e| self.checkpoint_error(&dest, &*e))?;
            // The checksums of every file, inside the checkpoint: synced and renamed with it.
            crate::manifest::write_manifest(&tmp).map_err(|e| self.checkpoint_error(&dest, &e))?;
            sync_tree(&tmp).map_err(|e| self.checkpoint_error(&dest, &e))?;
            if dest.exists() {
                // Same iteration saved twice (e.g. a resume from an older checkpoint reaching
                // an unusable newer one): move the old one aside first so that a failure or a
                // kill below still leaves one complete copy (`recover` puts it back).
                let old = self.root.join(format!("{OLD}{PREFIX}{iterations:06}"));
                let _ = std::fs::remove_dir_all(&old);
                std::fs::rename(&dest, &old).map_err(io("rename", &dest))?;
                std::fs::rename(&tmp, &dest).map_err(io("rename", &tmp))?;
                let _ = std::fs::remove_dir_all(&old);
            } else {
                std::fs::rename(&tmp, &dest).map_err(io("rename", &tmp))?;
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
        for entry in std::fs::read_dir(&self.root).map_err(io("read", &self.root))? {
            let entry = entry.map_err(io("read", &self.root))?;
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

    /// Deletes all but the newest `keep` checkpoints (`keep` ≥ 1 is enforced). Each is first
    /// renamed out of the listing, so a kill in the middle never leaves a half-deleted
    /// directory that looks like a checkpoint.
    pub fn prune(&self, keep: usize) -> Result<()> {
        let all = self.list()?;
        let n = all.len().saturating_sub(keep.max(1));
        for (it, p) in all.into_iter().take(n) {
            let doomed = self
                .root
                .join(format!("{DEL}{PREFIX}{it:06}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&doomed);
            std::fs::rename(&p, &doomed).map_err(io("rename", &p))?;
            std::fs::remove_dir_all(&doomed).map_err(io("remove", &doomed))?;
        }
        Ok(())
    }

    /// Puts right what saves and prunes of killed processes left: a checkpoint moved aside to
    /// be replaced (`.old-…`) goes back into place when its replacement never arrived, and
    /// every other leftover (`.tmp-…`, `.old-…`, `.del-…`, `LATEST`'s temporary) is removed.
    /// Returns one line per thing done. Call it only while no other process saves into this
    /// directory (with the run directory's lock held).
    pub fn recover(&self) -> Result<Vec<String>> {
        let mut notes = Vec::new();
        if !self.root.is_dir() {
            return Ok(notes);
        }
        let mut entries: Vec<(String, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&self.root).map_err(io("read", &self.root))? {
            let e = e.map_err(io("read", &self.root))?;
            entries.push((e.file_name().to_string_lossy().into_owned(), e.path()));
        }
        entries.sort();
        for (name, p) in &entries {
            let Some(ckpt) = name.strip_prefix(OLD) else {
                continue;
            };
            let dest = self.root.join(ckpt);
            if ckpt.starts_with(PREFIX) && !dest.exists() {
                std::fs::rename(p, &dest).map_err(io("rename", p))?;
                notes.push(format!(
                    "put back {} (a save that was replacing it was interrupted)",
                    dest.display()
                ));
            }
        }
        for (name, p) in &entries {
            if !(name.starts_with(TMP) || name.starts_with(OLD) || name.starts_with(DEL)) {
                continue;
            }
            let removed = if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else if p.exists() {
                std::fs::remove_file(p)
            } else {
                continue; // an `.old-…` put back above
            };
            removed.map_err(io("remove", p))?;
            notes.push(format!(
                "removed {} (left by an interrupted save)",
                p.display()
            ));
        }
        for p in crate::files::remove_stale_temporaries(&self.root) {
            notes.push(format!(
                "removed {} (left by an interrupted save)",
                p.display()
            ));
        }
        if !notes.is_empty() {
            self.write_latest()?;
        }
        Ok(notes)
    }

    /// Moves checkpoint `path` (one of [`list`](Self::list)'s) out of the listing, to
    /// `unusable-iter-NNNNNN` beside it, so that pruning and later resumes no longer take it
    /// for a checkpoint; it is kept for inspection. Returns where it went.
    pub fn set_aside(&self, path: &Path) -> Result<PathBuf> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut to = self.root.join(format!("{UNUSABLE}{name}"));
        let mut k = 1;
        while to.exists() {
            k += 1;
            to = self.root.join(format!("{UNUSABLE}{name}-{k}"));
        }
        std::fs::rename(path, &to).map_err(io("rename", path))?;
        self.write_latest()?;
        Ok(to)
    }

    /// Rewrites `LATEST` to name the newest checkpoint (removes it when there is none).
    fn write_latest(&self) -> Result<()> {
        let latest = self.root.join(LATEST);
        match self.latest()? {
            Some((n, _)) => atomic_write(&latest, dest_name(n).as_bytes()),
            None if latest.exists() => std::fs::remove_file(&latest).map_err(io("remove", &latest)),
            None => Ok(()),
        }
    }

    /// The error of a save of `dest` that failed with `e`; a full disk is said so, with the
    /// checkpoint a resume would continue from, or that there is none.
    fn checkpoint_error(&self, dest: &Path, e: &(dyn std::error::Error + 'static)) -> RunError {
        let text = chain_text(e);
        let disk_full = error_chain_has(e, |k| k == std::io::ErrorKind::StorageFull);
        let reason = if disk_full {
            let earlier = self
                .list()
                .ok()
                .and_then(|all| all.into_iter().rfind(|(_, p)| p != dest));
            match earlier {
                Some((_, p)) => format!(
                    "the disk is full ({text}); the previous checkpoint {} is intact: free space \
                     and resume",
                    p.display()
                ),
                None => format!(
                    "the disk is full ({text}); the run has no earlier checkpoint: free space and \
                     start it again"
                ),
            }
        } else {
            text
        };
        RunError::Checkpoint {
            path: dest.to_path_buf(),
            reason,
        }
    }
}

fn dest_name(iterations: usize) -> String {
    format!("{PREFIX}{iterations:06}\n")
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
    for entry in std::fs::read_dir(dir).map_err(io("read", dir))? {
        let p = entry.map_err(io("read", dir))?.path();
        if p.is_dir() {
            sync_tree(&p)?;
        } else {
            let f = std::fs::File::open(&p).map_err(io("open", &p))?;
            f.sync_all().map_err(io("sync", &p))?;
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
        // Each checkpoint carries the checksum of each of its files.
        assert_eq!(
            crate::verify(&p, "").unwrap(),
            crate::Verified::Checked { files: 1, bytes: 1 }
        );
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
            assert!(
                err.contains("the previous checkpoint") && err.contains("iter-000001 is intact"),
                "{err}"
            );
            assert_eq!(err.matches("No space left on device").count(), 1, "{err}");
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

    /// A full disk at the first save must not claim that an earlier checkpoint is intact.
    #[test]
    fn full_disk_at_the_first_save_says_there_is_no_earlier_checkpoint() {
        if !Path::new("/dev/full").exists() {
            return;
        }
        let d = tmpdir("full-first");
        let c = CheckpointDir::new(d.join("checkpoints"));
        let err = c
            .save(1, |_| {
                let mut f = std::fs::OpenOptions::new().write(true).open("/dev/full")?;
                f.write_all(&[0u8; 4096])?;
                f.flush()?;
                Ok(())
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("disk is full"), "{err}");
        assert!(err.contains("no earlier checkpoint"), "{err}");
        assert!(!err.contains("intact"), "{err}");
        assert!(c.list().unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn names(c: &CheckpointDir) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(c.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn save_text(c: &CheckpointDir, it: usize, text: &str) {
        c.save(it, |dir| {
            std::fs::write(dir.join("w.bin"), text)?;
            Ok(())
        })
        .unwrap();
    }

    /// What a kill at each step of a save or a prune leaves, and what `recover` makes of it.
    #[test]
    fn recover_puts_back_a_replaced_checkpoint_and_removes_every_leftover() {
        let d = tmpdir("recover");
        let c = CheckpointDir::new(d.join("checkpoints"));
        save_text(&c, 1, "one");
        save_text(&c, 2, "two");
        // Killed while filling a new checkpoint (any pid), while replacing iter-2 between its
        // two renames, during a prune, and while writing LATEST.
        std::fs::create_dir_all(c.root().join(".tmp-iter-000003-4242/policy")).unwrap();
        std::fs::rename(c.path_for(2), c.root().join(".old-iter-000002")).unwrap();
        std::fs::create_dir_all(c.root().join(".tmp-iter-000002-4243")).unwrap();
        std::fs::create_dir_all(c.root().join(".del-iter-000000-4244/x")).unwrap();
        std::fs::write(c.root().join(".LATEST.tmp-4245"), "iter-0").unwrap();
        let notes = c.recover().unwrap();
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(notes[0].starts_with("put back"), "{notes:?}");
        assert_eq!(names(&c), ["LATEST", "iter-000001", "iter-000002"]);
        assert_eq!(
            std::fs::read_to_string(c.path_for(2).join("w.bin")).unwrap(),
            "two"
        );
        assert_eq!(
            std::fs::read_to_string(c.root().join(LATEST)).unwrap(),
            "iter-000002\n"
        );
        // Killed after the second rename: the replacement is in place, the old copy goes.
        std::fs::create_dir_all(c.root().join(".old-iter-000002")).unwrap();
        assert_eq!(c.recover().unwrap().len(), 1);
        assert_eq!(names(&c), ["LATEST", "iter-000001", "iter-000002"]);
        // Nothing to do: nothing done.
        assert!(c.recover().unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_set_aside_checkpoint_leaves_the_listing_and_is_kept() {
        let d = tmpdir("aside");
        let c = CheckpointDir::new(d.join("checkpoints"));
        save_text(&c, 1, "one");
        save_text(&c, 2, "two");
        let to = c.set_aside(&c.path_for(2)).unwrap();
        assert_eq!(to, c.root().join("unusable-iter-000002"));
        assert_eq!(std::fs::read_to_string(to.join("w.bin")).unwrap(), "two");
        let left: Vec<usize> = c.list().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(left, [1]);
        assert_eq!(
            std::fs::read_to_string(c.root().join(LATEST)).unwrap(),
            "iter-000001\n"
        );
        // A second unusable copy of the same number does not overwrite the first.
        save_text(&c, 2, "again");
        let to2 = c.set_aside(&c.path_for(2)).unwrap();
        assert_eq!(to2, c.root().join("unusable-iter-000002-2"));
        c.prune(1).unwrap();
        assert_eq!(
            names(&c),
            [
                "LATEST",
                "iter-000001",
                "unusable-iter-000002",
                "unusable-iter-000002-2"
            ]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
