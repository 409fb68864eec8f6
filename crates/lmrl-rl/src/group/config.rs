//! GRPO and RLOO hyper-parameters: the fields of TRL 1.16 `GRPOConfig` and `RLOOConfig` that
//! change what the advantage and loss code computes, with TRL's defaults.

use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::group::loss::{GrpoLossParams, LossNormalisation, RlooLossParams};

/// How GRPO divides the centred rewards (TRL `GRPOConfig.scale_rewards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
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
#[serde(rename_all = "snake_case")]
pub enum GrpoLossType {
    /// `"grpo"`: token mean within each sequence, then mean over sequences (DeepSeekMath).
    Grpo,
    /// `"bnpo"`: token mean over the local batch.
    Bnpo,
    /// `"dr_grpo"`: token sum ÷ (sequences × `max_completion_length`) (Dr. GRPO).
    DrGrpo,
    /// `"dapo"` (TRL's default): token sum ÷ the number of active tokens in the whole
    /// generation batch (DAPO's token-level loss).
    #[default]
    Dapo,
}

/// GRPO configuration: TRL 1.16 `GRPOConfig`, the fields this crate implements, with TRL's
/// defaults. Deserialising fills missing fields from `Default` and rejects unknown ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpoConfig {
    /// Learning rate (`learning_rate`, 1e-6).
    pub learning_rate: f64,
    /// Completions per prompt, G (`num_generations`, 8). At least 2.
    pub num_generations: usize,
    /// Maximum completion length (`max_completion_length`, 512); also the divisor of
    /// [`GrpoLossType::DrGrpo`].
    pub max_completion_length: usize,
    /// Sampling temperature (`temperature`, 1.0).
    pub temperature: f64,
    /// Nucleus sampling (`top_p`, 1.0 = off).
    pub top_p: f64,
    /// Top-k sampling (`top_k`, 0 = off).
    pub top_k: usize,
    /// KL coefficient β (`beta`, 0.0: no reference model). DeepSeek-R1 used 0.001.
    pub beta: f64,
    /// Optimisation passes over each generation batch, μ (`num_iterations`, 1).
    pub num_iterations: usize,
    /// Lower clip ε_low of the ratio (`epsilon`, 0.2).
    pub epsilon: f64,
    /// Upper clip ε_high (`epsilon_high`, `None` = `epsilon`; DAPO recommends 0.28).
    pub epsilon_high: Option<f64>,
    /// Reward scaling of the advantages (`scale_rewards`, `"group"`).
    pub scale_rewards: ScaleRewards,
    /// Loss reduction (`loss_type`, `"dapo"`).
    pub loss_type: GrpoLossType,
    /// Multiply the k3 KL term by the importance ratio (`use_bias_correction_kl`, true: the
    /// unbiased reverse-KL gradient of DeepSeek-V3.2).
    pub use_bias_correction_kl: bool,
    /// Exclude truncated completions (no EOS) from the loss (`mask_truncated_completions`,
    /// false).
    pub mask_truncated_completions: bool,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        Self {
            learning_rate: 1e-6,
            num_generations: 8,
            max_completion_length: 512,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            beta: 0.0,
            num_iterations: 1,
            epsilon: 0.2,
            epsilon_high: None,
            scale_rewards: ScaleRewards::Group,
            loss_type: GrpoLossType::Dapo,
            use_bias_correction_kl: true,
            mask_truncated_completions: false,
        }
    }
}

fn bad(field: &str, reason: impl Into<String>) -> Result<()> {
    Err(RlError::Config {
        field: field.to_string(),
        reason: reason.into(),
    })
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

impl GrpoConfig {
    /// ε_high as TRL resolves it: `epsilon_high` if set, else `epsilon`.
    pub fn epsilon_high(&self) -> f64 {
        self.epsilon_high.unwrap_or(self.epsilon)
    }

    /// The loss normalisation of [`Self::loss_type`]. `num_items_in_batch` is TRL's
    /// `num_items_in_batch` (active tokens of the whole generation batch, all processes), used
    /// by `"dapo"` only, with one process and one optimisation step per generation batch (pass
    /// [`LossNormalisation::dapo`] yourself otherwise).
    pub fn normalisation(&self, num_items_in_batch: usize) -> LossNormalisation {
        match self.loss_type {
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
            use_bias_correction_kl: self.use_bias_correction_kl,
            normalisation: self.normalisation(num_items_in_batch),
        }
    }

    /// Rejects configurations TRL rejects (fewer than two generations) and meaningless values.
    pub fn validate(&self) -> Result<()> {
        if self.num_generations < 2 {
            return bad(
                "num_generations",
                format!(
                    "GRPO needs at least 2 completions per prompt, got {}",
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
        check_clip(self.epsilon, self.epsilon_high)
    }
}

/// RLOO configuration: TRL 1.16 `RLOOConfig`, the fields this crate implements, with TRL's
/// defaults. Deserialising fills missing fields from `Default` and rejects unknown ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RlooConfig {
    /// Learning rate (`learning_rate`, 1e-6).
    pub learning_rate: f64,
    /// Completions per prompt, k (`num_generations`, 2). At least 2.
    pub num_generations: usize,
    /// Maximum completion length (`max_completion_length`, 512).
    pub max_completion_length: usize,
    /// Sampling temperature (`temperature`, 1.0).
    pub temperature: f64,
    /// Nucleus sampling (`top_p`, 1.0 = off).
    pub top_p: f64,
    /// Top-k sampling (`top_k`, 0 = off).
    pub top_k: usize,
    /// KL coefficient β of the reward penalty (`beta`, 0.05).
    pub beta: f64,
    /// Optimisation passes over each generation batch (`num_iterations`, 1).
    pub num_iterations: usize,
    /// Lower clip ε_low of the sequence ratio (`epsilon`, 0.2).
    pub epsilon: f64,
    /// Upper clip ε_high (`epsilon_high`, `None` = `epsilon`).
    pub epsilon_high: Option<f64>,
    /// Whiten the advantages over the batch (`normalize_advantages`, false).
    pub normalize_advantages: bool,
    /// Clamp the rewards to `[lo, hi]` before the KL penalty (`reward_clip_range`, `None`).
    pub reward_clip_range: Option<(f32, f32)>,
    /// Exclude truncated completions (no EOS) from the loss (`mask_truncated_completions`,
    /// false).
    pub mask_truncated_completions: bool,
}

impl Default for RlooConfig {
    fn default() -> Self {
        Self {
            learning_rate: 1e-6,
            num_generations: 2,
            max_completion_length: 512,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            beta: 0.05,
            num_iterations: 1,
            epsilon: 0.2,
            epsilon_high: None,
            normalize_advantages: false,
            reward_clip_range: None,
            mask_truncated_completions: false,
        }
    }
}

impl RlooConfig {
    /// ε_high as TRL resolves it: `epsilon_high` if set, else `epsilon`.
    pub fn epsilon_high(&self) -> f64 {
        self.epsilon_high.unwrap_or(self.epsilon)
    }

    /// The parameters of [`crate::group::loss::rloo_loss`].
    pub fn loss_params(&self) -> RlooLossParams {
        RlooLossParams {
            epsilon_low: self.epsilon,
            epsilon_high: self.epsilon_high(),
        }
    }

    /// Rejects configurations TRL rejects (fewer than two generations) and meaningless values.
    pub fn validate(&self) -> Result<()> {
        if self.num_generations < 2 {
            return bad(
                "num_generations",
                format!(
                    "RLOO needs at least 2 completions per prompt, got {}",
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
        if let Some((lo, hi)) = self.reward_clip_range
            && (lo.is_nan() || hi.is_nan() || lo > hi)
        {
            return bad(
                "reward_clip_range",
                format!("needs lo ≤ hi, got ({lo}, {hi})"),
            );
        }
        check_clip(self.epsilon, self.epsilon_high)
    }
}
