//! Starting, resuming and stopping a run the same way in every app.
//!
//! - A run directory is held by one process at a time: an advisory lock on `<out>/.lock`
//!   (released by the kernel when the holder dies, so a dead run's lock never blocks).
//! - Holding the lock, the temporaries a killed process left in `checkpoints/` are removed.
//! - `--resume` continues from the newest checkpoint that can be read, falling back to an
//!   older kept one (and saying so); a run that stopped before its first checkpoint is started
//!   again in place, with a message, instead of being stranded.
//! - The first SIGINT, SIGTERM or SIGHUP asks the loop to stop after the current iteration,
//!   with a checkpoint; a second one exits at once (the last complete checkpoint is intact).
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use lmrl_runs::{CheckpointDir, TrainState};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Result, TrainError};

/// Lock file of a run directory.
pub const LOCK_FILE: &str = ".lock";

/// Set by the first termination signal.
static STOP: AtomicBool = AtomicBool::new(false);

/// Installs the handler of SIGINT, SIGTERM and SIGHUP (Slurm, Kubernetes, systemd,
/// `docker stop` and `timeout` send SIGTERM first): the first asks the loop to stop after the
/// current iteration with a checkpoint, the second exits with status 130 at once.
pub fn install_signal_handler() {
    // A second call (a sweep runs several trainings) fails harmlessly: the handler is there.
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            eprintln!("\nsecond stop signal: exiting now; the last complete checkpoint is intact");
            std::process::exit(130);
        }
        eprintln!(
            "\nstop signal: finishing this iteration, then checkpointing (send it again to quit now)"
        );
    });
}

/// Whether a signal asked the run to stop after the current iteration.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Where a run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// From iteration 0.
    Fresh,
    /// From the checkpoint `dir`, after `done` iterations.
    Resume { done: usize, dir: PathBuf },
}

/// An open run directory: its checkpoints, and the lock that keeps other runs out.
#[derive(Debug)]
pub struct RunDir {
    out: PathBuf,
    checkpoints: CheckpointDir,
    _lock: File,
}

impl RunDir {
    /// Opens `out` (creating it) for this process alone and decides where the run starts. A
    /// fresh run into a directory that holds checkpoints is refused; see the module docs for
    /// the rest. `state_for_run` tells whether a checkpoint's `state.toml` is this run's.
    pub fn open<A>(out: &Path, resume: bool, run: (&A, u64)) -> Result<(RunDir, Start)>
    where
        A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        std::fs::create_dir_all(out)
            .map_err(|e| run_err(out, format!("cannot be created: {e}")))?;
        let lock = take_lock(out)?;
        let checkpoints = CheckpointDir::new(out.join("checkpoints"));
        remove_stale_temporaries(checkpoints.root());
        let dir = RunDir {
            out: out.to_path_buf(),
            checkpoints,
            _lock: lock,
        };
        let all = dir.checkpoints.list()?;
        let start = match (resume, all.is_empty()) {
            (false, false) => {
                return Err(run_err(
                    out,
                    format!(
                        "already holds a run: continue it with --resume {}, or choose another --out",
                        out.display()
                    ),
                ));
            }
            (false, true) => {
                if out.join("metrics.csv").exists() {
                    eprintln!(
                        "note: {} holds a run that stopped before its first checkpoint: starting it again",
                        out.display()
                    );
                }
                Start::Fresh
            }
            (true, true) => {
                eprintln!(
                    "note: {} has no checkpoint (the run stopped before its first one): starting it \
                     again from iteration 0",
                    out.display()
                );
                Start::Fresh
            }
            (true, false) => newest_readable(&all, run)?,
        };
        Ok((dir, start))
    }

    /// The run directory.
    pub fn path(&self) -> &Path {
        &self.out
    }

    /// Its checkpoints.
    pub fn checkpoints(&self) -> &CheckpointDir {
        &self.checkpoints
    }
}

fn run_err(path: &Path, reason: String) -> TrainError {
    TrainError::Run {
        path: path.to_path_buf(),
        reason,
    }
}

/// Takes the advisory lock of `out`, naming the holder when another process has it.
fn take_lock(out: &Path) -> Result<File> {
    let path = out.join(LOCK_FILE);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| run_err(&path, format!("cannot be opened: {e}")))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = holder.trim();
            return Err(run_err(
                out,
                format!(
                    "is in use by another run{}: wait for it to finish or choose another --out",
                    if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" (process {holder})")
                    }
                ),
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(run_err(&path, format!("cannot be locked: {e}")));
        }
    }
    // The holder's pid, for the message another process gets.
    let _ = f.set_len(0);
    let _ = write!(f, "{}", std::process::id());
    Ok(f)
}

/// Removes what an interrupted save leaves in `checkpoints/` (hidden `.tmp-…` and `.old-…`
/// entries). Only called with the run's lock held, so no live process is writing them.
fn remove_stale_temporaries(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") || name.starts_with(".old-") {
            let p = e.path();
            let removed = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            if removed.is_ok() {
                eprintln!("note: removed {} left by an interrupted save", p.display());
            }
        }
    }
}

/// The newest checkpoint whose `state.toml` reads as this run's, falling back to older ones.
fn newest_readable<A>(all: &[(usize, PathBuf)], (algo, seed): (&A, u64)) -> Result<Start>
where
    A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut first_error = None;
    for (done, dir) in all.iter().rev() {
        match TrainState::read_for_run(dir, algo, seed) {
            Ok(_) => {
                if first_error.is_some() {
                    eprintln!(
                        "note: resuming from the older checkpoint {} instead",
                        dir.display()
                    );
                }
                return Ok(Start::Resume {
                    done: *done,
                    dir: dir.clone(),
                });
            }
            Err(e) => {
                eprintln!("warning: checkpoint {} cannot be used: {e}", dir.display());
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error
        .expect("called with at least one checkpoint")
        .into())
}

/// Whether iteration `done` (counted from 1) of `total` ends with a checkpoint: every `every`
/// iterations, after the last, and when a signal asked to stop.
pub fn checkpoint_due(done: usize, every: usize, total: usize, stopping: bool) -> bool {
    done.is_multiple_of(every) || done == total || stopping
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_opener_is_refused_and_temporaries_are_cleaned() {
        let out = tempfile::tempdir().unwrap();
        let ckpts = out.path().join("checkpoints");
        std::fs::create_dir_all(ckpts.join(".tmp-iter-000005-99999")).unwrap();
        let (dir, start) = RunDir::open(out.path(), false, (&"ppo".to_string(), 0)).unwrap();
        assert_eq!(start, Start::Fresh);
        assert!(!ckpts.join(".tmp-iter-000005-99999").exists());
        let e = RunDir::open(out.path(), false, (&"ppo".to_string(), 0)).unwrap_err();
        assert!(e.to_string().contains("is in use by another run"), "{e}");
        drop(dir);
        RunDir::open(out.path(), false, (&"ppo".to_string(), 0)).unwrap();
    }
}
