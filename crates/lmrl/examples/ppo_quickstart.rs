//! PPO on a language model with `lmrl::prelude::*`: prompts with a keyword each, a reward for
//! saying the keyword, and the trained policy saved with its tokenizer as a directory that
//! transformers loads.
//!
//! ```sh
//! cargo run --release -p lmrl --example ppo_quickstart                      # a tiny random Llama
//! cargo run --release -p lmrl --example ppo_quickstart -- --model DIR       # HF directory or .gguf
//! ```
//!
//! Without `--model` it writes a tiny randomly initialised Llama with a word-level tokenizer
//! over the prompts' words to a temporary directory and trains that: a few seconds on a CPU.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;
use lmrl::prelude::*;

/// Each prompt with the word its reward looks for.
pub const PROMPTS: [(&str, &str); 8] = [
    ("the capital of france is", "paris"),
    ("the capital of italy is", "rome"),
    ("the capital of spain is", "madrid"),
    ("the capital of japan is", "tokyo"),
    ("my favourite colour is", "blue"),
    ("the sky today is", "blue"),
    ("the opposite of cold is", "hot"),
    ("the opposite of up is", "down"),
];

/// The fraction of the response's words that are the prompt's keyword (its context), ignoring
/// case and punctuation.
pub struct Keyword;

impl Reward<String> for Keyword {
    fn name(&self) -> &str {
        "keyword"
    }

    fn score(&self, samples: &[Sample<'_, String>]) -> Result<Vec<f32>, RewardError> {
        Ok(samples
            .iter()
            .map(|s| {
                let words: Vec<String> = s
                    .response
                    .split_whitespace()
                    .map(|w| {
                        w.trim_matches(|c: char| !c.is_alphanumeric())
                            .to_lowercase()
                    })
                    .collect();
                let hits = words.iter().filter(|w| *w == s.context).count();
                hits as f32 / words.len().max(1) as f32
            })
            .collect())
    }
}

/// `iterations` PPO steps on the model at `model` over [`PROMPTS`]; the policy is saved with its
/// tokenizer to `out`. Returns each iteration's mean reward and statistics.
pub fn train(model: &Path, iterations: u64, out: &Path) -> Result<Vec<(f32, StepStats)>> {
    let device = Device::default().autodiff();
    let policy = AutoLm::from_pretrained(model, &device).context("loading the model")?;
    let reference = policy.valid();
    let tokenizer = LmTokenizer::load_for_model(model).context("loading the tokenizer")?;
    let prompts = PROMPTS
        .iter()
        .map(|(text, keyword)| Prompt::encode(&tokenizer, *text, keyword.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let config = PpoConfig {
        batch_size: prompts.len(),
        mini_batch_size: 4,
        ..PpoConfig::default()
    };
    let model = LmWithValueHead::new(policy, ValueHeadInit::Zeros, &device);
    let mut agent = PpoAgent::new(model, config, &device)?;
    let generation = GenerationConfig::for_tokenizer(&tokenizer).with_max_new_tokens(16);
    let mut log = Vec::new();
    for it in 0..iterations {
        let generation = generation.clone().with_seed(it);
        let (batch, stats) = rollout_step(
            &mut agent,
            &prompts,
            &generation,
            &tokenizer,
            &Keyword,
            &reference,
        )?;
        println!(
            "{it:>3}: reward {:.3}  kl {:.4}  {:?}",
            batch.mean_score(),
            stats.kl,
            batch.texts.first().map_or("", String::as_str)
        );
        log.push((batch.mean_score(), stats));
    }
    agent
        .policy()
        .save_pretrained_with_tokenizer(&tokenizer, out)
        .with_context(|| format!("saving the policy to {}", out.display()))?;
    Ok(log)
}

/// A tiny randomly initialised Llama whose word-level tokenizer knows the words of
/// [`PROMPTS`], saved as a Hugging Face directory in `dir`.
pub fn tiny_checkpoint(dir: &Path) -> Result<()> {
    let mut words = vec!["<unk>", "<pad>", "</s>"];
    for (text, keyword) in PROMPTS {
        for w in text.split_whitespace().chain([keyword]) {
            if !words.contains(&w) {
                words.push(w);
            }
        }
    }
    let tokenizer = LmTokenizer::word_level(&words, Some("</s>"), Some("<pad>"))?;
    let config = LlamaConfig::plain(words.len(), 32, 64, 2, 4, 2, 64);
    let device = Device::default();
    // Seeded, so that every run starts from the same weights.
    device.seed(0);
    let model = AutoLm::init(&ModelConfig::Llama(config), &device);
    model.save_pretrained_with_tokenizer(&tokenizer, dir)?;
    Ok(())
}

#[derive(Parser)]
struct Args {
    /// A Hugging Face model directory or a `.gguf` file; without it, a tiny random Llama.
    #[arg(long)]
    model: Option<PathBuf>,
    /// PPO iterations.
    #[arg(long, default_value_t = 20)]
    iterations: u64,
    /// Where the trained policy and its tokenizer are saved.
    #[arg(long, default_value = "ppo-quickstart-policy")]
    out: PathBuf,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let scratch = tempfile::tempdir()?;
    let model = match args.model {
        Some(path) => path,
        None => {
            let dir = scratch.path().join("tiny-llama");
            tiny_checkpoint(&dir)?;
            dir
        }
    };
    train(&model, args.iterations, &args.out)?;
    println!("saved to {}", args.out.display());
    Ok(())
}
