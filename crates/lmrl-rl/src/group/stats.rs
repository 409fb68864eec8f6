//! The statistics of one GRPO or RLOO step under TRL 1.16's logging keys: what each
//! micro-batch's loss reports, collected over the step, and the per-completion quantities of
//! the whole batch.

use std::collections::BTreeMap;

use lmrl_models::CausalLm;
use serde::Serialize;

use crate::error::Result;
use crate::group::advantages::RewardStats;
use crate::group::agent::GroupAgent;
use crate::group::algorithm::GroupAlgorithm;
use crate::group::loss::{GrpoLossStats, RlooLossStats};
use crate::util::check_finite_host;

/// What one [`GroupAgent::step`] reports: TRL's logged values under their own names, plus the
/// quantities every learner reports.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct GroupStats {
    /// `grpo` or `rloo`.
    pub algorithm: &'static str,
    /// Reward mean, std and the fraction of groups whose rewards are all equal (of the scores
    /// given to the step, before RLOO's KL penalty), TRL `reward`, `reward_std`,
    /// `frac_reward_zero_std`.
    pub rewards: RewardStats,
    /// Batch mean of Σ_t KL_t(π_θ ‖ π_ref) over the full vocabulary at temperature 1, before
    /// the update (the measure of PPO's `objective/kl`).
    pub objective_kl: f32,
    /// Σ_t KL_t per completion.
    pub objective_kl_dist: Vec<f32>,
    /// The algorithm's own KL estimate as TRL logs it (`kl`): GRPO the token mean of the k3
    /// term (×ρ with the bias correction) over the micro-batches, `None` when β = 0; RLOO the
    /// token mean of k1 = ℓ^old − ℓ^ref.
    pub estimator_kl: Option<f32>,
    /// β.
    pub beta: f64,
    /// Token-mean entropy of the policy at temperature 1 (nats).
    pub entropy: f32,
    /// Mean over micro-batches of the loss each back-propagated (before the accumulation
    /// division).
    pub loss: f32,
    /// ½·token mean of (ℓ − ℓ^old)² over the micro-batches (0 on-policy).
    pub approxkl: f32,
    /// `clip_ratio/low_mean`, `high_mean`, `region_mean` (means over micro-batches),
    /// `low_min`, `high_max` (extremes).
    pub clip_ratio_low_mean: f32,
    pub clip_ratio_high_mean: f32,
    pub clip_ratio_region_mean: f32,
    pub clip_ratio_low_min: f32,
    pub clip_ratio_high_max: f32,
    /// `completions/mean_length`, `min_length`, `max_length` (tokens, EOS included).
    pub completion_mean_length: f32,
    pub completion_min_length: f32,
    pub completion_max_length: f32,
    /// `completions/clipped_ratio`: fraction of completions that reached
    /// `max_completion_length` without EOS.
    pub truncated_fraction: f32,
    /// Mean advantage and its spread (diagnostics).
    pub advantages_mean: f32,
    pub advantages_std: f32,
    /// Adam steps taken.
    pub optimizer_steps: usize,
    /// Mean global gradient norm before clipping (when clipping is on).
    pub grad_norm: Option<f32>,
    pub learning_rate: f64,
}

impl GroupStats {
    /// Every statistic under the key TRL's trainer logs it with (plus `objective/kl`, the
    /// cross-algorithm KL).
    pub fn to_trl_map(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: f64| {
            m.insert(k.to_string(), v);
        };
        put("reward", f64::from(self.rewards.reward));
        put("reward_std", f64::from(self.rewards.reward_std));
        put(
            "frac_reward_zero_std",
            f64::from(self.rewards.frac_reward_zero_std),
        );
        put("objective/kl", f64::from(self.objective_kl));
        if let Some(k) = self.estimator_kl {
            put("kl", f64::from(k));
        }
        put("beta", self.beta);
        put("entropy", f64::from(self.entropy));
        put("loss", f64::from(self.loss));
        put("clip_ratio/low_mean", f64::from(self.clip_ratio_low_mean));
        put("clip_ratio/high_mean", f64::from(self.clip_ratio_high_mean));
        put(
            "clip_ratio/region_mean",
            f64::from(self.clip_ratio_region_mean),
        );
        put("clip_ratio/low_min", f64::from(self.clip_ratio_low_min));
        put("clip_ratio/high_max", f64::from(self.clip_ratio_high_max));
        put(
            "completions/mean_length",
            f64::from(self.completion_mean_length),
        );
        put(
            "completions/min_length",
            f64::from(self.completion_min_length),
        );
        put(
            "completions/max_length",
            f64::from(self.completion_max_length),
        );
        put(
            "completions/clipped_ratio",
            f64::from(self.truncated_fraction),
        );
        put("advantages/mean", f64::from(self.advantages_mean));
        put("advantages/std", f64::from(self.advantages_std));
        put("learning_rate", self.learning_rate);
        if let Some(g) = self.grad_norm {
            put("grad_norm", f64::from(g));
        }
        m
    }
}

/// Per-completion quantities the step gathers for its statistics.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) kl: Vec<Option<f32>>,
    pub(super) entropy: Vec<Option<f32>>,
    pub(super) loss: Vec<f32>,
    pub(super) approxkl: Vec<f32>,
    pub(super) estimator_kl: Vec<f32>,
    pub(super) low_mean: Vec<f32>,
    pub(super) high_mean: Vec<f32>,
    pub(super) region_mean: Vec<f32>,
    pub(super) low_min: Vec<f32>,
    pub(super) high_max: Vec<f32>,
    pub(super) grad_norm_sum: f64,
    pub(super) optimizer_steps: usize,
}

/// Every completion's quantities for a step's statistics, in batch order (gathered from every
/// rank).
pub(super) struct PerCompletion<'a> {
    pub(super) lengths: &'a [usize],
    pub(super) truncated: &'a [bool],
    pub(super) advantages: &'a [f32],
    /// Σ_t full KL (temperature 1).
    pub(super) kl: Vec<f32>,
    /// Σ_t entropy (temperature 1).
    pub(super) entropy: Vec<f32>,
}

pub(super) fn push_grpo_stats(col: &mut Collected, s: &GrpoLossStats) {
    if let Some(k) = s.kl {
        col.estimator_kl.push(k);
    }
    col.low_mean.push(s.clip_ratio_low_mean);
    col.high_mean.push(s.clip_ratio_high_mean);
    col.region_mean.push(s.clip_ratio_region_mean);
    col.low_min.push(s.clip_ratio_low_min);
    col.high_max.push(s.clip_ratio_high_max);
}

pub(super) fn push_rloo_stats(col: &mut Collected, s: &RlooLossStats) {
    col.low_mean.push(s.clip_ratio_low_mean);
    col.high_mean.push(s.clip_ratio_high_mean);
    col.region_mean.push(s.clip_ratio_region_mean);
    col.low_min.push(s.clip_ratio_low_min);
    col.high_max.push(s.clip_ratio_high_max);
}

fn mean_f32(x: &[f32]) -> f32 {
    if x.is_empty() {
        0.0
    } else {
        (x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64) as f32
    }
}

impl<M: CausalLm> GroupAgent<M> {
    /// The step's statistics, from every completion of the batch and the micro-batches'
    /// (already reduced) loss statistics.
    pub(super) fn stats(
        &self,
        all: PerCompletion<'_>,
        rewards: RewardStats,
        rloo_kl: Option<f32>,
        col: Collected,
    ) -> Result<GroupStats> {
        let PerCompletion {
            lengths,
            truncated,
            advantages,
            kl,
            entropy: entropy_sum,
        } = all;
        let n = lengths.len();
        check_finite_host("objective/kl_dist", &[n], &kl)?;
        let tokens: usize = lengths.iter().sum();
        let entropy =
            (entropy_sum.iter().map(|&e| f64::from(e)).sum::<f64>() / tokens.max(1) as f64) as f32;
        let lens: Vec<f32> = lengths.iter().map(|&l| l as f32).collect();
        let adv_mean = mean_f32(advantages);
        let adv_var = advantages
            .iter()
            .map(|&a| f64::from(a - adv_mean).powi(2))
            .sum::<f64>()
            / (n.max(2) - 1) as f64;
        let estimator_kl = match &self.algorithm {
            GroupAlgorithm::Grpo(c) => (c.beta != 0.0).then(|| mean_f32(&col.estimator_kl)),
            GroupAlgorithm::Rloo(_) => rloo_kl,
        };
        let nan_min = |v: &[f32]| v.iter().copied().filter(|x| !x.is_nan()).reduce(f32::min);
        let nan_max = |v: &[f32]| v.iter().copied().filter(|x| !x.is_nan()).reduce(f32::max);
        Ok(GroupStats {
            algorithm: self.algorithm.name(),
            rewards,
            objective_kl: mean_f32(&kl),
            objective_kl_dist: kl,
            estimator_kl,
            beta: self.algorithm.beta(),
            entropy,
            loss: mean_f32(&col.loss),
            approxkl: mean_f32(&col.approxkl),
            clip_ratio_low_mean: mean_f32(&col.low_mean),
            clip_ratio_high_mean: mean_f32(&col.high_mean),
            clip_ratio_region_mean: mean_f32(&col.region_mean),
            clip_ratio_low_min: nan_min(&col.low_min).unwrap_or(f32::NAN),
            clip_ratio_high_max: nan_max(&col.high_max).unwrap_or(f32::NAN),
            completion_mean_length: mean_f32(&lens),
            completion_min_length: lens.iter().copied().fold(f32::INFINITY, f32::min),
            completion_max_length: lens.iter().copied().fold(0.0, f32::max),
            truncated_fraction: truncated.iter().filter(|&&t| t).count() as f32 / n.max(1) as f32,
            advantages_mean: adv_mean,
            advantages_std: adv_var.sqrt() as f32,
            optimizer_steps: col.optimizer_steps,
            grad_norm: self
                .algorithm
                .max_grad_norm()
                .map(|_| (col.grad_norm_sum / col.optimizer_steps.max(1) as f64) as f32),
            learning_rate: self.algorithm.learning_rate(),
        })
    }
}
