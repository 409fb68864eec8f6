//! Reward shaping: TRL 0.11 `PPOTrainer.compute_rewards`.

use burn::tensor::{Tensor, TensorData};

use crate::error::Result;
use crate::ppo::mask::ResponseMask;
use crate::util::{check_finite, check_shape};

/// Output of [`compute_rewards`], TRL's `(rewards, non_score_reward, kls)`, each `[B, T]`.
#[derive(Debug, Clone)]
pub struct ShapedRewards {
    /// r_t = −β·KL_t, plus the score s at the last unmasked token (TRL `compute_rewards`).
    pub rewards: Tensor<2>,
    /// −β·KL_t at every position (TRL `non_score_reward`; not masked).
    pub non_score_rewards: Tensor<2>,
    /// KL_t at every position (not masked; TRL masks it in `record_step_stats`).
    pub kls: Tensor<2>,
}

/// TRL `compute_rewards(scores, logprobs, ref_logprobs, masks)`, given the per-token KL already
/// computed by [`crate::ppo::kl::kl_penalty`]: `non_score = −β·kl`, `reward = non_score` with the
/// score added at the last unmasked position of each row (`mask.nonzero()[-1]`).
///
/// Errors: a row with no unmasked token ([`crate::RlError::EmptyResponse`]), a NaN/Inf score or
/// KL ([`crate::RlError::NonFinite`], naming sample and token).
pub fn compute_rewards(
    scores: Tensor<1>,
    kls: Tensor<2>,
    mask: &ResponseMask,
    beta: f64,
) -> Result<ShapedRewards> {
    let [b, t] = mask.dims();
    check_shape("scores", &scores, &[b])?;
    check_shape("kls", &kls, &[b, t])?;
    check_finite("scores", &scores)?;
    check_finite("kls", &kls)?;
    let last = mask.last_indices("compute_rewards")?;
    let mut onehot = vec![0.0f32; b * t];
    for (i, &j) in last.iter().enumerate() {
        onehot[i * t + j] = 1.0;
    }
    let device = kls.device();
    let onehot = Tensor::<2>::from_data(TensorData::new(onehot, [b, t]), &device);
    let non_score_rewards = kls.clone().mul_scalar(-beta as f32);
    let rewards = non_score_rewards.clone() + onehot * scores.unsqueeze_dim::<2>(1);
    Ok(ShapedRewards {
        rewards,
        non_score_rewards,
        kls,
    })
}
