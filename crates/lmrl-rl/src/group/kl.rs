//! KL estimators of TRL 1.16's GRPO (k3, in the loss) and RLOO (k1, in the reward).
//!
//! Both are computed from the log-probabilities of the sampled tokens only (no full-vocabulary
//! distribution), per token, `[N, T]`; padded positions are computed too and masked by the
//! consumer, as TRL does.

use burn::tensor::Tensor;

use crate::error::Result;
use crate::ppo::ResponseMask;
use crate::util::check_shape;

/// TRL 1.16 `GRPOTrainer._compute_loss`, `per_token_kl`: Schulman's k3 estimator of
/// KL(π_θ ‖ π_ref) from samples of π_θ (J. Schulman, "Approximating KL divergence", 2020),
///
/// KL_t = exp(ℓ^ref_t − ℓ_t) − (ℓ^ref_t − ℓ_t) − 1,
///
/// with ℓ = log π_θ(y_t | h_t) (`logps`, carrying gradients) and ℓ^ref the reference model's.
/// Unbiased, always ≥ 0, and of lower variance than k1. (TRL multiplies it by the importance
/// ratio when `use_bias_correction_kl`; that is done in [`crate::group::loss::grpo_loss`].)
pub fn k3_kl(logps: Tensor<2>, ref_logps: Tensor<2>) -> Tensor<2> {
    let d = ref_logps - logps;
    (d.clone().exp() - d).sub_scalar(1.0)
}

/// RLOO's KL terms (TRL 1.16 `RLOOTrainer._generate_and_score_completions`).
#[derive(Debug, Clone)]
pub struct RlooKl {
    /// `[N, T]` `per_token_kl` = ℓ^old_t − ℓ^ref_t (k1; can be negative per token).
    pub per_token_kl: Tensor<2>,
    /// `[N]` `kl` = Σ_t m_t·(ℓ^old_t − ℓ^ref_t): the sequence KL subtracted (×β) from the reward.
    pub kl: Tensor<1>,
    /// The logged `kl`: token mean Σ m·per_token_kl / max(Σ m, 1).
    pub mean_kl: f32,
}

/// TRL 1.16 RLOO's KL penalty: the first-order estimator k1 = ℓ^old − ℓ^ref of the rollout
/// policy (`old_logps`, no gradient) against the reference, summed over the completion's
/// tokens, following the RLOO paper (Ahmadian et al. 2024) — unlike GRPO's k3 in the loss.
pub fn rloo_sequence_kl(
    old_logps: Tensor<2>,
    ref_logps: Tensor<2>,
    mask: &ResponseMask,
) -> Result<RlooKl> {
    let dims = mask.dims();
    check_shape("old_logps", &old_logps, &dims)?;
    check_shape("ref_logps", &ref_logps, &dims)?;
    crate::util::check_finite("old_logps", &old_logps)?;
    crate::util::check_finite("ref_logps", &ref_logps)?;
    let per_token_kl = old_logps - ref_logps;
    let masked = per_token_kl.clone() * mask.tensor();
    let total = crate::util::to_scalar("rloo kl", masked.clone().sum())?;
    let kl = masked.sum_dim(1).squeeze_dim::<1>(1);
    Ok(RlooKl {
        per_token_kl,
        kl,
        mean_kl: total / (mask.total().max(1) as f32),
    })
}
