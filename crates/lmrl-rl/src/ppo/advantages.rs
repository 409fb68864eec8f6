//! Generalised advantage estimation: TRL 0.11 `PPOTrainer.compute_advantages`
//! (Schulman et al. 2016, eq. 16, with TRL's masking and whitening).

use burn::tensor::Tensor;

use crate::error::Result;
use crate::ppo::mask::ResponseMask;
use crate::ppo::whiten::masked_whiten;
use crate::util::{check_finite, check_shape};

/// Output of [`compute_advantages`], TRL's `(values, advantages, returns)`, each `[B, T]`.
#[derive(Debug, Clone)]
pub struct Advantages {
    /// V_t·mask: the values the value loss clips around (TRL returns the masked values).
    pub values: Tensor<2>,
    /// Whitened GAE advantages Â_t (TRL `masked_whiten(advantages, mask)`, mean not added back),
    /// or the raw A_t when [`Gae::whiten_advantages`] is off. Masked positions hold whitened
    /// zeros, as in TRL; the loss masks them out.
    pub advantages: Tensor<2>,
    /// G_t = A_t + V_t with A **before** whitening (the value target).
    pub returns: Tensor<2>,
}

/// The settings of [`compute_advantages_with`] (fields of [`crate::ppo::PpoConfig`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gae {
    /// Discount γ (`gamma`).
    pub gamma: f64,
    /// GAE λ (`lam`).
    pub lam: f64,
    /// Whiten the shaped rewards before GAE (`whiten_rewards`).
    pub whiten_rewards: bool,
    /// Whiten the advantages (TRL always does; [`crate::ppo::PpoConfig::whiten_advantages`]).
    pub whiten_advantages: bool,
}

/// TRL `compute_advantages(values, rewards, mask)`:
///
/// 1. `values ← values·mask`, `rewards ← rewards·mask` (positions past the response are zero, so
///    V_{T+1} = 0);
/// 2. optionally `rewards ← masked_whiten(rewards, mask, shift_mean=False)` (`whiten_rewards`);
/// 3. backwards over t: δ_t = r_t + γ·V_{t+1} − V_t, A_t = δ_t + γλ·A_{t+1};
/// 4. `returns = A + values`;
/// 5. `advantages = masked_whiten(A, mask)` (unbiased variance, +1e-8, mean subtracted).
pub fn compute_advantages(
    values: Tensor<2>,
    rewards: Tensor<2>,
    mask: &ResponseMask,
    gamma: f64,
    lam: f64,
    whiten_rewards: bool,
) -> Result<Advantages> {
    let gae = Gae {
        gamma,
        lam,
        whiten_rewards,
        whiten_advantages: true,
    };
    compute_advantages_with(values, rewards, mask, &gae, &masked_whiten)
}

/// The whitening of [`compute_advantages`]: TRL `masked_whiten(values, mask, shift_mean)`.
pub type Whiten<'a> = dyn Fn(&str, Tensor<2>, &ResponseMask, bool) -> Result<Tensor<2>> + 'a;

/// [`compute_advantages`] with its whitening (of the advantages unless
/// `gae.whiten_advantages` is off, and of the rewards with `gae.whiten_rewards`) done by
/// `whiten`: a data-parallel learner passes one whose mean and variance are taken over every
/// rank's tokens.
pub fn compute_advantages_with(
    values: Tensor<2>,
    rewards: Tensor<2>,
    mask: &ResponseMask,
    gae: &Gae,
    whiten: &Whiten<'_>,
) -> Result<Advantages> {
    let Gae {
        gamma,
        lam,
        whiten_rewards,
        whiten_advantages,
    } = *gae;
    let [b, t] = mask.dims();
    check_shape("values", &values, &[b, t])?;
    check_shape("rewards", &rewards, &[b, t])?;
    check_finite("values", &values)?;
    check_finite("rewards", &rewards)?;
    let m = mask.tensor();
    let values = values * m.clone();
    let mut rewards = rewards * m;
    if whiten_rewards {
        rewards = whiten("masked_whiten(rewards)", rewards, mask, false)?;
    }
    let gamma_f = gamma as f32;
    let gl = (gamma * lam) as f32;
    let device = values.device();
    let mut reversed: Vec<Tensor<2>> = Vec::with_capacity(t);
    let mut lastgaelam = Tensor::<2>::zeros([b, 1], &device);
    for i in (0..t).rev() {
        let v_t = values.clone().slice([0..b, i..i + 1]);
        let r_t = rewards.clone().slice([0..b, i..i + 1]);
        let delta = if i + 1 < t {
            let v_next = values.clone().slice([0..b, i + 1..i + 2]);
            r_t + v_next.mul_scalar(gamma_f) - v_t
        } else {
            // TRL: nextvalues = 0.0 at the last position; r + γ·0 − V.
            r_t - v_t
        };
        lastgaelam = delta + lastgaelam.mul_scalar(gl);
        reversed.push(lastgaelam.clone());
    }
    reversed.reverse();
    let advantages = if t == 0 {
        Tensor::<2>::zeros([b, 0], &device)
    } else {
        Tensor::cat(reversed, 1)
    };
    let returns = advantages.clone() + values.clone();
    let advantages = if whiten_advantages {
        whiten("masked_whiten(advantages)", advantages, mask, true)?
    } else {
        advantages
    };
    check_finite("advantages", &advantages)?;
    Ok(Advantages {
        values,
        advantages: advantages.detach(),
        returns,
    })
}
