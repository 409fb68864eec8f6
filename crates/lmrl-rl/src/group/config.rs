//! GRPO and RLOO hyper-parameters: the fields of TRL 1.16 `GRPOConfig` and `RLOOConfig` that
//! change what the advantage and loss code computes, with TRL's defaults. Both algorithms share
//! one [`GroupConfig`]; what only one of them reads is its [`GroupKind`] ([`GrpoSettings`],
//! [`RlooSettings`]), and the defaults in which TRL's two configs differ come with the kind.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::group::loss::{GrpoLossParams, LossNormalisation, RlooLossParams};

/// How GRPO divides the centred rewards (TRL `GRPOConfig.scale_rewards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ScaleRewards {
    /// `"group"` (TRL's default, also `True`): by the standard deviation of the prompt's group,
    /// as in DeepSeekMath's GRPO.
    #[default]
    Group,
    /// `"batch"`: by the standard deviation of the whole batch (Hu et al., REINFORCE++).
    Batch,
    /// `"none"` (also `False`): no division; Dr. GRPO's recommendation (the group std biases
    /// the update towards prompts that are too easy or too hard).
    None,
}

/// How GRPO reduces the per-token loss to a scalar (TRL `GRPOConfig.loss_type`; the four
/// clipped-ratio variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum GrpoLossType {
    /// `"grpo"`: token mean within each sequence, then mean over sequences (DeepSeekMath).
    Grpo,
    /// `"bnpo"`: token mean over the local batch.
    Bnpo,
    /// `"dr_grpo"`: token sum ÷ (sequences × `max_completion_length`) (Dr. GRPO).
    #[cfg_attr(feature = "cli", value(name = "dr_grpo"))]
    DrGrpo,
    /// `"dapo"` (TRL's default): token sum ÷ the number of active tokens in the whole
    /// generation batch (DAPO's token-level loss).
    #[default]
    Dapo,
}

/// A kind's settings are a clap argument group with the `cli` feature, and plain data without.
#[cfg(feature = "cli")]
pub trait KindArgs: clap::Args {}
#[cfg(feature = "cli")]
impl<T: clap::Args> KindArgs for T {}
/// A kind's settings are a clap argument group with the `cli` feature, and plain data without.
#[cfg(not(feature = "cli"))]
pub trait KindArgs {}
#[cfg(not(feature = "cli"))]
impl<T> KindArgs for T {}

/// One group-relative algorithm's side of a [`GroupConfig`]: the settings only it reads (its
/// fields sit beside the shared ones in its `config.toml` section), the name and flag prefix
/// of that section, and the defaults in which TRL's configs differ.
pub trait GroupKind:
    Debug + Clone + PartialEq + Default + Serialize + DeserializeOwned + KindArgs
{
    /// `GRPO` or `RLOO`, as help texts and errors name it.
    const NAME: &'static str;
    /// The `config.toml` section, `grpo` or `rloo`; its flags are `--<section>-<field>`.
    const SECTION: &'static str;
    /// TRL's default completions per prompt.
    const NUM_GENERATIONS: usize;
    /// Prompts per step by default.
    const PROMPTS_PER_STEP: usize;
    /// TRL's default KL coefficient β.
    const BETA: f64;
    /// What β weighs, for the help of `--<section>-beta`.
    const BETA_HELP: &'static str;
    /// Rejects meaningless values of the kind's own settings.
    fn validate(&self) -> Result<()>;
}

/// The settings of GRPO and RLOO alike: TRL 1.16 `GRPOConfig` / `RLOOConfig`, the fields this
/// crate implements, with TRL's defaults, plus the optimisation loop's sizes (TRL's
/// `TrainingArguments`) and the kind's own settings `kind`, whose fields are read and written
/// beside these. Deserialising fills missing fields from `Default` and rejects unknown ones.
/// With the `cli` feature a clap argument group whose flags carry the section as a prefix
/// (`--grpo-beta`, `--rloo-num-generations`, …), so that both live beside PPO's flags of the
/// same name.
///
/// Sizes: one [`crate::GroupAgent::step`] trains on `prompts_per_step × num_generations`
/// completions (TRL's `generation_batch_size`), in micro-batches of `mini_batch_size`
/// completions (TRL's `per_device_train_batch_size`); `gradient_accumulation_steps`
/// micro-batches make one Adam step, and the whole batch is passed over `num_iterations` times
/// (μ). With the defaults of an app (accumulation over every micro-batch, μ = 1) a step is one
/// Adam step on the whole batch, on-policy: TRL's default `steps_per_generation =
/// gradient_accumulation_steps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, bound = "K: GroupKind")]
pub struct GroupConfig<K: GroupKind> {
    /// Adam learning rate (`learning_rate`, TRL 1e-6).
    pub learning_rate: f64,
    /// Completions per prompt, G (`num_generations`, GRPO 8, RLOO 2); at least 2.
    pub num_generations: usize,
    /// Prompts per step (each answered G times; TRL counts completions instead:
    /// `generation_batch_size` = this × G).
    pub prompts_per_step: usize,
    /// Completions per forward/backward pass (`per_device_train_batch_size`, 8).
    pub mini_batch_size: usize,
    /// Micro-batches whose gradients are summed into one Adam step
    /// (`gradient_accumulation_steps`, 1).
    pub gradient_accumulation_steps: usize,
    /// Completions per no-grad forward of the reference (and, off-policy or for RLOO's KL, the
    /// old policy); `None` = `mini_batch_size`. Memory only: results do not depend on it.
    pub forward_batch_size: Option<usize>,
    /// Longest completion (`max_completion_length`, 512): the divisor of GRPO's `dr_grpo` and
    /// the length at which a completion without EOS counts as truncated. Apps set it from
    /// their own response length.
    pub max_completion_length: usize,
    /// The sampling temperature (`temperature`, 1.0); the log-probabilities are those of the
    /// logits divided by it, as TRL computes them. Apps set it from their sampler.
    pub temperature: f64,
    /// Nucleus sampling (`top_p`, 1.0 = off); informational, the sampler is the app's.
    pub top_p: f64,
    /// Top-k sampling (`top_k`, 0 = off); informational, the sampler is the app's.
    pub top_k: usize,
    /// KL coefficient β (`beta`): of the k3 term in GRPO's loss (TRL 0.0; DeepSeekMath 0.04),
    /// of RLOO's reward penalty r − β·Σ_t k1 (0.05).
    pub beta: f64,
    /// Passes over each generation batch, μ (`num_iterations`, 1).
    pub num_iterations: usize,
    /// Lower clip ε_low of the ratio (`epsilon`, 0.2).
    pub epsilon: f64,
    /// Upper clip ε_high (`epsilon_high`, unset = ε_low; DAPO's clip-higher uses 0.28).
    pub epsilon_high: Option<f64>,
    /// Leave truncated completions (no EOS within `max_completion_length`) out of the loss
    /// (`mask_truncated_completions`, false); their rewards still count in the groups.
    pub mask_truncated_completions: bool,
    /// Clip the global gradient norm (`max_grad_norm`, TRL 1.0); unset = no clipping.
    pub max_grad_norm: Option<f32>,
    /// Adam β₁ (0.9).
    pub adam_beta1: f32,
    /// Adam β₂ (0.999).
    pub adam_beta2: f32,
    /// Adam ε (1e-8).
    pub adam_epsilon: f32,
    /// Seed of the micro-batch shuffles (an app sets it from its run seed).
    pub seed: u64,
    /// The settings only this kind reads.
    #[serde(flatten)]
    pub kind: K,
}

/// GRPO's own settings (TRL `GRPOConfig`). With the `cli` feature, flags `--grpo-…`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default)]
pub struct GrpoSettings {
    /// GRPO: how the centred rewards are scaled (`scale_rewards`: `group` std, `batch` std, or
    /// `none`).
    #[cfg_attr(
        feature = "cli",
        arg(long = "grpo-scale-rewards", id = "grpo_scale_rewards", value_enum)
    )]
    pub scale_rewards: ScaleRewards,
    /// GRPO: loss normalisation (`loss_type`): `grpo` (per-sequence mean, DeepSeekMath), `bnpo`
    /// (token mean of the micro-batch), `dapo` (token mean of the whole batch, TRL's default),
    /// `dr_grpo` (÷ completions × max length).
    #[cfg_attr(
        feature = "cli",
        arg(long = "grpo-loss-type", id = "grpo_loss_type", value_enum)
    )]
    pub loss_type: GrpoLossType,
    /// GRPO: multiply the k3 KL by the importance ratio (`use_bias_correction_kl`, true).
    #[cfg_attr(
        feature = "cli",
        arg(long = "grpo-use-bias-correction-kl", id = "grpo_use_bias_correction_kl", action = clap::ArgAction::Set)
    )]
    pub use_bias_correction_kl: bool,
}

impl Default for GrpoSettings {
    fn default() -> Self {
        Self {
            scale_rewards: ScaleRewards::Group,
            loss_type: GrpoLossType::Dapo,
            use_bias_correction_kl: true,
        }
    }
}

impl GroupKind for GrpoSettings {
    const NAME: &'static str = "GRPO";
    const SECTION: &'static str = "grpo";
    const NUM_GENERATIONS: usize = 8;
    const PROMPTS_PER_STEP: usize = 1;
    const BETA: f64 = 0.0;
    const BETA_HELP: &'static str =
        "of the k3 term in the loss (`beta`, TRL 0.0; DeepSeekMath 0.04)";

    fn validate(&self) -> Result<()> {
        Ok(())
    }
}

/// RLOO's own settings (TRL `RLOOConfig`). With the `cli` feature, flags `--rloo-…`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default)]
pub struct RlooSettings {
    /// RLOO: whiten the advantages over the batch (`normalize_advantages`, false).
    #[cfg_attr(
        feature = "cli",
        arg(long = "rloo-normalize-advantages", id = "rloo_normalize_advantages", action = clap::ArgAction::Set)
    )]
    pub normalize_advantages: bool,
    /// Clamp the rewards to `[lo, hi]` before the KL penalty (`reward_clip_range`, `None`).
    #[cfg_attr(feature = "cli", arg(skip))]
    pub reward_clip_range: Option<(f32, f32)>,
}

impl GroupKind for RlooSettings {
    const NAME: &'static str = "RLOO";
    const SECTION: &'static str = "rloo";
    const NUM_GENERATIONS: usize = 2;
    const PROMPTS_PER_STEP: usize = 4;
    const BETA: f64 = 0.05;
    const BETA_HELP: &'static str = "of the reward penalty r − β·Σ_t k1 (`beta`, 0.05)";

    fn validate(&self) -> Result<()> {
        if let Some((lo, hi)) = self.reward_clip_range
            && (lo.is_nan() || hi.is_nan() || lo > hi)
        {
            return bad(
                "reward_clip_range",
                format!("needs lo ≤ hi, got ({lo}, {hi})"),
            );
        }
        Ok(())
    }
}

/// GRPO configuration (TRL 1.16 `GRPOConfig`): `[grpo]`, flags `--grpo-…`.
pub type GrpoConfig = GroupConfig<GrpoSettings>;

/// RLOO configuration (TRL 1.16 `RLOOConfig`): `[rloo]`, flags `--rloo-…`.
pub type RlooConfig = GroupConfig<RlooSettings>;

impl<K: GroupKind> Default for GroupConfig<K> {
    fn default() -> Self {
        Self {
            learning_rate: 1e-6,
            num_generations: K::NUM_GENERATIONS,
            prompts_per_step: K::PROMPTS_PER_STEP,
            mini_batch_size: 8,
            gradient_accumulation_steps: 1,
            forward_batch_size: None,
            max_completion_length: 512,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            beta: K::BETA,
            num_iterations: 1,
            epsilon: 0.2,
            epsilon_high: None,
            mask_truncated_completions: false,
            max_grad_norm: Some(1.0),
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            adam_epsilon: 1e-8,
            seed: 0,
            kind: K::default(),
        }
    }
}

fn bad(field: &str, reason: impl Into<String>) -> Result<()> {
    Err(RlError::Config {
        field: field.to_string(),
        reason: reason.into(),
    })
}

/// The optimisation loop's sizes, shared by [`GrpoConfig`] and [`RlooConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSizes {
    /// Completions per prompt, G.
    pub num_generations: usize,
    /// Prompts per step.
    pub prompts_per_step: usize,
    /// Completions per forward/backward pass.
    pub mini_batch_size: usize,
    /// Micro-batches per Adam step.
    pub gradient_accumulation_steps: usize,
    /// Completions per no-grad forward.
    pub forward_batch_size: usize,
    /// Passes over the batch, μ.
    pub num_iterations: usize,
}

impl GroupSizes {
    /// Completions per step: prompts × G.
    pub fn completions(&self) -> usize {
        self.prompts_per_step.saturating_mul(self.num_generations)
    }

    /// Micro-batches per pass over the batch.
    pub fn micro_batches(&self) -> usize {
        self.completions() / self.mini_batch_size.max(1)
    }

    /// Adam steps per pass.
    pub fn optimizer_steps_per_pass(&self) -> usize {
        self.micro_batches() / self.gradient_accumulation_steps.max(1)
    }

    /// Whether every log-probability of the step is taken before the first update, so that the
    /// old policy is the current one (TRL then uses `per_token_logps.detach()` as the old
    /// log-probs and skips their forward): one pass, one Adam step.
    pub fn on_policy(&self) -> bool {
        self.num_iterations == 1 && self.optimizer_steps_per_pass() == 1
    }

    fn validate(&self) -> Result<()> {
        for (field, v) in [
            ("prompts_per_step", self.prompts_per_step),
            ("mini_batch_size", self.mini_batch_size),
            (
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
            ),
            ("forward_batch_size", self.forward_batch_size),
        ] {
            if v == 0 {
                return bad(field, "must be at least 1");
            }
        }
        let n = self.completions();
        if n > crate::MAX_STEP_BATCH {
            return bad(
                "prompts_per_step",
                format!(
                    "{} prompts × {} generations is more than {} completions per step",
                    self.prompts_per_step,
                    self.num_generations,
                    crate::MAX_STEP_BATCH
                ),
            );
        }
        let per_step = self
            .mini_batch_size
            .saturating_mul(self.gradient_accumulation_steps);
        if !n.is_multiple_of(per_step) {
            return bad(
                "gradient_accumulation_steps",
                format!(
                    "a step's {n} completions ({} prompts × {} generations) are not a whole \
                     number of Adam steps of mini_batch_size × gradient_accumulation_steps = \
                     {} × {} = {per_step}",
                    self.prompts_per_step,
                    self.num_generations,
                    self.mini_batch_size,
                    self.gradient_accumulation_steps
                ),
            );
        }
        Ok(())
    }
}

fn check_adam(beta1: f32, beta2: f32, eps: f32, max_grad_norm: Option<f32>) -> Result<()> {
    if !((0.0..1.0).contains(&beta1) && (0.0..1.0).contains(&beta2)) {
        return bad("adam_beta1", "Adam β₁ and β₂ must be in [0, 1)");
    }
    if !(eps.is_finite() && eps > 0.0) {
        return bad("adam_epsilon", "must be positive");
    }
    if let Some(m) = max_grad_norm
        && !(m.is_finite() && m > 0.0)
    {
        return bad("max_grad_norm", format!("must be positive, got {m}"));
    }
    Ok(())
}

fn check_clip(epsilon: f64, epsilon_high: Option<f64>) -> Result<()> {
    if !(epsilon.is_finite() && epsilon > 0.0 && epsilon < 1.0) {
        return bad("epsilon", format!("must be in (0, 1), got {epsilon}"));
    }
    if let Some(h) = epsilon_high
        && !(h.is_finite() && h > 0.0)
    {
        return bad("epsilon_high", format!("must be positive, got {h}"));
    }
    Ok(())
}

impl<K: GroupKind> GroupConfig<K> {
    /// The optimisation loop's sizes.
    pub fn sizes(&self) -> GroupSizes {
        GroupSizes {
            num_generations: self.num_generations,
            prompts_per_step: self.prompts_per_step,
            mini_batch_size: self.mini_batch_size,
            gradient_accumulation_steps: self.gradient_accumulation_steps,
            forward_batch_size: self.forward_batch_size.unwrap_or(self.mini_batch_size),
            num_iterations: self.num_iterations,
        }
    }

    /// ε_high as TRL resolves it: `epsilon_high` if set, else `epsilon`.
    pub fn epsilon_high(&self) -> f64 {
        self.epsilon_high.unwrap_or(self.epsilon)
    }

    /// Rejects configurations TRL rejects (fewer than two generations) and meaningless values.
    pub fn validate(&self) -> Result<()> {
        if self.num_generations < 2 {
            return bad(
                "num_generations",
                format!(
                    "{} needs at least 2 completions per prompt, got {}",
                    K::NAME,
                    self.num_generations
                ),
            );
        }
        if self.max_completion_length == 0 {
            return bad("max_completion_length", "must be at least 1");
        }
        if self.num_iterations == 0 {
            return bad("num_iterations", "must be at least 1");
        }
        if !(self.beta.is_finite() && self.beta >= 0.0) {
            return bad("beta", format!("must be finite and ≥ 0, got {}", self.beta));
        }
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            return bad("temperature", "must be positive");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", "must be in (0, 1]");
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad("learning_rate", "must be positive");
        }
        self.kind.validate()?;
        self.sizes().validate()?;
        check_adam(
            self.adam_beta1,
            self.adam_beta2,
            self.adam_epsilon,
            self.max_grad_norm,
        )?;
        check_clip(self.epsilon, self.epsilon_high)
    }
}

impl GrpoConfig {
    /// The loss normalisation of GRPO's `loss_type`. `num_items_in_batch` is TRL's
    /// `num_items_in_batch` (active tokens of the whole generation batch, all processes), used
    /// by `"dapo"` only, with one process and one optimisation step per generation batch (pass
    /// [`LossNormalisation::dapo`] yourself otherwise).
    pub fn normalisation(&self, num_items_in_batch: usize) -> LossNormalisation {
        match self.kind.loss_type {
            GrpoLossType::Grpo => LossNormalisation::Sequence,
            GrpoLossType::Bnpo => LossNormalisation::Token,
            GrpoLossType::DrGrpo => LossNormalisation::DrGrpo {
                max_completion_length: self.max_completion_length,
            },
            GrpoLossType::Dapo => LossNormalisation::dapo(num_items_in_batch, 1, 1, 1),
        }
    }

    /// The parameters of [`crate::group::loss::grpo_loss`].
    pub fn loss_params(&self, num_items_in_batch: usize) -> GrpoLossParams {
        GrpoLossParams {
            epsilon_low: self.epsilon,
            epsilon_high: self.epsilon_high(),
            beta: self.beta,
            use_bias_correction_kl: self.kind.use_bias_correction_kl,
            normalisation: self.normalisation(num_items_in_batch),
        }
    }
}

impl RlooConfig {
    /// The parameters of [`crate::group::loss::rloo_loss`].
    pub fn loss_params(&self) -> RlooLossParams {
        RlooLossParams {
            epsilon_low: self.epsilon,
            epsilon_high: self.epsilon_high(),
        }
    }
}
