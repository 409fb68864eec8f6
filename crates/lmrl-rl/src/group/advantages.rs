//! Group-relative advantages: GRPO's group-normalised rewards and RLOO's leave-one-out baseline,
//! as TRL 1.16 computes them in `GRPOTrainer._generate_and_score_completions` and
//! `RLOOTrainer._generate_and_score_completions`.
//!
//! Rewards are a `[N]` tensor, N = prompts × G, laid out prompt by prompt (the G completions of
//! prompt 0, then those of prompt 1, …), the order of TRL's `RepeatSampler`; TRL's
//! `rewards.view(-1, G)` is `reshape([N / G, G])` here.

use burn::tensor::Tensor;

use crate::error::{Result, RlError};
use crate::group::config::ScaleRewards;
use crate::util::{check_finite, check_shape, to_vec};

/// The `1e-4` TRL adds to the standard deviation before dividing (GRPO `scale_rewards`, RLOO
/// `normalize_advantages`).
pub const STD_EPS: f32 = 1e-4;

/// Number of groups in a batch of `n` rewards with `group_size` completions per prompt; a
/// group size of 0, an empty batch, or a batch that is not a whole number of groups is an
/// [`RlError::Config`] (TRL's `rewards.view(-1, G)` would raise).
pub fn num_groups(n: usize, group_size: usize) -> Result<usize> {
    if group_size == 0 {
        return Err(RlError::Config {
            field: "num_generations".into(),
            reason: "must be at least 1".into(),
        });
    }
    if n == 0 || !n.is_multiple_of(group_size) {
        return Err(RlError::Config {
            field: "num_generations".into(),
            reason: format!(
                "a batch of {n} rewards is not a whole, non-zero number of groups of {group_size}"
            ),
        });
    }
    Ok(n / group_size)
}

fn check_rewards(what: &str, rewards: &Tensor<1>, group_size: usize) -> Result<[usize; 2]> {
    let [n] = rewards.dims();
    let groups = num_groups(n, group_size)?;
    check_finite(what, rewards)?;
    Ok([groups, group_size])
}

/// TRL `trl.trainer.utils.nanstd(x, dim=1)` on a `[B, G]` tensor without NaNs: the
/// Bessel-corrected standard deviation of each row, `[B, 1]`. Needs G ≥ 2.
fn row_std(grouped: Tensor<2>) -> Tensor<2> {
    let [_, g] = grouped.dims();
    let mean = grouped.clone().mean_dim(1);
    let var = (grouped - mean).square().mean_dim(1);
    var.mul_scalar(g as f32 / (g as f32 - 1.0)).sqrt()
}

/// TRL `nanstd(x)` over every element of a `[N]` tensor without NaNs (Bessel-corrected,
/// `[1]`); NaN for a single element, as TRL's.
pub fn batch_std(x: Tensor<1>) -> Tensor<1> {
    let [n] = x.dims();
    let mean = x.clone().mean();
    let var = (x - mean).square().mean();
    var.mul_scalar(n as f32 / (n as f32 - 1.0)).sqrt()
}

/// Statistics TRL logs while scoring a GRPO batch.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct RewardStats {
    /// `reward`: mean reward of the batch.
    pub reward: f32,
    /// `reward_std`: Bessel-corrected std of the rewards of the batch (NaN for one reward).
    pub reward_std: f32,
    /// `frac_reward_zero_std`: fraction of completions whose `std_rewards` is 0 (within
    /// `torch.isclose`'s 1e-8), i.e. of groups with identical rewards for `"group"`/`"none"`.
    pub frac_reward_zero_std: f32,
}

/// Output of [`grpo_advantages`]; every tensor is `[N]`, one value per completion.
#[derive(Debug, Clone)]
pub struct GroupAdvantages {
    /// Â_i, TRL `advantages`.
    pub advantages: Tensor<1>,
    /// The mean reward of the completion's group, TRL `mean_grouped_rewards`.
    pub mean_grouped_rewards: Tensor<1>,
    /// TRL `std_rewards`: the group std (`"group"`, `"none"`) or the batch std (`"batch"`).
    pub std_rewards: Tensor<1>,
    /// Logged statistics.
    pub stats: RewardStats,
}

/// TRL 1.16 `GRPOTrainer._generate_and_score_completions` (`multi_objective_aggregation =
/// "sum_then_normalize"`), the group-relative advantage of DeepSeekMath's outcome supervision:
///
/// - μ_g = mean of the G rewards of the prompt's group;
/// - σ = Bessel-corrected std of the group (`Group`, `None`) or of the whole batch (`Batch`),
///   `trl.trainer.utils.nanstd`; 0 when the group (batch) has a single element;
/// - Â_i = (r_i − μ_g) / (σ + 1e-4), or r_i − μ_g for [`ScaleRewards::None`].
///
/// A group with identical rewards gets Â = 0. `rewards` is `[N]` (the weighted sum of the reward
/// functions), N a multiple of `group_size`. NaN/Inf rewards are an [`RlError::NonFinite`]
/// (TRL's "unscorable completion" NaN path, which zeroes such advantages, is not mirrored).
pub fn grpo_advantages(
    rewards: Tensor<1>,
    group_size: usize,
    scale: ScaleRewards,
) -> Result<GroupAdvantages> {
    let [groups, g] = check_rewards("rewards", &rewards, group_size)?;
    let [n] = rewards.dims();
    let device = rewards.device();
    let grouped = rewards.clone().reshape([groups, g]);
    let mean_grouped = grouped.clone().mean_dim(1).repeat_dim(1, g).reshape([n]);
    let std_rewards: Tensor<1> = match scale {
        ScaleRewards::Group | ScaleRewards::None => {
            if g > 1 {
                row_std(grouped).repeat_dim(1, g).reshape([n])
            } else {
                Tensor::zeros([n], &device)
            }
        }
        ScaleRewards::Batch => {
            if n > 1 {
                batch_std(rewards.clone()).expand([n])
            } else {
                Tensor::zeros([n], &device)
            }
        }
    };
    let centred = rewards.clone() - mean_grouped.clone();
    let advantages = match scale {
        ScaleRewards::None => centred,
        _ => centred / std_rewards.clone().add_scalar(STD_EPS),
    };
    check_finite("advantages", &advantages)?;

    let reward_std = if n > 1 {
        batch_std(rewards.clone())
    } else {
        Tensor::<1>::from_data([f32::NAN], &device)
    };
    let zero_std = std_rewards
        .clone()
        .abs()
        .lower_equal_elem(1e-8)
        .float()
        .mean();
    let s = to_vec(
        "grpo reward statistics",
        Tensor::cat(vec![rewards.mean(), reward_std, zero_std], 0),
    )?;
    Ok(GroupAdvantages {
        advantages,
        mean_grouped_rewards: mean_grouped,
        std_rewards,
        stats: RewardStats {
            reward: s[0],
            reward_std: s[1],
            frac_reward_zero_std: s[2],
        },
    })
}

/// RLOO's reward before the baseline, TRL 1.16 `RLOOTrainer._generate_and_score_completions`:
/// r_i ← clamp(r_i, lo, hi) when `reward_clip_range` is set, then r_i ← r_i − β·KL_i with
/// KL_i the sequence KL of [`crate::group::kl::rloo_sequence_kl`] (`sequence_kl` may be `None`
/// only when β = 0, where TRL skips the penalty).
pub fn rloo_rewards(
    rewards: Tensor<1>,
    sequence_kl: Option<Tensor<1>>,
    beta: f64,
    reward_clip_range: Option<(f32, f32)>,
) -> Result<Tensor<1>> {
    check_finite("rewards", &rewards)?;
    let [n] = rewards.dims();
    let mut r = match reward_clip_range {
        Some((lo, hi)) => rewards.clamp(lo, hi),
        None => rewards,
    };
    if beta != 0.0 {
        let kl = sequence_kl.ok_or_else(|| RlError::Config {
            field: "beta".into(),
            reason: "β ≠ 0 needs the sequence KL to the reference model".into(),
        })?;
        check_shape("sequence kl", &kl, &[n])?;
        check_finite("sequence kl", &kl)?;
        r = r - kl.mul_scalar(beta as f32);
    }
    Ok(r)
}

/// Output of [`rloo_advantages`]; both `[N]`.
#[derive(Debug, Clone)]
pub struct RlooAdvantages {
    /// Â_i, TRL `advantages` (after the optional normalisation).
    pub advantages: Tensor<1>,
    /// b_i, the mean reward of the other k − 1 completions of the prompt (TRL `baselines`).
    pub baselines: Tensor<1>,
}

/// TRL 1.16 `RLOOTrainer._generate_and_score_completions`, the REINFORCE leave-one-out
/// estimator (Kool et al. 2019; Ahmadian et al. 2024):
///
/// - b_i = (Σ_{j in group} r_j − r_i) / (k − 1), the mean of the *other* k − 1 rewards;
/// - Â_i = r_i − b_i (= k/(k−1)·(r_i − mean of the group));
/// - with `normalize` (TRL `normalize_advantages`): Â ← (Â − mean(Â)) / (std(Â) + 1e-4) over
///   the batch, std Bessel-corrected.
///
/// `rewards` is `[N]` (already penalised by [`rloo_rewards`]), N a multiple of `group_size`;
/// a group size of 1 gives Â = 0 (TRL's eval fallback). NaN/Inf is an [`RlError::NonFinite`].
pub fn rloo_advantages(
    rewards: Tensor<1>,
    group_size: usize,
    normalize: bool,
) -> Result<RlooAdvantages> {
    let [groups, k] = check_rewards("rewards", &rewards, group_size)?;
    let [n] = rewards.dims();
    let device = rewards.device();
    let (mut advantages, baselines) = if k > 1 {
        let grouped = rewards.clone().reshape([groups, k]);
        let sum = grouped.clone().sum_dim(1);
        let baselines = (sum - grouped).div_scalar(k as f32 - 1.0).reshape([n]);
        (rewards - baselines.clone(), baselines)
    } else {
        (Tensor::zeros([n], &device), rewards.clone())
    };
    if normalize {
        let mean = advantages.clone().mean();
        let std = batch_std(advantages.clone());
        advantages = (advantages - mean) / std.add_scalar(STD_EPS);
    }
    check_finite("advantages", &advantages)?;
    Ok(RlooAdvantages {
        advantages,
        baselines,
    })
}
