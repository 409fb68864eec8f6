//! The training flags every app shares (clap derive), flattened into each app's `TrainArgs`:
//! [`PpoArgs`] (algorithm and PPO/CORY settings) and [`RunArgs`] (where the run lives, how long
//! it runs, how often it writes). Unset flags keep the value of `--config FILE` (or the app's
//! built-in default); [`crate::resolve_run`] puts them together.
//!
//! Help texts here are the common wording; an app whose meaning differs (its own default, its
//! own noun for a prompt) overrides one with `#[command(mut_arg("flag", |a| a.help("…")))]` on
//! its `TrainArgs`.
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

/// Which algorithm trains the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// One policy trained with PPO (TRL's `PPOTrainer.step`).
    Ppo,
    /// CORY: a pioneer and an observer copy trained on the shared reward R = r₁ + r₂,
    /// exchanging roles every `swap_period` iterations.
    Cory,
}

impl Algo {
    /// The name used in `config.toml`, on the command line and in run directory names.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ppo => "ppo",
            Algo::Cory => "cory",
        }
    }

    /// The `--algo` parser with `cory_help` as the description of `cory` in `--help`, for an
    /// app that words CORY its own way (`mut_arg("algo", |a| a.value_parser(…))`). Accepts and
    /// rejects exactly what the derived parser does.
    pub fn parser_with_cory_help(cory_help: &'static str) -> impl TypedValueParser<Value = Algo> {
        let values = [Algo::Ppo, Algo::Cory].map(|a| {
            let v = a.to_possible_value().expect("no variant is skipped");
            if a == Algo::Cory {
                v.help(cory_help)
            } else {
                v
            }
        });
        PossibleValuesParser::new(values).map(|name| {
            Algo::from_str(&name, false).expect("PossibleValuesParser only passes listed names")
        })
    }
}

/// The algorithm and its PPO / CORY settings.
#[derive(Debug, Args, Clone, Default)]
pub struct PpoArgs {
    /// Algorithm: `ppo` (one policy) or `cory` (pioneer + observer with role exchange).
    #[arg(long, value_enum)]
    pub algo: Option<Algo>,
    /// Prompts per iteration (PPO batch).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Samples per gradient step; must divide the batch size.
    #[arg(long)]
    pub mini_batch_size: Option<usize>,
    /// PPO epochs over each batch.
    #[arg(long)]
    pub ppo_epochs: Option<usize>,
    /// Adam learning rate.
    #[arg(long)]
    pub lr: Option<f64>,
    /// Initial KL coefficient β.
    #[arg(long)]
    pub init_kl_coef: Option<f64>,
    /// Target KL (nats per response) of the adaptive β controller.
    #[arg(long, conflicts_with = "fixed_kl")]
    pub target_kl: Option<f64>,
    /// Keep β fixed at `--init-kl-coef` (no adaptive controller).
    #[arg(long)]
    pub fixed_kl: bool,
    /// Normalise scores with running mean/std (`true`/`false`; default false).
    #[arg(long)]
    pub score_norm: Option<bool>,
    /// CORY: exchange pioneer and observer roles every this many iterations.
    #[arg(long)]
    pub swap_period: Option<usize>,
    /// CORY: reset Adam, β and the score normaliser at every role exchange, as the reference
    /// code's reload does (paper Algorithm 1 swaps weights only).
    #[arg(long)]
    pub reset_state_on_swap: bool,
    /// Random seed (data order, sampling, value-head init, minibatches).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Where the run lives and how long it runs: the flags that may accompany `--resume`, with
/// `--out` and `--config`.
#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    /// Total number of iterations (with `--resume`: the total to reach, counting those done).
    #[arg(long)]
    pub iterations: Option<usize>,
    /// Output directory (default: runs/<app>-<algo>-<seed>).
    #[arg(long, conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// TOML file with settings (keys of config.toml); flags override it.
    #[arg(long, conflicts_with = "resume")]
    pub config: Option<PathBuf>,
    /// Continue the run in DIR from its latest checkpoint, writing into DIR, up to
    /// `--iterations` in total. Other settings come from DIR/config.toml.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Asset cache directory (default: $LMRL_CACHE, $XDG_CACHE_HOME/lmrl or ~/.cache/lmrl).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Write a checkpoint every N iterations (and after the last).
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
    /// Log queries and responses every N iterations.
    #[arg(long)]
    pub samples_every: Option<usize>,
}

/// The settings of an app's run configuration that the shared flags set: mutable views of its
/// fields of these names (build one with [`shared_settings_mut!`](crate::shared_settings_mut)).
/// `lr` and `score_norm` are not here: their types (and defaults) are each app's own.
pub struct SharedSettingsMut<'a> {
    pub algo: &'a mut Algo,
    pub batch_size: &'a mut usize,
    pub mini_batch_size: &'a mut usize,
    pub ppo_epochs: &'a mut usize,
    pub init_kl_coef: &'a mut f64,
    /// `None` keeps β fixed at `init_kl_coef`.
    pub target_kl: &'a mut Option<f64>,
    pub swap_period: &'a mut usize,
    pub reset_state_on_swap: &'a mut bool,
    pub seed: &'a mut u64,
    pub iterations: &'a mut usize,
    pub checkpoint_every: &'a mut usize,
    pub samples_every: &'a mut usize,
}

/// A [`SharedSettingsMut`] of `$cfg`, a run configuration with fields of those names and types.
#[macro_export]
macro_rules! shared_settings_mut {
    ($cfg:expr) => {
        $crate::SharedSettingsMut {
            algo: &mut $cfg.algo,
            batch_size: &mut $cfg.batch_size,
            mini_batch_size: &mut $cfg.mini_batch_size,
            ppo_epochs: &mut $cfg.ppo_epochs,
            init_kl_coef: &mut $cfg.init_kl_coef,
            target_kl: &mut $cfg.target_kl,
            swap_period: &mut $cfg.swap_period,
            reset_state_on_swap: &mut $cfg.reset_state_on_swap,
            seed: &mut $cfg.seed,
            iterations: &mut $cfg.iterations,
            checkpoint_every: &mut $cfg.checkpoint_every,
            samples_every: &mut $cfg.samples_every,
        }
    };
}

/// The names of the flags marked given, in order: what a `changes_settings` returns.
pub fn given(flags: impl IntoIterator<Item = (bool, &'static str)>) -> Vec<&'static str> {
    flags
        .into_iter()
        .filter(|(set, _)| *set)
        .map(|(_, name)| name)
        .collect()
}

fn set<T: Clone>(flag: &Option<T>, field: &mut T) {
    if let Some(v) = flag {
        *field = v.clone();
    }
}

impl PpoArgs {
    /// The flags given, in help order (each changes what a run computes, so none may
    /// accompany `--resume`).
    pub fn changes_settings(&self) -> Vec<&'static str> {
        let set = [
            (self.algo.is_some(), "--algo"),
            (self.batch_size.is_some(), "--batch-size"),
            (self.mini_batch_size.is_some(), "--mini-batch-size"),
            (self.ppo_epochs.is_some(), "--ppo-epochs"),
            (self.lr.is_some(), "--lr"),
            (self.init_kl_coef.is_some(), "--init-kl-coef"),
            (self.target_kl.is_some(), "--target-kl"),
            (self.fixed_kl, "--fixed-kl"),
            (self.score_norm.is_some(), "--score-norm"),
            (self.swap_period.is_some(), "--swap-period"),
            (self.reset_state_on_swap, "--reset-state-on-swap"),
            (self.seed.is_some(), "--seed"),
        ];
        given(set)
    }

    /// Applies the given flags on top of `cfg` (`--lr` and `--score-norm` are the app's to
    /// apply). `--fixed-kl` clears the KL target; `--reset-state-on-swap` only switches on.
    pub fn apply(&self, cfg: &mut SharedSettingsMut<'_>) {
        set(&self.algo, cfg.algo);
        set(&self.batch_size, cfg.batch_size);
        set(&self.mini_batch_size, cfg.mini_batch_size);
        set(&self.ppo_epochs, cfg.ppo_epochs);
        set(&self.init_kl_coef, cfg.init_kl_coef);
        set(&self.swap_period, cfg.swap_period);
        set(&self.seed, cfg.seed);
        if let Some(t) = self.target_kl {
            *cfg.target_kl = Some(t);
        }
        if self.fixed_kl {
            *cfg.target_kl = None;
        }
        if self.reset_state_on_swap {
            *cfg.reset_state_on_swap = true;
        }
    }
}

impl RunArgs {
    /// Applies `--iterations`, `--checkpoint-every` and `--samples-every` on top of `cfg`: the
    /// settings a resumed run may change.
    pub fn apply(&self, cfg: &mut SharedSettingsMut<'_>) {
        set(&self.iterations, cfg.iterations);
        set(&self.checkpoint_every, cfg.checkpoint_every);
        set(&self.samples_every, cfg.samples_every);
    }
}
