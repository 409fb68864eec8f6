//! PPO hyper-parameters: the fields of TRL 0.11 `PPOConfig` that change what `step` computes.

use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::ppo::advantages::Gae;
use crate::ppo::kl::KlPenalty;
use crate::ppo::loss::LossParams;

/// PPO configuration. `Default` is the CORY reference script (`imdb_train/cory.py`;
/// `docs/cory.md`): lr 1.41e-5, batch = mini-batch = 256, no accumulation, 4 PPO epochs, adaptive β from
/// 0.4 (target 6, horizon 10000), γ 1, λ 0.95, clips 0.2/0.2, vf_coef 0.1, ratio threshold 10,
/// full-vocabulary KL, running score normalisation on, no reward whitening, no gradient-norm
/// clipping, seed 0, and PyTorch's Adam (β₁ 0.9, β₂ 0.999, ε 1e-8, no weight decay).
/// [`PpoConfig::ppo_reference`] is the PPO baseline script (`ppo.py`).
///
/// Deserialising fills missing fields from `Default` and rejects unknown ones (a misspelt key
/// must not silently fall back to a default). With the `cli` feature it is also a clap
/// argument group: one `--flag` per field, named after the field (`--learning-rate`, alias
/// `--lr`), as TRL's `PPOConfig` is both the config and the command line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct PpoConfig {
    /// Adam learning rate (`learning_rate`).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "lr"))]
    pub learning_rate: f64,
    /// Samples per PPO step (`batch_size`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub batch_size: usize,
    /// Samples per forward/backward pass (`mini_batch_size`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub mini_batch_size: usize,
    /// Minibatches whose gradients are summed (each loss ÷ this, as accelerate does) before one
    /// optimizer step (`gradient_accumulation_steps`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub gradient_accumulation_steps: usize,
    /// Passes over the batch per step (`ppo_epochs`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub ppo_epochs: usize,
    /// Samples per no-grad scoring forward; `None` = `mini_batch_size`, as TRL's
    /// `batched_forward_pass`. Memory only: results do not depend on it.
    #[cfg_attr(feature = "cli", arg(long))]
    pub forward_batch_size: Option<usize>,
    /// Initial β (`init_kl_coef`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub init_kl_coef: f64,
    /// Adaptive (true) or fixed (false) β (`adap_kl_ctrl`).
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub adap_kl_ctrl: bool,
    /// Target KL of the adaptive controller (`target`).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "target-kl"))]
    pub target: f64,
    /// Horizon of the adaptive controller (`horizon`).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "kl-horizon"))]
    pub horizon: f64,
    /// Discount γ (`gamma`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub gamma: f64,
    /// GAE λ (`lam`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub lam: f64,
    /// PPO ratio clip ε (`cliprange`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub cliprange: f64,
    /// Value clip (`cliprange_value`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub cliprange_value: f64,
    /// Value-loss weight (`vf_coef`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub vf_coef: f64,
    /// Minibatches with token-mean ratio above this are skipped (`ratio_threshold`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub ratio_threshold: f64,
    /// KL estimator (`kl_penalty`).
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub kl_penalty: KlPenalty,
    /// Divide scores by the running std (`use_score_scaling`).
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub use_score_scaling: bool,
    /// Also subtract the running mean; only with `use_score_scaling` (`use_score_norm`).
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub use_score_norm: bool,
    /// Clip scores to ±this after normalisation (`score_clip`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub score_clip: Option<f32>,
    /// Whiten the shaped rewards before GAE (`whiten_rewards`).
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub whiten_rewards: bool,
    /// Whiten the GAE advantages over the batch's tokens (TRL always does; not a TRL option).
    ///
    /// Whitening subtracts the batch mean, so under a sparse 0/1 reward and a batch of
    /// different questions, a batch with one right answer gives every token of the seven
    /// wrong ones a negative advantage: the update pushes down what those answers share with
    /// all answers (the format, the length) rather than what the right one did differently.
    /// Off, a wrong answer's advantages are its λ-returns minus the values (≈ 0 with a
    /// zero-initialised value head) and only the right answer's tokens are reinforced.
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub whiten_advantages: bool,
    /// Clip the global gradient L2 norm (PyTorch `clip_grad_norm_`), `None` = off (`max_grad_norm`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub max_grad_norm: Option<f32>,
    /// Leave the weights alone in a step whose raw scores are all equal (not in TRL, which
    /// always updates). Such a batch carries no task signal, yet the whitened advantages have
    /// unit scale whatever the rewards are: their only systematic part is then the per-token
    /// KL penalty, which is smaller for shorter responses, so with a sparse 0/1 reward the
    /// zero-reward batches shrink the responses towards an immediate EOS. A skipped step still
    /// measures its batch (one forward pass of minibatches, no backward, no optimiser step) and
    /// counts for β.
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub skip_equal_scores: bool,
    /// Seed of the minibatch permutations (an app sets it from its run seed).
    #[cfg_attr(feature = "cli", arg(skip))]
    pub seed: u64,
    /// Adam β₁ (PyTorch default 0.9).
    #[cfg_attr(feature = "cli", arg(long))]
    pub adam_beta1: f32,
    /// Adam β₂ (PyTorch default 0.999).
    #[cfg_attr(feature = "cli", arg(long))]
    pub adam_beta2: f32,
    /// Adam ε (PyTorch default 1e-8; burn's default is 1e-5).
    #[cfg_attr(feature = "cli", arg(long))]
    pub adam_epsilon: f32,
}

impl Default for PpoConfig {
    fn default() -> Self {
        Self {
            learning_rate: 1.41e-5,
            batch_size: 256,
            mini_batch_size: 256,
            gradient_accumulation_steps: 1,
            ppo_epochs: 4,
            forward_batch_size: None,
            init_kl_coef: 0.4,
            adap_kl_ctrl: true,
            target: 6.0,
            horizon: 10000.0,
            gamma: 1.0,
            lam: 0.95,
            cliprange: 0.2,
            cliprange_value: 0.2,
            vf_coef: 0.1,
            ratio_threshold: 10.0,
            kl_penalty: KlPenalty::Full,
            use_score_scaling: true,
            use_score_norm: true,
            score_clip: None,
            whiten_rewards: false,
            whiten_advantages: true,
            max_grad_norm: None,
            skip_equal_scores: false,
            seed: 0,
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            adam_epsilon: 1e-8,
        }
    }
}

impl PpoConfig {
    /// The CORY reference script's configuration (same as `Default`).
    pub fn cory_reference() -> Self {
        Self::default()
    }

    /// The PPO baseline script (`imdb_train/ppo.py`): β₀ 0.3, raw scores, seed 123.
    pub fn ppo_reference() -> Self {
        Self {
            init_kl_coef: 0.3,
            use_score_scaling: false,
            use_score_norm: false,
            seed: 123,
            ..Self::default()
        }
    }

    /// `mini_batch_size · gradient_accumulation_steps` (TRL `backward_batch_size`).
    pub fn backward_batch_size(&self) -> usize {
        // Saturating: a product past usize::MAX is larger than any batch, refused as such.
        self.mini_batch_size
            .saturating_mul(self.gradient_accumulation_steps)
    }

    /// The no-grad forward chunk size.
    pub fn forward_batch_size(&self) -> usize {
        self.forward_batch_size.unwrap_or(self.mini_batch_size)
    }

    /// The settings of [`crate::ppo::compute_advantages_with`].
    pub fn gae(&self) -> Gae {
        Gae {
            gamma: self.gamma,
            lam: self.lam,
            whiten_rewards: self.whiten_rewards,
            whiten_advantages: self.whiten_advantages,
        }
    }

    /// The parameters of [`crate::ppo::loss::ppo_loss`].
    pub fn loss_params(&self) -> LossParams {
        LossParams {
            cliprange: self.cliprange,
            cliprange_value: self.cliprange_value,
            vf_coef: self.vf_coef,
            ratio_threshold: self.ratio_threshold,
        }
    }

    /// Checks every field; errors name the field.
    pub fn validate(&self) -> Result<()> {
        fn bad(field: &str, reason: impl Into<String>) -> Result<()> {
            Err(RlError::Config {
                field: field.into(),
                reason: reason.into(),
            })
        }
        for (field, v) in [
            ("batch_size", self.batch_size),
            ("mini_batch_size", self.mini_batch_size),
            (
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
            ),
            ("ppo_epochs", self.ppo_epochs),
        ] {
            if v == 0 {
                return bad(field, "must be at least 1");
            }
        }
        if self.batch_size > crate::MAX_STEP_BATCH {
            return bad(
                "batch_size",
                format!(
                    "must be at most {}, got {}",
                    crate::MAX_STEP_BATCH,
                    self.batch_size
                ),
            );
        }
        if self.forward_batch_size == Some(0) {
            return bad("forward_batch_size", "must be at least 1");
        }
        if self.mini_batch_size > self.batch_size {
            return bad(
                "mini_batch_size",
                format!(
                    "{} is larger than batch_size {}",
                    self.mini_batch_size, self.batch_size
                ),
            );
        }
        let bbs = self.backward_batch_size();
        if bbs > self.batch_size || !self.batch_size.is_multiple_of(bbs) {
            return bad(
                "gradient_accumulation_steps",
                format!(
                    "batch_size {} must be a multiple of mini_batch_size·gradient_accumulation_steps = {bbs} (TRL exact_div)",
                    self.batch_size
                ),
            );
        }
        let positive = [
            ("learning_rate", self.learning_rate),
            ("target", self.target),
            ("horizon", self.horizon),
            ("cliprange", self.cliprange),
            ("cliprange_value", self.cliprange_value),
            ("ratio_threshold", self.ratio_threshold),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return bad(field, format!("must be finite and > 0, got {v}"));
            }
        }
        for (field, v) in [
            ("init_kl_coef", self.init_kl_coef),
            ("vf_coef", self.vf_coef),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(field, format!("must be finite and >= 0, got {v}"));
            }
        }
        for (field, v) in [("gamma", self.gamma), ("lam", self.lam)] {
            if !(0.0..=1.0).contains(&v) {
                return bad(field, format!("must lie in [0, 1], got {v}"));
            }
        }
        for (field, v) in [
            ("max_grad_norm", self.max_grad_norm),
            ("score_clip", self.score_clip),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return bad(field, format!("must be finite and > 0, got {v}"));
            }
        }
        if !(0.0..1.0).contains(&self.adam_beta1) {
            return bad("adam_beta1", "must lie in [0, 1)");
        }
        if !(0.0..1.0).contains(&self.adam_beta2) {
            return bad("adam_beta2", "must lie in [0, 1)");
        }
        if !(self.adam_epsilon.is_finite() && self.adam_epsilon > 0.0) {
            return bad("adam_epsilon", "must be finite and > 0");
        }
        Ok(())
    }
}
