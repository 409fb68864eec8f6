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

use burn::tensor::Device;
use clap::ArgMatches;
use lmrl_data::AssetCache;
use lmrl_models::LmTokenizer;

use crate::algorithms::{Algo, LearnerSettings};
use crate::assets::{asset_cache, pad_id};
use crate::copies::{CopySpec, Llm2Device};
use crate::device::select_device;
use crate::error::{Result, TaskError, TrainError, chain};
use crate::model::{LoadModel, ModelInfo};
use crate::parallel::{RankContext, open_run_dir, run_ranks};
use crate::provenance::{Provenance, this_commit};
use crate::session::{RunDir, StopToken};
use crate::settings::{CONFIG_FILE, Config, Resolved, RunArgs, resolve, to_toml};
use crate::task::Task;
use crate::trainer::{Outcome, Trainer};

/// A [`Config`] with the learners' sections.
pub trait TrainConfig: Config {
    /// The sections of the learners (`[ppo]`, `[grpo]`, `[rloo]`) and `[cory]`.
    fn learners(&self) -> LearnerSettings<'_>;

    /// Prompts drawn per iteration: the learner's batch (PPO's `batch_size`, or the group
    /// learner's `prompts_per_step`) times `[run] oversample`. A task needs at least this many.
    fn prompts_drawn(&self) -> usize {
        let run = self.run();
        let learner = run.algo.learner(run.cory_learner);
        // Checked when the settings are (`validate_learners`); saturating here all the same.
        self.learners()
            .prompts_per_step(learner)
            .saturating_mul(run.oversample)
    }
}

/// What a task is built from.
pub struct TaskEnv<'a> {
    pub tokenizer: &'a LmTokenizer,
    /// What the task may need to know of the policy (context length, its own EOS id).
    pub model: &'a ModelInfo,
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
/// termination signals with [`crate::install_stop_handler`]). `M` is the model type (`AutoLm`
/// for Hugging Face and GGUF checkpoints, or one's own [`LoadModel`]).
pub fn train_command<C, M, T>(
    app: &str,
    matches: &ArgMatches,
    args: &RunArgs,
    stop: &StopToken,
    build: impl Fn(&C, &TaskEnv<'_>) -> std::result::Result<T, TaskError> + Sync,
) -> Result<ExitCode>
where
    C: TrainConfig + Sync,
    M: LoadModel,
    T: Task<M>,
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
    Ok(
        match train_resolved::<C, M, T>(app, &resolved, args, stop, build)? {
            Outcome::Finished => ExitCode::SUCCESS,
            Outcome::Stopped => ExitCode::from(130),
        },
    )
}

/// Trains the resolved run `resolved` (what [`train_command`] does after resolving; a sweep
/// calls it once per run) on every rank the device flag and the environment ask for
/// ([`crate::parallel`]); `stop` stops it after an iteration, with a checkpoint.
pub fn train_resolved<C, M, T>(
    app: &str,
    resolved: &Resolved<C>,
    args: &RunArgs,
    stop: &StopToken,
    build: impl Fn(&C, &TaskEnv<'_>) -> std::result::Result<T, TaskError> + Sync,
) -> Result<Outcome>
where
    C: TrainConfig + Sync,
    M: LoadModel,
    T: Task<M>,
{
    run_ranks(args.device.as_deref(), |rank| {
        train_rank::<C, M, T>(app, resolved, args, stop, &build, rank)
    })
}

/// One rank of [`train_resolved`].
fn train_rank<C, M, T>(
    app: &str,
    resolved: &Resolved<C>,
    args: &RunArgs,
    stop: &StopToken,
    build: &dyn Fn(&C, &TaskEnv<'_>) -> std::result::Result<T, TaskError>,
    rank: RankContext,
) -> Result<Outcome>
where
    C: TrainConfig,
    M: LoadModel,
    T: Task<M>,
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
    let (tokenizer, info) = M::describe(&run.model, &cache)?;
    let env = TaskEnv {
        tokenizer: &tokenizer,
        model: &info,
        cache: &cache,
        device: &device,
        pad_id: pad_id(&tokenizer, info.eos_token_id),
        rank: collective.rank(),
    };
    let task = build(cfg, &env).map_err(|source| TrainError::Task {
        what: "cannot set up the task".into(),
        source,
    })?;
    let base = M::load(&info, &train_device)?;
    let spec = CopySpec::new(run, cfg.learners(), &base)?;
    let (dir, start) = open_run_dir(collective, || match claim {
        Some(claim) => claim.open(),
        None => Err(TrainError::Rank {
            rank: collective.rank(),
            world: collective.world(),
            reason: "only rank 0 opens the run directory".into(),
        }),
    })?;
    if let Some(dir) = &dir {
        note_other_code(resolved, args);
        write_config(dir.path(), resolved)?;
    }
    let reference = base.valid();
    let llm2_device = llm2_plain.map(|plain| Llm2Device {
        device: plain.clone().autodiff(),
        reference: reference.clone().to_device(&plain),
    });
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

/// Writes `config.toml`: the code that made the run (this binary, or for a resumed run the
/// code that started it with this binary added to `resumed_by`) above the settings.
fn write_config<C: Config>(out: &Path, resolved: &Resolved<C>) -> Result<()> {
    let made_by = match (&resolved.made_by, resolved.resume) {
        (Some(earlier), true) => earlier.clone().resumed_here(),
        (None, true) => Provenance::unknown().resumed_here(),
        (_, false) => Provenance::this_build(),
    };
    let text = made_by.above(&to_toml(&resolved.config));
    Ok(lmrl_runs::atomic_write(
        &out.join(CONFIG_FILE),
        text.as_bytes(),
    )?)
}

/// Says so when the settings come from a run made by other code: the same settings need not
/// give the same rows there (other kernels round differently and then sample other tokens).
fn note_other_code<C>(resolved: &Resolved<C>, args: &RunArgs) {
    let Some(made_by) = resolved.made_by.as_ref().filter(|p| !p.is_this_build()) else {
        return;
    };
    let file = match (&args.config, resolved.resume) {
        (_, true) => resolved.out.join(CONFIG_FILE),
        (Some(f), false) => f.clone(),
        (None, false) => return,
    };
    eprintln!(
        "note: {} was made by lmrl {} at commit {}; this is commit {}: its rows need not \
         reproduce",
        file.display(),
        made_by.lmrl_version,
        made_by.commit,
        this_commit()
    );
}
