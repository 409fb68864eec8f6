//! The run's settings: `[run]`, `[ppo]`, `[grpo]`, `[rloo]`, `[cory]` (the library's config
//! structs, nested as they are) and this task's own `[imdb]`, each field a flag of the same
//! name (`[grpo]` and `[rloo]` flags carry their section as a prefix: `--grpo-beta`). The fully
//! resolved value is written to `<out>/config.toml`.
use clap::Args;
use lmrl_models::ValueHeadInit;
use lmrl_rl::{CoryConfig, GrpoConfig, PpoConfig, RlooConfig};
use lmrl_train::{
    Algo, Config, LearnerAlgo, LearnerSettings, RunSettings, SamplerSettings, Section, TrainConfig,
    app_sections, follow_sampler, setting, validate_learners,
};
use serde::{Deserialize, Serialize};

/// Everything that decides what a run computes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct ImdbConfig {
    #[command(flatten)]
    pub run: RunSettings,
    #[command(flatten)]
    pub ppo: PpoConfig,
    #[command(flatten)]
    #[serde(default)]
    pub grpo: GrpoConfig,
    #[command(flatten)]
    #[serde(default)]
    pub rloo: RlooConfig,
    #[command(flatten)]
    pub cory: CoryConfig,
    #[command(flatten)]
    pub imdb: ImdbSettings,
}

/// The IMDB task (`[imdb]`): reviews, prompt and response lengths, reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct ImdbSettings {
    /// Reward: `textcat` (IMDB bag-of-words classifier, score = POS−NEG logit),
    /// `textcat-prob` (the same classifier's P(POS), bounded in [0, 1]), `vader` (compound
    /// score), or `distilbert:DIR` (a DistilBERT sentiment classifier, score = POSITIVE logit).
    #[arg(long)]
    pub reward: String,
    /// Review source: a CSV (`text,label` or Pang & Lee `label,text`), a JSONL, an aclImdb
    /// directory, or a named asset (`imdb-sample`, `pang-lee`). Repeat to combine sources.
    #[arg(long)]
    pub data: Vec<String>,
    /// Reviews with this many characters or fewer are dropped before prompts are made.
    #[arg(long)]
    pub min_review_chars: usize,
    /// Shortest prompt in tokens (each review's prompt length is drawn once from MIN..=MAX).
    #[arg(long)]
    pub prompt_tokens_min: usize,
    /// Longest prompt in tokens.
    #[arg(long)]
    pub prompt_tokens_max: usize,
    /// Shortest response in tokens (drawn once per batch from MIN..=MAX).
    #[arg(long)]
    pub response_tokens_min: usize,
    /// Longest response in tokens.
    #[arg(long)]
    pub response_tokens_max: usize,
    /// Repetition penalty of the sampler (1.0 = none; the reference code uses 1.1, which makes
    /// PPO slightly off-policy).
    #[arg(long)]
    pub repetition_penalty: f32,
    /// Drop the EOS token's text from responses before they are scored and shown to the
    /// observer (the reference keeps it).
    #[arg(long, action = clap::ArgAction::Set)]
    pub strip_eos: bool,
    /// Reviews held out of training: the N whose text hashes lowest (the same reviews for every
    /// seed). Their openings are written to `heldout.jsonl` in the run directory and are the
    /// held-out evaluation's prompts; 0 = none (runs of earlier versions).
    #[arg(long)]
    #[serde(default)]
    pub heldout_reviews: usize,
    /// Continuations sampled per held-out opening (pure sampling, `response_tokens_max` tokens)
    /// for the held-out task reward of the base model before training and of every copy after
    /// it; 0 = no evaluation.
    #[arg(long)]
    #[serde(default)]
    pub eval_samples: usize,
    /// Skip review rows that cannot be read (each is named with its line) instead of stopping
    /// at the first one with an error; `false` stops there.
    #[arg(long, action = clap::ArgAction::Set)]
    #[serde(default = "skip_bad_rows_default")]
    pub skip_bad_rows: bool,
}

/// Runs written before `skip_bad_rows` existed skipped bad rows.
fn skip_bad_rows_default() -> bool {
    true
}

impl ImdbConfig {
    /// The default run of `algo`: about 5 minutes of CORY training on a 2-core CPU (12
    /// iterations of 16 prompts; measured in docs/imdb-app.md, "How the defaults were chosen",
    /// on dev seeds and dev openings). The paper runs 100 iterations of 256 prompts at lr
    /// 1.41e-5; with 192 prompts per copy that lr moves nothing, 1.5e-4 does. Every response
    /// has 16 tokens (a length drawn per batch made the logged reward swing with it), β is
    /// fixed (TRL's adaptive controller moves it by < 0.05% per batch of 16), a role exchange
    /// every 3 iterations gives both copies 6 iterations in the plain-query role, and 128
    /// reviews are held out for the before/after evaluation. Score normalisation follows each
    /// reference script: on for CORY, off for PPO.
    pub fn for_algo(algo: Algo) -> Self {
        let cory = algo == Algo::Cory;
        Self {
            run: RunSettings {
                algo,
                cory_learner: LearnerAlgo::Ppo,
                model: "smollm2-135m".into(),
                iterations: 12,
                seed: 0,
                // A random head's per-token values (std ≈ 0.7 on SmolLM2) are as wide as the
                // reward spread and swamp the first advantages; zeros start from the plain
                // λ-returns.
                value_head_init: ValueHeadInit::Zeros,
                lora_rank: 0,
                lora_alpha: 16.0,
                lora_dropout: 0.0,
                lora_rslora: false,
                generation_batch_size: 8,
                checkpoint_every: 5,
                keep_checkpoints: 2,
                samples_every: 1,
                oversample: 1,
            },
            ppo: PpoConfig {
                learning_rate: 1.5e-4,
                batch_size: 16,
                mini_batch_size: 8,
                ppo_epochs: 1,
                init_kl_coef: 0.3,
                adap_kl_ctrl: false,
                use_score_scaling: cory,
                use_score_norm: cory,
                ..PpoConfig::default()
            },
            // 16 completions per step as PPO's batch: 4 prompts × 4 samples, one Adam step.
            grpo: GrpoConfig {
                learning_rate: 2e-5,
                num_generations: 4,
                prompts_per_step: 4,
                mini_batch_size: 8,
                gradient_accumulation_steps: 2,
                ..GrpoConfig::default()
            },
            rloo: RlooConfig {
                learning_rate: 2e-5,
                num_generations: 4,
                prompts_per_step: 4,
                mini_batch_size: 8,
                gradient_accumulation_steps: 2,
                ..RlooConfig::default()
            },
            cory: CoryConfig {
                pioneer_format_metrics: false,
                swap_period: 3,
                ..CoryConfig::default()
            },
            imdb: ImdbSettings {
                reward: "textcat".into(),
                data: vec!["imdb-sample".into(), "pang-lee".into()],
                min_review_chars: 100,
                prompt_tokens_min: 2,
                prompt_tokens_max: 7,
                response_tokens_min: 16,
                response_tokens_max: 16,
                repetition_penalty: 1.0,
                strip_eos: true,
                heldout_reviews: 128,
                eval_samples: 2,
                skip_bad_rows: true,
            },
        }
    }
}

impl Config for ImdbConfig {
    const APP: &'static str = "imdb";

    fn defaults(algo: Algo) -> Self {
        Self::for_algo(algo)
    }

    fn sections() -> Vec<Section> {
        app_sections::<ImdbSettings>("imdb")
    }

    fn run(&self) -> &RunSettings {
        &self.run
    }

    /// Seeds from the run seed; the group learners' temperature and longest completion are
    /// the sampler's (pure sampling, temperature 1, up to the longest response).
    fn finish(&mut self) {
        let sampler = SamplerSettings {
            seed: self.run.seed,
            temperature: 1.0,
            max_new_tokens: self.imdb.response_tokens_max,
        };
        follow_sampler(sampler, &mut self.ppo, &mut self.grpo, &mut self.rloo);
    }

    fn validate(&self) -> lmrl_train::Result<()> {
        validate_learners(&self.run, &self.learners())?;
        let t = &self.imdb;
        if t.prompt_tokens_min == 0 || t.prompt_tokens_min > t.prompt_tokens_max {
            return Err(setting(
                "imdb.prompt_tokens_min",
                "need 1 ≤ prompt_tokens_min ≤ prompt_tokens_max",
            ));
        }
        if t.response_tokens_min == 0 || t.response_tokens_min > t.response_tokens_max {
            return Err(setting(
                "imdb.response_tokens_min",
                "need 1 ≤ response_tokens_min ≤ response_tokens_max",
            ));
        }
        if !(t.repetition_penalty.is_finite() && t.repetition_penalty > 0.0) {
            return Err(setting("imdb.repetition_penalty", "must be a number > 0"));
        }
        if t.data.is_empty() {
            return Err(setting("imdb.data", "at least one review source is needed"));
        }
        Ok(())
    }
}

impl TrainConfig for ImdbConfig {
    fn learners(&self) -> LearnerSettings<'_> {
        LearnerSettings {
            ppo: &self.ppo,
            grpo: &self.grpo,
            rloo: &self.rloo,
            cory: &self.cory,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        for algo in [Algo::Ppo, Algo::Cory, Algo::Grpo, Algo::Rloo] {
            let mut c = ImdbConfig::for_algo(algo);
            c.finish();
            c.validate().unwrap();
            let text = lmrl_train::to_toml(&c);
            let back: ImdbConfig = toml::from_str(&text).unwrap();
            assert_eq!(back, c);
        }
    }

    #[test]
    fn contradictions_are_rejected_with_the_key_named() {
        let mut c = ImdbConfig::for_algo(Algo::Cory);
        c.ppo.mini_batch_size = c.ppo.batch_size + 1;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`ppo.mini_batch_size`"), "{e}");
        let mut c = ImdbConfig::for_algo(Algo::Cory);
        c.cory.swap_period = 0;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`cory.swap_period`"), "{e}");
    }

    #[test]
    fn unknown_keys_in_a_config_file_are_errors() {
        let mut t = toml::Table::try_from(ImdbConfig::for_algo(Algo::Ppo)).unwrap();
        t["ppo"]
            .as_table_mut()
            .unwrap()
            .insert("batchsize".into(), 3.into());
        assert!(toml::Value::Table(t).try_into::<ImdbConfig>().is_err());
    }
}
