//! A training app of one's own: a model, a reward and a task defined in this file — none of them
//! from this workspace's model, reward or app crates — trained by `lmrl-train`'s loop, which
//! gives it what the IMDB and GSM8K apps have: `config.toml`, `metrics.csv`, `samples.jsonl`,
//! plots, checkpoints, exact `--resume`, PPO, GRPO, RLOO or CORY, and a stop on Ctrl-C that
//! keeps a checkpoint.
//!
//! ```text
//! cargo run --release -p lmrl-train --features flex --example own_model_app -- \
//!     --out runs/own --iterations 40
//! cargo run --release -p lmrl-train --features flex --example own_model_app -- \
//!     --resume runs/own --iterations 60
//! ```
//!
//! The model is a positional bigram: each position's next-token distribution depends on its own
//! token and position only, so it needs no attention and no KV cache (`CausalLm` asks for
//! neither). The task asks for a few words of a review after a prompt that ends with the tone
//! wanted, `praise` or `pan`; the reward is the mean tone of the response's words in that
//! direction. What the model must learn — start with a word of the asked tone and keep to it —
//! a bigram can express.
use std::path::PathBuf;
use std::process::ExitCode;

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::gelu;
use burn::tensor::{Device, Int, Tensor};
use clap::{Args, CommandFactory, FromArgMatches, Parser};
use lmrl_data::AssetCache;
use lmrl_models::{CausalLm, GenerationConfig, KvCache, LmTokenizer, Sampling, ValueHeadInit};
use lmrl_rewards::{Reward, RewardError, Sample};
use lmrl_rl::{CoryConfig, GrpoConfig, PpoConfig, Prompt, RlooConfig};
use lmrl_train::{
    Algo, Config, LearnerAlgo, LearnerSettings, LoadModel, ModelInfo, ModelIoError, RunArgs,
    RunSettings, SamplerSettings, Section, StopToken, TaskEnv, TaskError, TrainConfig, TrainModel,
    app_sections, follow_sampler, load_record, save_record, setting, validate_learners,
};
use serde::{Deserialize, Serialize};

/// The vocabulary: the end-of-text word, the two tone markers (`praise`, `pan`), neutral words,
/// then the positive and the negative words (their tone is their place in this list).
const WORDS: [&str; 16] = [
    "end", "praise", "pan", "the", "film", "was", "and", "plot", "great", "superb", "moving",
    "fun", "dull", "awful", "boring", "weak",
];
const EOS: u32 = 0;
const POSITIVE: std::ops::Range<usize> = 8..12;
const NEGATIVE: std::ops::Range<usize> = 12..16;
const WIDTH: usize = 32;
const MAX_POSITIONS: usize = 64;

/// The tone of a word: +1, −1 or 0.
fn tone(word: &str) -> f32 {
    match WORDS.iter().position(|w| *w == word) {
        Some(i) if POSITIVE.contains(&i) => 1.0,
        Some(i) if NEGATIVE.contains(&i) => -1.0,
        _ => 0.0,
    }
}

/// A positional bigram language model.
#[derive(Module, Debug)]
pub struct PositionalBigram {
    tokens: Embedding,
    positions: Embedding,
    mix: Linear,
    norm: LayerNorm,
    head: Linear,
}

impl PositionalBigram {
    fn new(device: &Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(WORDS.len(), WIDTH).init(device),
            positions: EmbeddingConfig::new(MAX_POSITIONS, WIDTH).init(device),
            mix: LinearConfig::new(WIDTH, WIDTH).init(device),
            norm: LayerNormConfig::new(WIDTH).init(device),
            head: LinearConfig::new(WIDTH, WORDS.len()).init(device),
        }
    }
}

impl CausalLm for PositionalBigram {
    /// Each position sees its own token and position alone, so the cache has nothing to hold
    /// and the mask nothing to hide.
    fn hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        _attention_mask: Tensor<2, Int>,
        _cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        // Left padding may give negative positions; they hold padding, whose output is unused.
        let positions = position_ids.clamp(0, MAX_POSITIONS as i64 - 1);
        let x = self.tokens.forward(input_ids) + self.positions.forward(positions);
        self.norm.forward(gelu(self.mix.forward(x)))
    }

    fn lm_head(&self, hidden: Tensor<2>) -> Tensor<2> {
        self.head.forward(hidden)
    }

    fn vocab_size(&self) -> usize {
        WORDS.len()
    }

    fn hidden_size(&self) -> usize {
        WIDTH
    }

    fn max_positions(&self) -> usize {
        MAX_POSITIONS
    }

    fn eos_token_id(&self) -> Option<u32> {
        Some(EOS)
    }
}

/// Checkpoints in burn's record format: the loop needs nothing else to resume.
impl TrainModel for PositionalBigram {
    fn save_weights(&self, dir: &std::path::Path) -> Result<(), ModelIoError> {
        save_record(self, dir)
    }

    fn load_weights(
        base: &Self,
        dir: &std::path::Path,
        device: &Device,
    ) -> Result<Self, ModelIoError> {
        load_record(base, dir, device)
    }
}

/// `[run] model` names no file: the model starts from random weights drawn from the run's seed
/// (the loop seeds the device before it loads the model).
impl LoadModel for PositionalBigram {
    fn describe(model: &str, _cache: &AssetCache) -> lmrl_train::Result<(LmTokenizer, ModelInfo)> {
        if model != "positional-bigram" {
            return Err(setting(
                "run.model",
                format!("this app trains `positional-bigram`, not `{model}`"),
            ));
        }
        let info = ModelInfo {
            location: PathBuf::from(model),
            max_positions: MAX_POSITIONS,
            eos_token_id: Some(EOS),
        };
        // One id per word of `WORDS` (an unknown word reads as `end`), decoded joined by
        // spaces.
        let tokenizer = LmTokenizer::word_level(&WORDS, Some(WORDS[EOS as usize]), None)
            .map_err(|e| setting("run.model", format!("the word vocabulary: {e}")))?;
        Ok((tokenizer, info))
    }

    fn load(_info: &ModelInfo, device: &Device) -> lmrl_train::Result<Self> {
        Ok(Self::new(device))
    }
}

/// The tone a prompt asks for: +1 (`praise`) or −1 (`pan`).
#[derive(Debug, Clone, Copy)]
pub struct Wanted(f32);

/// Mean tone of the response's words, in the direction asked for: 1 when every word has the
/// asked tone, −1 when every word has the other.
pub struct ToneReward;

impl Reward<Wanted> for ToneReward {
    fn name(&self) -> &str {
        "tone"
    }

    fn score(&self, samples: &[Sample<'_, Wanted>]) -> Result<Vec<f32>, RewardError> {
        Ok(samples
            .iter()
            .map(|s| {
                let words: Vec<&str> = s.response.split_whitespace().collect();
                let sum: f32 = words.iter().map(|w| tone(w)).sum();
                s.context.0 * sum / words.len().max(1) as f32
            })
            .collect())
    }
}

/// The task's own settings (`[tone]` in `config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct ToneSettings {
    /// Words sampled per response.
    #[arg(long)]
    pub response_words: usize,
}

/// The run's settings: `[run]`, the learners' sections, and `[tone]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct ToneConfig {
    #[command(flatten)]
    pub run: RunSettings,
    #[command(flatten)]
    pub ppo: PpoConfig,
    #[command(flatten)]
    pub grpo: GrpoConfig,
    #[command(flatten)]
    pub rloo: RlooConfig,
    #[command(flatten)]
    pub cory: CoryConfig,
    #[command(flatten)]
    pub tone: ToneSettings,
}

impl Config for ToneConfig {
    const APP: &'static str = "tone";

    /// Small batches at a high learning rate: the model has 4k parameters.
    fn defaults(algo: Algo) -> Self {
        // GRPO and RLOO: 4 prompts × 4 samples per step, as PPO's 16.
        let (lr, g, prompts, mini, accumulate) = (3e-3, 4, 4, 8, 2);
        Self {
            run: RunSettings {
                algo,
                cory_learner: LearnerAlgo::Ppo,
                model: "positional-bigram".into(),
                iterations: 40,
                seed: 0,
                value_head_init: ValueHeadInit::Zeros,
                lora_rank: 0,
                lora_alpha: 16.0,
                lora_dropout: 0.0,
                lora_rslora: false,
                generation_batch_size: 16,
                checkpoint_every: 5,
                keep_checkpoints: 2,
                samples_every: 5,
                oversample: 1,
            },
            ppo: PpoConfig {
                learning_rate: 1e-2,
                batch_size: 16,
                mini_batch_size: 8,
                ppo_epochs: 2,
                init_kl_coef: 0.05,
                ..PpoConfig::default()
            },
            grpo: GrpoConfig {
                learning_rate: lr,
                num_generations: g,
                prompts_per_step: prompts,
                mini_batch_size: mini,
                gradient_accumulation_steps: accumulate,
                ..GrpoConfig::default()
            },
            rloo: RlooConfig {
                learning_rate: lr,
                num_generations: g,
                prompts_per_step: prompts,
                mini_batch_size: mini,
                gradient_accumulation_steps: accumulate,
                ..RlooConfig::default()
            },
            cory: CoryConfig::default(),
            tone: ToneSettings { response_words: 4 },
        }
    }

    fn sections() -> Vec<Section> {
        app_sections::<ToneSettings>("tone")
    }

    fn run(&self) -> &RunSettings {
        &self.run
    }

    fn finish(&mut self) {
        let sampler = SamplerSettings {
            seed: self.run.seed,
            temperature: 1.0,
            max_new_tokens: self.tone.response_words,
        };
        follow_sampler(sampler, &mut self.ppo, &mut self.grpo, &mut self.rloo);
    }

    fn validate(&self) -> lmrl_train::Result<()> {
        validate_learners(&self.run, &self.learners())?;
        if !(1..MAX_POSITIONS / 2).contains(&self.tone.response_words) {
            return Err(setting(
                "tone.response_words",
                format!("must be in 1..{}", MAX_POSITIONS / 2),
            ));
        }
        Ok(())
    }
}

impl TrainConfig for ToneConfig {
    fn learners(&self) -> LearnerSettings<'_> {
        LearnerSettings {
            ppo: &self.ppo,
            grpo: &self.grpo,
            rloo: &self.rloo,
            cory: &self.cory,
        }
    }
}

/// Every opening × tone: the training prompts.
pub struct ToneTask {
    prompts: Vec<Prompt<Wanted>>,
    response_words: usize,
}

impl ToneTask {
    fn build(cfg: &ToneConfig, env: &TaskEnv<'_>) -> Result<Self, TaskError> {
        let openings = [
            "the film was",
            "the plot was",
            "film and plot",
            "the film",
            "the plot",
            "and the film was",
            "plot and film",
            "film was",
        ];
        let mut prompts = Vec::new();
        for opening in openings {
            for (marker, wanted) in [("praise", 1.0), ("pan", -1.0)] {
                let text = format!("{opening} {marker}");
                prompts.push(Prompt {
                    ids: env.tokenizer.encode(&text)?,
                    text,
                    context: Wanted(wanted),
                });
            }
        }
        Ok(Self {
            prompts,
            response_words: cfg.tone.response_words,
        })
    }
}

impl<M: CausalLm> lmrl_train::Task<M> for ToneTask {
    type Context = Wanted;

    fn prompts(&self) -> &[Prompt<Wanted>] {
        &self.prompts
    }

    fn reward(&self) -> &dyn Reward<Wanted> {
        &ToneReward
    }

    /// CORY's observer sees the pioneer's words, then the prompt again.
    fn observer_prompt(
        &self,
        prompt: &Prompt<Wanted>,
        pioneer_response: &str,
    ) -> Result<String, TaskError> {
        Ok(format!("{pioneer_response} {}", prompt.text))
    }

    fn generation(&self, _iteration: usize, seed: u64) -> GenerationConfig {
        GenerationConfig {
            sampling: Sampling::pure(),
            max_new_tokens: self.response_words,
            repetition_penalty: 1.0,
            eos_token_ids: Vec::new(),
            pad_token_id: EOS,
            seed,
            first_row: 0,
            stop_sequences: Vec::new(),
            min_new_tokens: 0,
        }
    }
}

#[derive(Parser)]
#[command(
    name = "own_model_app",
    about = "A positional bigram learns to write in the tone asked"
)]
struct Cli {
    /// Only its flags are used: the loop resolves the settings from the matches, defaults and
    /// `--config` file included.
    #[command(flatten)]
    #[allow(dead_code)]
    config: ToneConfig,
    #[command(flatten)]
    run: RunArgs,
}

/// The app on the command line `args` (program name first); `stop` ends the run after an
/// iteration, with a checkpoint.
pub fn run<I, T>(args: I, stop: &StopToken) -> Result<ExitCode, TaskError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cmd = lmrl_train::checked_integers(lmrl_train::with_defaults::<ToneConfig>(Cli::command()));
    let matches = match cmd.try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return Ok(ExitCode::from(2));
        }
    };
    let cli = Cli::from_arg_matches(&matches).map_err(|e| setting("flags", e.to_string()))?;
    let code = lmrl_train::train_command::<ToneConfig, PositionalBigram, ToneTask>(
        "own_model_app",
        &matches,
        &cli.run,
        stop,
        ToneTask::build,
    )?;
    Ok(code)
}

#[allow(dead_code)]
fn main() -> ExitCode {
    // The program, not the library, decides what a signal does: the first stops the run after
    // its iteration with a checkpoint, a second exits at once.
    let ran = lmrl_train::stop_on_signals(|| std::process::exit(130))
        .map_err(TaskError::from)
        .and_then(|stop| run(std::env::args_os(), &stop));
    match ran {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", lmrl_train::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
