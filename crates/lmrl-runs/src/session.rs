//! Starting, resuming and stopping a training run the same way in every app: the run
//! directory's checkpoints decide whether `--resume` has something to continue (and a fresh run
//! refuses to overwrite an earlier one), and the first Ctrl-C asks the loop to stop after the
//! current iteration, with a checkpoint, so the run can be resumed exactly.
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::checkpoint::CheckpointDir;
use crate::error::{Result, RunError};
use crate::files::atomic_write;
use crate::metrics::{MetricRow, MetricsLog, SamplesLog, final_rows, read_rows};
use crate::plots::draw_run;

/// Written when a run has reached its iteration count.
pub const SUMMARY_FILE: &str = "summary.json";

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

/// Says where the run in `out` starts (iteration `start` of `total`): `false`, after saying
/// so, when it already has them all and there is nothing to train.
pub fn announce_start(out: &Path, start: usize, total: usize, resume: bool) -> bool {
    if start >= total {
        eprintln!(
            "{} already has {start} iterations (asked for {total}): nothing to do",
            out.display()
        );
        return false;
    }
    if resume {
        eprintln!("resuming {} at iteration {start} of {total}", out.display());
    }
    true
}

/// The run's `metrics.csv` and `samples.jsonl` in `out`, open for appending; a resumed run
/// passes the iteration its checkpoint finished, and later rows are dropped.
pub fn open_logs(out: &Path, resume_from: Option<usize>) -> Result<(MetricsLog, SamplesLog)> {
    Ok((
        MetricsLog::open(&out.join("metrics.csv"), resume_from)?,
        SamplesLog::open(&out.join("samples.jsonl"), resume_from)?,
    ))
}

/// Ends a run that Ctrl-C stopped after iteration `done` of `total`: says which checkpoint
/// was kept and the `app` command that resumes it, and redraws the plots.
pub fn stop_interrupted(
    app: &str,
    ckpts: &CheckpointDir,
    out: &Path,
    done: usize,
    total: usize,
) -> Result<Outcome> {
    eprintln!(
        "stopped after iteration {done}; checkpoint {} kept.\nresume with: \
         {app} --resume {} --iterations {total}",
        ckpts.path_for(done).display(),
        out.display(),
    );
    draw_run(out)?;
    Ok(Outcome::Interrupted)
}

/// Ends a finished run: redraws the plots and writes [`SUMMARY_FILE`], made by `summary` from
/// the metrics rows of the last iteration.
pub fn finish_run<S: Serialize>(
    out: &Path,
    summary: impl FnOnce(Vec<MetricRow>) -> S,
) -> Result<()> {
    draw_run(out)?;
    let rows = read_rows(&out.join("metrics.csv"))?;
    let path = out.join(SUMMARY_FILE);
    let text = serde_json::to_string_pretty(&summary(final_rows(&rows))).map_err(|e| {
        RunError::Format {
            path: path.clone(),
            reason: e.to_string(),
        }
    })?;
    atomic_write(&path, text.as_bytes())?;
    eprintln!("done: results in {}", out.display());
    Ok(())
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
