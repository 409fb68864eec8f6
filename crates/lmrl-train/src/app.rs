//! The `train` command of an app, from the parsed command line to the exit code: resolve the
//! settings, claim the run directory, load the model and tokenizer, build the app's task, open
//! the run directory, train.
//!
//! The order is chosen so that a run that cannot start leaves nothing behind and a run that
//! must not start is refused before the slow part: an existing run directory is locked and
//! checked first (busy, already holding a run, nothing to resume — refused before any model is
//! loaded); a directory that does not exist yet is created only once the asset cache, the
//! device, the model, its tokenizer and the task (its data) are set up, so a wrong `--data` or
//! `--model` creates no `--out`.
use std::path::Path;
use std::process::ExitCode;

use burn::module::Module;
use burn::tensor::Device;
use clap::ArgMatches;
use lmrl_data::AssetCache;
use lmrl_models::{AutoLm, LmTokenizer, ModelConfig};
use lmrl_rl::{CoryConfig, GrpoConfig, PpoConfig, RlooConfig};

use crate::assets::{asset_cache, load_tokenizer, pad_id, resolve_path_or_asset};
use crate::copies::{CopySpec, Llm2Device};
use crate::device::select_device;
use crate::error::{Result, TaskError, TrainError};
use crate::parallel::{RankContext, open_run_dir, run_ranks};
use crate::session::{RunDir, StopToken};
use crate::settings::{Algo, CONFIG_FILE, Config, Resolved, RunArgs, resolve, to_toml};
use crate::task::Task;
use crate::trainer::{Outcome, Trainer};

/// A [`Config`] with the learners' sections.
pub trait TrainConfig: Config {
    /// The `[ppo]` section.
    fn ppo(&self) -> &PpoConfig;
    /// The `[cory]` section.
    fn cory(&self) -> &CoryConfig;
    /// The `[grpo]` section.
    fn grpo(&self) -> &GrpoConfig;
    /// The `[rloo]` section.
    fn rloo(&self) -> &RlooConfig;

    /// Prompts drawn per iteration: the learner's batch (PPO's `batch_size`, or the group
    /// learner's `prompts_per_step`) times `[run] oversample`. A task needs at least this many.
    fn prompts_drawn(&self) -> usize {
        let run = self.run();
        let learner = run.algo.learner(run.cory_learner);
        let learners = crate::copies::LearnerSettings {
            ppo: self.ppo(),
            grpo: self.grpo(),
            rloo: self.rloo(),
            cory: self.cory(),
        };
        // Checked when the settings are (`validate_learners`); saturating here all the same.
        learners
            .prompts_per_step(learner)
            .saturating_mul(run.oversample)
    }
}

/// What a task is built from.
pub struct TaskEnv<'a> {
    pub tokenizer: &'a LmTokenizer,
    /// The policy's hyper-parameters (context length, vocabulary).
    pub model: &'a ModelConfig,
    pub cache: &'a AssetCache,
    /// The compute device (without autodiff), for reward models.
    pub device: &'a Device,
    /// The padding id of the batches.
    pub pad_id: u32,
    /// This process's or thread's data-parallel rank (0 in a run on one device): every rank
    /// builds the task, rank 0 alone should print about it.
    pub rank: usize,
}

/// Runs the `train` command of app `app` (its name in hints): `matches` are those of the
/// (sub)command that flattens `C` and [`RunArgs`]. Settings that cannot be resolved are
/// printed and give exit code 2, as a bad flag does; a finished run gives 0, one stopped
/// through `stop` 130. `build` makes the task from the resolved settings (once per
/// data-parallel rank, [`crate::parallel`]). The caller owns `stop` (an app connects it to the
/// termination signals with [`crate::install_stop_handler`]).
pub fn train_command<C, T>(
    app: &str,
    matches: &ArgMatches,
    args: &RunArgs,
    stop: &StopToken,
    build: impl Fn(&C, &TaskEnv<'_>) -> std::result::Result<T, TaskError> + Sync,
) -> Result<ExitCode>
where
    C: TrainConfig + Sync,
    T: Task,
{
    let resolved = match resolve::<C>(matches, args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "error: {}",
                no_run_to_resume(args, &e).unwrap_or_else(|| chain(&e))
            );
            return Ok(ExitCode::from(2));
        }
    };
    Ok(match train_resolved(app, &resolved, args, stop, build)? {
        Outcome::Finished => ExitCode::SUCCESS,
        Outcome::Stopped => ExitCode::from(130),
    })
}

/// Trains the resolved run `resolved` (what [`train_command`] does after resolving; a sweep
/// calls it once per run) on every rank the device flag and the environment ask for
/// ([`crate::parallel`]); `stop` stops it after an iteration, with a checkpoint.
pub fn train_resolved<C, T>(
    app: &str,
    resolved: &Resolved<C>,
    args: &RunArgs,
    stop: &StopToken,
    build: impl Fn(&C, &TaskEnv<'_>) -> std::result::Result<T, TaskError> + Sync,
) -> Result<Outcome>
where
    C: TrainConfig + Sync,
    T: Task,
{
    run_ranks(args.device.as_deref(), |rank| {
        train_rank(app, resolved, args, stop, &build, rank)
    })
}

/// One rank of [`train_resolved`].
fn train_rank<C, T>(
    app: &str,
    resolved: &Resolved<C>,
    args: &RunArgs,
    stop: &StopToken,
    build: &dyn Fn(&C, &TaskEnv<'_>) -> std::result::Result<T, TaskError>,
    rank: RankContext,
) -> Result<Outcome>
where
    C: TrainConfig,
    T: Task,
{
    let cfg = &resolved.config;
    let run = cfg.run();
    let collective = &*rank.collective;
    let llm2_plain = llm2_device(args.llm2_device.as_deref(), run.algo, collective.world())?;
    // Rank 0 alone claims the run directory, before the slow part (see the module docs).
    let claim = match collective.rank() {
        0 => Some(RunDir::claim(
            &resolved.out,
            resolved.resume,
            (&run.algo, run.seed),
        )?),
        _ => None,
    };
    let cache = asset_cache(args.cache_dir.as_deref())?;
    let device = rank.device;
    device.seed(run.seed);
    let train_device = device.clone().autodiff();
    let model_path = resolve_path_or_asset(&cache, &run.model)?;
    let (tokenizer, model_config) = load_tokenizer(&model_path)?;
    let env = TaskEnv {
        tokenizer: &tokenizer,
        model: &model_config,
        cache: &cache,
        device: &device,
        pad_id: pad_id(&tokenizer, &model_config),
        rank: collective.rank(),
    };
    let task = build(cfg, &env).map_err(|source| TrainError::Task {
        what: "cannot set up the task".into(),
        source,
    })?;
    let base = AutoLm::from_pretrained(&model_path, &train_device).map_err(|source| {
        TrainError::Model {
            path: model_path.clone(),
            source,
        }
    })?;
    let (dir, start) = open_run_dir(collective, || match claim {
        Some(claim) => claim.open(),
        None => Err(TrainError::Rank {
            rank: collective.rank(),
            world: collective.world(),
            reason: "only rank 0 opens the run directory".into(),
        }),
    })?;
    if let Some(dir) = &dir {
        write_config(dir.path(), cfg)?;
    }
    let reference = base.valid();
    let llm2_device = llm2_plain.map(|plain| Llm2Device {
        device: plain.clone().autodiff(),
        reference: reference.clone().to_device(&plain),
    });
    let learners = crate::copies::LearnerSettings {
        ppo: cfg.ppo(),
        grpo: cfg.grpo(),
        rloo: cfg.rloo(),
        cory: cfg.cory(),
    };
    let spec = CopySpec::new(run, learners, &model_config);
    let trainer = Trainer {
        task: &task,
        tokenizer: &tokenizer,
        reference: &reference,
        run,
        spec: &spec,
        device: &train_device,
        llm2_device: llm2_device.as_ref(),
        app,
        collective,
        stop,
    };
    trainer.train_rank(dir.as_ref(), start, base)
}

/// The device of CORY's llm2 (`--llm2-device`), checked before anything is loaded or created:
/// CORY only, and a run on one device (data parallel, both copies are spread over the same
/// ranks).
fn llm2_device(spec: Option<&str>, algo: Algo, world: usize) -> Result<Option<Device>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let refuse = |reason: String| TrainError::Device {
        spec: spec.to_string(),
        reason: format!("--llm2-device {reason}"),
    };
    if algo != Algo::Cory {
        return Err(refuse(format!(
            "places CORY's second copy, and this run trains {}",
            algo.name()
        )));
    }
    if world > 1 {
        return Err(refuse(format!(
            "needs a run on one device; this run has {world} data-parallel ranks, over which \
             both copies are spread"
        )));
    }
    if spec.contains(',') {
        return Err(refuse("takes one device, not a list".into()));
    }
    Ok(Some(select_device(Some(spec))?))
}

/// What to say when `--resume DIR` names no run: DIR missing, or without the `config.toml` a
/// run writes when it starts (it was stopped before that).
fn no_run_to_resume(args: &RunArgs, e: &TrainError) -> Option<String> {
    let dir = args.resume.as_ref()?;
    if !matches!(e, TrainError::ReadConfig { .. }) || dir.join(CONFIG_FILE).is_file() {
        return None;
    }
    Some(if dir.is_dir() {
        format!(
            "{} holds no run to resume (no {CONFIG_FILE}: it stopped before it began); start it \
             with --out {}",
            dir.display(),
            dir.display()
        )
    } else {
        format!(
            "{} does not exist: there is no run to resume",
            dir.display()
        )
    })
}

fn write_config<C: Config>(out: &Path, cfg: &C) -> Result<()> {
    Ok(lmrl_runs::atomic_write(
        &out.join(CONFIG_FILE),
        to_toml(cfg).as_bytes(),
    )?)
}

/// An error and its causes on one line (`a: b: c`), each cause once: a cause whose text is
/// already there is left out, and one that repeats the text before it (a library that puts
/// its source into its own message) replaces that text.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        let last = parts.last_mut().expect("starts with one");
        if t.contains(last.as_str()) {
            *last = t;
        } else if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = c.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(String, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn e(parts: &[&str]) -> E {
        parts
            .iter()
            .rev()
            .fold(None, |inner, p| Some(E(p.to_string(), inner.map(Box::new))))
            .unwrap()
    }

    #[test]
    fn every_cause_is_shown_once() {
        let os = "Read-only file system (os error 30)";
        assert_eq!(
            chain(&e(&["cannot write /r/config.toml", os])),
            format!("cannot write /r/config.toml: {os}")
        );
        // A library that repeats its source in its message, under a context that names the
        // file too.
        assert_eq!(
            chain(&e(&[
                "cannot load the model /m",
                &format!("cannot read /m/config.json: {os}"),
                os
            ])),
            format!("cannot load the model /m: cannot read /m/config.json: {os}")
        );
        assert_eq!(
            chain(&e(&[
                "cannot read /m",
                &format!("cannot read /m: {os}"),
                os
            ])),
            format!("cannot read /m: {os}")
        );
    }
}
