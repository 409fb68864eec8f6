//! Starting, resuming and stopping a run the same way in every app.
//!
//! - A run directory is held by one process at a time: an advisory lock (`flock`) on
//!   `<out>/.lock`, released by the kernel when the holder dies, so a dead run's lock never
//!   blocks. A second run into a held directory is refused, naming it and the holder's pid.
//! - Holding the lock, what a killed process left is put right: the temporaries of
//!   interrupted checkpoint saves and prunes, and of atomic file writes
//!   ([`lmrl_runs::CheckpointDir::recover`], [`lmrl_runs::remove_stale_temporaries`]).
//! - `--resume` continues from the newest checkpoint that can be restored, falling back to an
//!   older kept one (and saying so; the unusable newer one is moved aside to
//!   `checkpoints/unusable-iter-NNNNNN`); a run that stopped before its first checkpoint is
//!   started again in place, with a message, instead of being stranded — with `--out` as with
//!   `--resume`.
//! - A [`StopToken`] the caller owns asks the loop to stop after the current iteration, with a
//!   checkpoint. An app connects it to SIGINT, SIGTERM and SIGHUP with
//!   [`install_stop_handler`]; the library installs no handler of its own.
//!
//! Opening is in two steps so that a run whose inputs are wrong creates nothing, while a busy
//! or finished directory is still refused before any model is loaded: [`RunDir::claim`]
//! locks and checks a directory that exists (and does nothing for one that does not);
//! [`Claim::open`], called once the task and the model are set up, creates the directory if
//! needed and locks and checks it then.
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lmrl_runs::{CheckpointDir, TrainState};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::chain;
use crate::error::{Result, TrainError};

/// Lock file of a run directory.
pub const LOCK_FILE: &str = ".lock";

/// Asks a training run to stop after its current iteration, with a checkpoint. Clones share
/// one request: the caller keeps one (to request from a signal handler, a timer, a UI) and
/// hands another to the loop ([`crate::train_command`]).
#[derive(Debug, Clone, Default)]
pub struct StopToken(Arc<AtomicBool>);

impl StopToken {
    /// A token nothing has requested yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the run to stop after the current iteration.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was requested.
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Installs the process's handler of SIGINT, SIGTERM and SIGHUP (Slurm, Kubernetes, systemd,
/// `docker stop` and `timeout` send SIGTERM first): each signal requests a stop on `token`,
/// then calls `on_signal` with the number of signals received so far (1 for the first), so the
/// app decides what it says and what a repeated signal does.
///
/// A process has one such handler: this fails, and nothing is installed, when the program
/// (or an earlier call) already has one; the caller then decides whether a run that cannot
/// be stopped with a checkpoint may go on.
pub fn install_stop_handler(
    token: &StopToken,
    mut on_signal: impl FnMut(u32) + Send + 'static,
) -> Result<()> {
    let token = token.clone();
    let mut received = 0u32;
    ctrlc::set_handler(move || {
        received = received.saturating_add(1);
        token.request();
        on_signal(received);
    })
    .map_err(|e| TrainError::StopHandler {
        reason: e.to_string(),
    })
}

/// A token connected to the termination signals ([`install_stop_handler`]) the way the apps
/// promise: the first signal says that the run finishes its iteration and checkpoints; a
/// repeated one says that it exits now and calls `exit_now`, which should end the process (the
/// last complete checkpoint is intact; the library itself never exits the process).
pub fn stop_on_signals(exit_now: fn()) -> Result<StopToken> {
    let stop = StopToken::new();
    install_stop_handler(&stop, move |n| {
        if n == 1 {
            eprintln!(
                "\nstop signal: finishing this iteration, then checkpointing (send it again to quit now)"
            );
        } else {
            eprintln!("\nsecond stop signal: exiting now; the last complete checkpoint is intact");
            exit_now();
        }
    })?;
    Ok(stop)
}

/// Where a run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// From iteration 0.
    Fresh,
    /// From the first of `candidates` — checkpoints whose `state.toml` is this run's, as
    /// `(completed iterations, path)`, newest first — that restores ([`RunDir::restore`]).
    Resume { candidates: Vec<(usize, PathBuf)> },
}

/// An open run directory: its checkpoints, and the lock that keeps other runs out.
#[derive(Debug)]
pub struct RunDir {
    out: PathBuf,
    checkpoints: CheckpointDir,
    /// Checkpoints whose `state.toml` is not this run's or cannot be read.
    rejected: Vec<(usize, PathBuf)>,
    _lock: File,
}

/// A run directory claimed by [`RunDir::claim`]: locked and checked if it existed, else
/// nothing on disk yet. [`Claim::open`] finishes opening it.
#[derive(Debug)]
pub struct Claim<'a, A> {
    out: PathBuf,
    resume: bool,
    run: (&'a A, u64),
    held: Option<(RunDir, Start)>,
}

impl RunDir {
    /// Opens `out` (creating it) for this process alone and decides where the run starts:
    /// [`RunDir::claim`] and [`Claim::open`] in one step.
    pub fn open<A>(out: &Path, resume: bool, run: (&A, u64)) -> Result<(RunDir, Start)>
    where
        A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        RunDir::claim(out, resume, run)?.open()
    }

    /// The first step of opening `out` for the run `run` = (algorithm, seed): when `out`
    /// exists it is locked for this process, cleaned of what killed processes left, and
    /// checked — a directory in use by another run, a fresh run into a directory that holds
    /// checkpoints, and a resume with no usable checkpoint are refused here, before the caller
    /// loads anything. When `out` does not exist nothing is created.
    pub fn claim<'a, A>(out: &Path, resume: bool, run: (&'a A, u64)) -> Result<Claim<'a, A>>
    where
        A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let held = if out.exists() || resume {
            Some(Self::lock_and_check(out, resume, run)?)
        } else {
            None
        };
        Ok(Claim {
            out: out.to_path_buf(),
            resume,
            run,
            held,
        })
    }

    fn lock_and_check<A>(out: &Path, resume: bool, run: (&A, u64)) -> Result<(RunDir, Start)>
    where
        A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        if resume && !out.is_dir() {
            return Err(run_err(
                out,
                "does not exist: there is no run to resume".into(),
            ));
        }
        std::fs::create_dir_all(out)
            .map_err(|e| run_err(out, format!("cannot be created: {e}")))?;
        let lock = take_lock(out)?;
        let checkpoints = CheckpointDir::new(out.join("checkpoints"));
        for note in checkpoints.recover()? {
            eprintln!("note: {note}");
        }
        // Only in a run directory (it has the config.toml every run writes first, or that
        // file's temporary): `--out` may name a folder that also holds other things.
        if out.join(crate::CONFIG_FILE).is_file() || has_config_temporary(out) {
            for p in lmrl_runs::remove_stale_temporaries(out) {
                eprintln!(
                    "note: removed {} (left by an interrupted write)",
                    p.display()
                );
            }
        }
        let mut dir = RunDir {
            out: out.to_path_buf(),
            checkpoints,
            rejected: Vec::new(),
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
                if out.join("metrics.csv").exists() || out.join(crate::CONFIG_FILE).exists() {
                    eprintln!(
                        "note: {} holds a run that stopped before its first checkpoint: starting \
                         it again from iteration 0",
                        out.display()
                    );
                }
                Start::Fresh
            }
            (true, true) => {
                eprintln!(
                    "note: {} has no checkpoint (the run stopped before its first one): starting \
                     it again from iteration 0",
                    out.display()
                );
                Start::Fresh
            }
            (true, false) => {
                let (candidates, rejected) = usable(&all, run)?;
                dir.rejected = rejected;
                Start::Resume { candidates }
            }
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

    /// Restores the newest of `candidates` (newest first, as [`Start::Resume`] holds them)
    /// that `restore` accepts, returning its iteration count and what `restore` made of it.
    /// A candidate that fails is reported; once an older one restores, every newer checkpoint
    /// that could not be used is moved aside (to `checkpoints/unusable-iter-NNNNNN`, kept for
    /// inspection) so that pruning and later resumes do not take it for the run's newest.
    /// When none restores, the newest one's error is returned and nothing is moved.
    pub fn restore<T>(
        &self,
        candidates: &[(usize, PathBuf)],
        mut restore: impl FnMut(usize, &Path) -> Result<T>,
    ) -> Result<(usize, T)> {
        let mut failed: Vec<(usize, PathBuf, TrainError)> = Vec::new();
        for (done, ckpt) in candidates {
            // Its files checked against their checksums first: a damaged checkpoint is skipped
            // like one that does not load.
            let checked = crate::assets::verify_checkpoint(ckpt, "");
            match checked.and_then(|()| restore(*done, ckpt)) {
                Ok(t) => {
                    let newer: Vec<&PathBuf> = failed
                        .iter()
                        .map(|(_, p, _)| p)
                        .chain(
                            self.rejected
                                .iter()
                                .filter(|(n, _)| n > done)
                                .map(|(_, p)| p),
                        )
                        .collect();
                    if !newer.is_empty() {
                        eprintln!(
                            "note: resuming from the older checkpoint {} instead",
                            ckpt.display()
                        );
                    }
                    for bad in newer {
                        let to = self.checkpoints.set_aside(bad)?;
                        eprintln!(
                            "note: moved the unusable {} to {}",
                            bad.display(),
                            to.display()
                        );
                    }
                    return Ok((*done, t));
                }
                Err(e) => {
                    eprintln!(
                        "warning: checkpoint {} cannot be restored: {}",
                        ckpt.display(),
                        chain(&e)
                    );
                    failed.push((*done, ckpt.clone(), e));
                }
            }
        }
        match failed.into_iter().next() {
            Some((_, _, e)) => Err(e),
            None => Err(run_err(
                &self.out,
                "has no checkpoint to resume from".into(),
            )),
        }
    }
}

impl<A> Claim<'_, A>
where
    A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    /// Finishes opening: a directory claimed while it existed is returned as it was checked;
    /// one that did not exist is created now, then locked and checked (another run may have
    /// taken it in the meantime).
    pub fn open(self) -> Result<(RunDir, Start)> {
        match self.held {
            Some(held) => Ok(held),
            None => RunDir::lock_and_check(&self.out, self.resume, self.run),
        }
    }

    /// The directory being opened.
    pub fn path(&self) -> &Path {
        &self.out
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

/// Whether `out` holds the temporary of an interrupted first write of `config.toml`.
fn has_config_temporary(out: &Path) -> bool {
    let prefix = format!(".{}.tmp-", crate::CONFIG_FILE);
    std::fs::read_dir(out).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
    })
}

/// Checkpoints as `(completed iterations, path)`.
type Listed = Vec<(usize, PathBuf)>;

/// The checkpoints of `all` whose `state.toml` reads as the run `(algo, seed)`'s and agrees
/// with the directory's number, newest first, and the others (reported). None usable is an
/// error: the newest one's.
fn usable<A>(all: &[(usize, PathBuf)], (algo, seed): (&A, u64)) -> Result<(Listed, Listed)>
where
    A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut first_error: Option<TrainError> = None;
    let mut ok = Vec::new();
    let mut rejected = Vec::new();
    for (done, dir) in all.iter().rev() {
        let checked = TrainState::read_for_run(dir, algo, seed)
            .map_err(TrainError::from)
            .and_then(|s| {
                if s.completed_iterations == *done {
                    Ok(())
                } else {
                    Err(run_err(
                        dir,
                        format!(
                            "says it holds {} iterations, its name {done}",
                            s.completed_iterations
                        ),
                    ))
                }
            });
        match checked {
            Ok(()) => ok.push((*done, dir.clone())),
            Err(e) => {
                eprintln!(
                    "warning: checkpoint {} cannot be used: {}",
                    dir.display(),
                    chain(&e)
                );
                first_error.get_or_insert(e);
                rejected.push((*done, dir.clone()));
            }
        }
    }
    match (ok.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok((ok, rejected)),
    }
}

/// Whether iteration `done` (counted from 1) of `total` ends with a checkpoint: every `every`
/// iterations, after the last, and when a stop was requested.
pub fn checkpoint_due(done: usize, every: usize, total: usize, stopping: bool) -> bool {
    done.is_multiple_of(every) || done == total || stopping
}

#[cfg(test)]
mod tests {
    use super::*;
    use lmrl_runs::{AgentState, STATE_FORMAT};

    fn algo() -> String {
        "ppo".to_string()
    }

    fn checkpoint(out: &Path, done: usize) -> PathBuf {
        CheckpointDir::new(out.join("checkpoints"))
            .save(done, |d| {
                TrainState {
                    format: STATE_FORMAT,
                    algo: algo(),
                    seed: 0,
                    completed_iterations: done,
                    agents: vec![AgentState {
                        name: "policy".into(),
                    }],
                }
                .write(d)?;
                Ok(())
            })
            .unwrap()
    }

    #[test]
    fn a_second_opener_is_refused_and_temporaries_are_cleaned() {
        let out = tempfile::tempdir().unwrap();
        let ckpts = out.path().join("checkpoints");
        std::fs::create_dir_all(ckpts.join(".tmp-iter-000005-99999")).unwrap();
        std::fs::write(out.path().join(".config.toml.tmp-99999"), "x").unwrap();
        let (dir, start) = RunDir::open(out.path(), false, (&algo(), 0)).unwrap();
        assert_eq!(start, Start::Fresh);
        assert!(!ckpts.join(".tmp-iter-000005-99999").exists());
        assert!(!out.path().join(".config.toml.tmp-99999").exists());
        // A folder that is no run directory keeps files that merely look like temporaries.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join(".notes.txt.tmp-12"), "mine").unwrap();
        drop(RunDir::open(other.path(), false, (&algo(), 0)).unwrap());
        assert!(other.path().join(".notes.txt.tmp-12").exists());
        let e = RunDir::open(out.path(), false, (&algo(), 0)).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("is in use by another run"), "{e}");
        assert!(e.contains(&out.path().display().to_string()), "{e}");
        assert!(
            e.contains(&format!("process {}", std::process::id())),
            "{e}"
        );
        // A resume is refused the same way.
        assert!(RunDir::open(out.path(), true, (&algo(), 0)).is_err());
        drop(dir);
        RunDir::open(out.path(), false, (&algo(), 0)).unwrap();
    }

    #[test]
    fn a_missing_directory_is_created_only_by_open() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let ppo = algo();
        let claim = RunDir::claim(&out, false, (&ppo, 0)).unwrap();
        assert!(!out.exists());
        let (dir, start) = claim.open().unwrap();
        assert_eq!(start, Start::Fresh);
        assert!(out.join(LOCK_FILE).is_file());
        // An existing directory is locked by the claim already.
        let e = RunDir::claim(&out, false, (&algo(), 0)).unwrap_err();
        assert!(e.to_string().contains("in use"), "{e}");
        drop(dir);
        let e = RunDir::claim(&tmp.path().join("nothing"), true, (&algo(), 0)).unwrap_err();
        assert!(e.to_string().contains("no run to resume"), "{e}");
    }

    #[test]
    fn resume_falls_back_past_unusable_checkpoints_and_moves_them_aside() {
        let out = tempfile::tempdir().unwrap();
        let out = out.path();
        checkpoint(out, 1);
        checkpoint(out, 2);
        let c3 = checkpoint(out, 3);
        let c4 = checkpoint(out, 4);
        // iter-4's state cannot be read; iter-3's restore fails below.
        std::fs::write(c4.join("state.toml"), "not toml [").unwrap();
        let (dir, start) = RunDir::open(out, true, (&algo(), 0)).unwrap();
        let Start::Resume { candidates } = start else {
            panic!("{start:?}")
        };
        assert_eq!(
            candidates.iter().map(|c| c.0).collect::<Vec<_>>(),
            [3, 2, 1]
        );
        let (done, what) = dir
            .restore(&candidates, |done, p| {
                if done == 3 {
                    Err(run_err(p, "is damaged".into()))
                } else {
                    Ok(format!("restored {done}"))
                }
            })
            .unwrap();
        assert_eq!((done, what.as_str()), (2, "restored 2"));
        // Both newer ones are moved out of the way of pruning and later resumes.
        assert!(!c3.exists() && !c4.exists());
        assert!(out.join("checkpoints/unusable-iter-000003").is_dir());
        assert!(out.join("checkpoints/unusable-iter-000004").is_dir());
        // When nothing restores, the newest one's error comes back and nothing moves.
        let e = dir
            .restore(&candidates[1..], |_, p| {
                Err::<(), _>(run_err(p, "is damaged".into()))
            })
            .unwrap_err();
        assert!(e.to_string().contains("iter-000002 is damaged"), "{e}");
        assert!(out.join("checkpoints/iter-000002").is_dir());
        assert!(out.join("checkpoints/iter-000001").is_dir());
        drop(dir);
        // Every checkpoint unreadable: resume is refused with the newest one's reason.
        let all = tempfile::tempdir().unwrap();
        let c = checkpoint(all.path(), 1);
        std::fs::remove_file(c.join("state.toml")).unwrap();
        let e = RunDir::open(all.path(), true, (&algo(), 0)).unwrap_err();
        assert!(chain(&e).contains("state.toml"), "{}", chain(&e));
    }

    #[test]
    fn clones_of_a_token_share_one_request() {
        let caller = StopToken::new();
        let loop_side = caller.clone();
        assert!(!loop_side.is_requested());
        caller.request();
        assert!(loop_side.is_requested() && caller.is_requested());
        // A separate token is a separate run's.
        assert!(!StopToken::new().is_requested());
    }

    /// The handler is installed only when asked, requests a stop on the caller's token and
    /// reports the count of signals; a second handler is refused with an error instead of
    /// being dropped silently. (The only test of this binary that installs one.)
    #[test]
    fn the_stop_handler_requests_on_the_callers_token() {
        let token = StopToken::new();
        let (tx, rx) = std::sync::mpsc::channel();
        install_stop_handler(&token, move |n| tx.send(n).unwrap_or(())).unwrap();
        assert!(!token.is_requested());
        let pid = std::process::id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let first = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(first, Ok(1));
        assert!(token.is_requested());
        let e = install_stop_handler(&StopToken::new(), |_| {}).unwrap_err();
        assert!(e.to_string().contains("cannot handle stop signals"), "{e}");
    }

    #[test]
    fn a_run_without_checkpoints_starts_again_in_place() {
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("metrics.csv"), "iteration\n").unwrap();
        std::fs::write(out.path().join(crate::CONFIG_FILE), "").unwrap();
        assert_eq!(
            RunDir::open(out.path(), false, (&algo(), 0)).unwrap().1,
            Start::Fresh
        );
        assert_eq!(
            RunDir::open(out.path(), true, (&algo(), 0)).unwrap().1,
            Start::Fresh
        );
        checkpoint(out.path(), 1);
        let e = RunDir::open(out.path(), false, (&algo(), 0)).unwrap_err();
        assert!(e.to_string().contains("already holds a run"), "{e}");
    }
}
