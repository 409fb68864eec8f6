//! Starting, resuming and stopping a training run the same way in every app: the run
//! directory's checkpoints decide whether `--resume` has something to continue (and a fresh run
//! refuses to overwrite an earlier one), and the first Ctrl-C asks the loop to stop after the
//! current iteration, with a checkpoint, so the run can be resumed exactly.
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::checkpoint::CheckpointDir;
use crate::error::{Result, RunError};

/// Set by the first Ctrl-C: the loop finishes the current iteration, checkpoints and stops.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the Ctrl-C handler: the first Ctrl-C sets [`interrupted`], the second exits with
/// status 130 at once (the last complete checkpoint is intact: checkpoints are written into a
/// temporary directory and renamed).
pub fn install_ctrlc() {
    // A second call (sweep) fails harmlessly: the handler is already there.
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("\nsecond Ctrl-C: stopping now; the last complete checkpoint is intact");
            std::process::exit(130);
        }
        eprintln!(
            "\nCtrl-C: finishing this iteration, then checkpointing (Ctrl-C again to quit now)"
        );
    });
}

/// Whether Ctrl-C has asked the run to stop after the current iteration.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// How a training run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    Interrupted,
}

impl Outcome {
    /// 0 when done, 130 (the shell's code for SIGINT) when stopped by Ctrl-C.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Finished => ExitCode::SUCCESS,
            Outcome::Interrupted => ExitCode::from(130),
        }
    }
}

/// A training command from its resolved settings to its exit code: settings that could not be
/// resolved are printed (`error: …`, with their causes) and exit with 2, like a bad flag;
/// otherwise Ctrl-C is installed and `train` runs, its [`Outcome`] giving the code. Errors of
/// `train` itself are returned.
pub fn run_training<T, R: Display, E>(
    resolved: std::result::Result<T, R>,
    train: impl FnOnce(T) -> std::result::Result<Outcome, E>,
) -> std::result::Result<ExitCode, E> {
    let settings = match resolved {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    install_ctrlc();
    Ok(train(settings)?.exit_code())
}

/// Whether iteration `done` (counted from 1) of `total` ends with a checkpoint: every
/// `every` iterations, after the last, and when Ctrl-C asked to stop.
pub fn checkpoint_due(done: usize, every: usize, total: usize, interrupted: bool) -> bool {
    done.is_multiple_of(every) || done == total || interrupted
}

/// The checkpoints of run directory `out` and, when `resume`, the newest one to continue from.
/// A resume without a checkpoint, and a fresh run into a directory that already holds one
/// (metrics or checkpoints), are refused naming `out`.
pub fn open_run(
    out: &Path,
    resume: bool,
    checkpoint_every: usize,
) -> Result<(CheckpointDir, Option<(usize, PathBuf)>)> {
    let ckpts = CheckpointDir::new(out.join("checkpoints"));
    let latest = if resume {
        let l = ckpts.latest()?;
        if l.is_none() {
            return Err(RunError::Resume {
                path: out.to_path_buf(),
                reason: format!(
                    "has no checkpoint to resume from (runs checkpoint every {checkpoint_every} \
                     iterations)"
                ),
            });
        }
        l
    } else {
        if out.join("metrics.csv").exists() || ckpts.latest()?.is_some() {
            return Err(RunError::Resume {
                path: out.to_path_buf(),
                reason: format!(
                    "already holds a run: continue it with --resume {}, or choose another --out",
                    out.display()
                ),
            });
        }
        None
    };
    Ok((ckpts, latest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_needs_a_checkpoint_and_a_fresh_run_an_empty_directory() {
        let out = std::env::temp_dir().join(format!("lmrl-runs-session-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let err = open_run(&out, true, 5).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{} has no checkpoint to resume from (runs checkpoint every 5 iterations)",
                out.display()
            )
        );
        let (ckpts, latest) = open_run(&out, false, 5).unwrap();
        assert!(latest.is_none());
        ckpts.save(3, |_| Ok(())).unwrap();
        let (_, latest) = open_run(&out, true, 5).unwrap();
        assert_eq!(latest.map(|(n, _)| n), Some(3));
        let err = open_run(&out, false, 5).unwrap_err().to_string();
        assert!(
            err.contains("already holds a run: continue it with --resume"),
            "{err}"
        );
        assert!(!interrupted());
        std::fs::remove_dir_all(&out).unwrap();
    }
}
