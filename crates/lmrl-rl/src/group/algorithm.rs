//! Which group-relative algorithm a [`crate::GroupAgent`] runs, and the settings its step
//! reads whichever it is.

use burn::optim::ModuleOptimizer;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::group::config::{GroupSizes, GrpoConfig, RlooConfig};

/// Which group-relative algorithm a [`GroupAgent`] runs, with its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupAlgorithm {
    /// GRPO (DeepSeekMath; TRL `GRPOTrainer`): group-normalised advantages, clipped per-token
    /// ratio, k3 KL in the loss.
    Grpo(GrpoConfig),
    /// RLOO (Ahmadian et al. 2024; TRL `RLOOTrainer`): leave-one-out baseline, k1 KL in the
    /// reward, clipped per-sequence ratio.
    Rloo(RlooConfig),
}

impl GroupAlgorithm {
    /// `grpo` or `rloo`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Grpo(_) => "grpo",
            Self::Rloo(_) => "rloo",
        }
    }

    /// The optimisation loop's sizes.
    pub fn sizes(&self) -> GroupSizes {
        match self {
            Self::Grpo(c) => c.sizes(),
            Self::Rloo(c) => c.sizes(),
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Grpo(c) => c.validate(),
            Self::Rloo(c) => c.validate(),
        }
    }

    /// β: of the k3 loss term (GRPO) or of the reward penalty (RLOO).
    pub fn beta(&self) -> f64 {
        match self {
            Self::Grpo(c) => c.beta,
            Self::Rloo(c) => c.beta,
        }
    }

    pub(super) fn learning_rate(&self) -> f64 {
        match self {
            Self::Grpo(c) => c.learning_rate,
            Self::Rloo(c) => c.learning_rate,
        }
    }

    pub(super) fn temperature(&self) -> f64 {
        match self {
            Self::Grpo(c) => c.temperature,
            Self::Rloo(c) => c.temperature,
        }
    }

    pub(super) fn max_grad_norm(&self) -> Option<f32> {
        match self {
            Self::Grpo(c) => c.max_grad_norm,
            Self::Rloo(c) => c.max_grad_norm,
        }
    }

    pub(super) fn max_completion_length(&self) -> usize {
        match self {
            Self::Grpo(c) => c.max_completion_length,
            Self::Rloo(c) => c.max_completion_length,
        }
    }

    pub(super) fn mask_truncated(&self) -> bool {
        match self {
            Self::Grpo(c) => c.mask_truncated_completions,
            Self::Rloo(c) => c.mask_truncated_completions,
        }
    }

    pub(super) fn seed(&self) -> u64 {
        match self {
            Self::Grpo(c) => c.seed,
            Self::Rloo(c) => c.seed,
        }
    }

    pub(super) fn adam(&self) -> ModuleOptimizer {
        let (b1, b2, eps) = match self {
            Self::Grpo(c) => (c.adam_beta1, c.adam_beta2, c.adam_epsilon),
            Self::Rloo(c) => (c.adam_beta1, c.adam_beta2, c.adam_epsilon),
        };
        // PyTorch's Adam(W) with TRL's `weight_decay=0`: β 0.9/0.999, ε 1e-8.
        crate::optim::adam(b1, b2, eps)
    }

    /// A no-grad pass over the whole batch is needed before the first update: off-policy the
    /// old log-probs must come from the policy that sampled; RLOO with β ≠ 0 needs every
    /// completion's KL for its rewards.
    pub(super) fn needs_prepass(&self) -> bool {
        !self.sizes().on_policy() || matches!(self, Self::Rloo(c) if c.beta != 0.0)
    }
}
