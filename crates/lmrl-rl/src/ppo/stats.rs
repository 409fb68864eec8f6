//! The statistics of one PPO step: TRL 0.11 `PPOTrainer.record_step_stats` plus the mean of
//! every `loss` statistic over the step's minibatches (TRL `stack_dicts` + `mean`).

use std::collections::BTreeMap;

use lmrl_models::CausalLm;
use serde::Serialize;

use crate::dist::{all_gather_f32, all_gather_usize};
use crate::error::Result;
use crate::ppo::agent::PpoAgent;
use crate::ppo::forward::Rollout;
use crate::ppo::loss::LossStats;
use crate::ppo::parallel::global_masked_mean;
use crate::ppo::train::{StepBatch, TrainStats};
use crate::util::check_finite_host;

/// What [`crate::ppo::agent::PpoAgent::step`] reports; field docs give TRL's key.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PpoStats {
    /// `objective/kl`: batch mean of Σ_t KL_t·mask (what the KL controller sees).
    pub objective_kl: f32,
    /// `objective/kl_dist`: Σ_t KL_t·mask per sample.
    pub objective_kl_dist: Vec<f32>,
    /// `objective/kl_coef`: β used for this step's rewards (before the controller update).
    pub objective_kl_coef: f64,
    /// `objective/entropy`: batch mean of Σ_t −ℓ_t·mask (sampled-token estimate).
    pub objective_entropy: f32,
    /// `ppo/mean_non_score_reward`: masked mean of −β·KL_t.
    pub mean_non_score_reward: f32,
    /// `ppo/mean_scores`: mean of the scores PPO trained on (after normalisation).
    pub mean_scores: f32,
    /// `ppo/std_scores`: their unbiased std.
    pub std_scores: f32,
    /// Mean of the raw scores, before normalisation (not in TRL; the task reward).
    pub mean_raw_scores: f32,
    /// `tokens/queries_len_mean`.
    pub queries_len_mean: f32,
    /// `tokens/queries_len_std`.
    pub queries_len_std: f32,
    /// `tokens/responses_len_mean`.
    pub responses_len_mean: f32,
    /// `tokens/responses_len_std`.
    pub responses_len_std: f32,
    /// `ppo/*`: the loss statistics averaged over every minibatch of every PPO epoch.
    pub train: LossStats,
    /// `ppo/val/var_explained`: 1 − `val/error` / `returns/var`.
    pub val_var_explained: f32,
    /// `ppo/learning_rate`.
    pub learning_rate: f64,
    /// Minibatches skipped by the ratio threshold.
    pub skipped_minibatches: usize,
    /// Optimizer steps taken.
    pub optimizer_steps: usize,
    /// Global gradient norm before clipping, averaged over optimizer steps (only measured with
    /// `max_grad_norm`).
    pub grad_norm: Option<f32>,
    /// β after the controller update (what the next step will use).
    pub kl_coef_next: f64,
}

impl PpoStats {
    /// The scalar statistics under TRL's logging keys.
    pub fn to_trl_map(&self) -> BTreeMap<String, f64> {
        let t = &self.train;
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: f64| {
            m.insert(k.to_string(), v);
        };
        put("objective/kl", self.objective_kl.into());
        put("objective/kl_coef", self.objective_kl_coef);
        put("objective/entropy", self.objective_entropy.into());
        put(
            "ppo/mean_non_score_reward",
            self.mean_non_score_reward.into(),
        );
        put("ppo/mean_scores", self.mean_scores.into());
        put("ppo/std_scores", self.std_scores.into());
        put("env/raw_score_mean", self.mean_raw_scores.into());
        put("tokens/queries_len_mean", self.queries_len_mean.into());
        put("tokens/queries_len_std", self.queries_len_std.into());
        put("tokens/responses_len_mean", self.responses_len_mean.into());
        put("tokens/responses_len_std", self.responses_len_std.into());
        put("ppo/loss/policy", t.loss_policy.into());
        put("ppo/loss/value", t.loss_value.into());
        put("ppo/loss/total", t.loss_total.into());
        put("ppo/policy/entropy", t.policy_entropy.into());
        put("ppo/policy/approxkl", t.policy_approxkl.into());
        put("ppo/policy/policykl", t.policy_policykl.into());
        put("ppo/policy/clipfrac", t.policy_clipfrac.into());
        put(
            "ppo/policy/advantages_mean",
            t.policy_advantages_mean.into(),
        );
        put("ppo/policy/ratio_mean", t.policy_ratio_mean.into());
        put("ppo/returns/mean", t.returns_mean.into());
        put("ppo/returns/var", t.returns_var.into());
        put("ppo/val/vpred", t.val_vpred.into());
        put("ppo/val/error", t.val_error.into());
        put("ppo/val/clipfrac", t.val_clipfrac.into());
        put("ppo/val/mean", t.val_mean.into());
        put("ppo/val/var", t.val_var.into());
        put("ppo/val/var_explained", self.val_var_explained.into());
        put("ppo/learning_rate", self.learning_rate);
        if let Some(g) = self.grad_norm {
            put("ppo/grad_norm", g.into());
        }
        m
    }
}

/// Accumulates [`LossStats`] over minibatches and returns their mean (TRL `stack_dicts` then
/// `torch.mean(v, axis=0)`).
#[derive(Debug, Default)]
pub struct LossStatsMean {
    sum: [f64; 16],
    n: usize,
}

impl LossStatsMean {
    fn fields(s: &LossStats) -> [f32; 16] {
        [
            s.loss_policy,
            s.loss_value,
            s.loss_total,
            s.policy_entropy,
            s.policy_approxkl,
            s.policy_policykl,
            s.policy_clipfrac,
            s.policy_advantages_mean,
            s.policy_ratio_mean,
            s.returns_mean,
            s.returns_var,
            s.val_vpred,
            s.val_error,
            s.val_clipfrac,
            s.val_mean,
            s.val_var,
        ]
    }

    /// Adds one minibatch.
    pub fn push(&mut self, s: &LossStats) {
        for (acc, v) in self.sum.iter_mut().zip(Self::fields(s)) {
            *acc += f64::from(v);
        }
        self.n += 1;
    }

    /// The mean (zeros when nothing was pushed).
    pub fn mean(&self) -> LossStats {
        let n = self.n.max(1) as f64;
        let m: Vec<f32> = self.sum.iter().map(|s| (s / n) as f32).collect();
        LossStats {
            loss_policy: m[0],
            loss_value: m[1],
            loss_total: m[2],
            policy_entropy: m[3],
            policy_approxkl: m[4],
            policy_policykl: m[5],
            policy_clipfrac: m[6],
            policy_advantages_mean: m[7],
            policy_ratio_mean: m[8],
            returns_mean: m[9],
            returns_var: m[10],
            val_vpred: m[11],
            val_error: m[12],
            val_clipfrac: m[13],
            val_mean: m[14],
            val_var: m[15],
        }
    }
}

/// Mean and unbiased std of a slice (`torch.mean`, `torch.std`); std 0 for fewer than 2 values.
pub fn mean_std(xs: &[f32]) -> (f32, f32) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let std = if xs.len() > 1 {
        (xs.iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0))
            .sqrt()
    } else {
        0.0
    };
    (mean as f32, std as f32)
}

impl<M: CausalLm> PpoAgent<M> {
    /// TRL `record_step_stats`: the KL, entropy and reward statistics of the batch, the token
    /// lengths, and the loss statistics averaged over every minibatch of the step; with
    /// `objective/kl` unrounded, as the KL controller receives it.
    pub(super) fn record_step_stats(
        &self,
        batch: StepBatch<'_>,
        (raw_scores, scores): (&[f32], &[f32]),
        rollout: &Rollout,
        beta: f64,
        train: &TrainStats,
    ) -> Result<(PpoStats, f64)> {
        let StepBatch {
            queries,
            responses,
            targets,
        } = batch;
        // Data parallel: `scores` are the global batch's, the rest this rank's share; every
        // statistic is the global batch's (per-sample values gathered, sums reduced).
        let c = &*self.collective;
        let bs = scores.len();
        let t_max = targets.t_max;
        let kl_dist = all_gather_f32(c, &rollout.kl_per_sample()?)?;
        check_finite_host("objective/kl_dist", &[bs], &kl_dist)?;
        let objective_kl = kl_dist.iter().map(|&x| f64::from(x)).sum::<f64>() / bs as f64;
        let mask_host = rollout.mask.host();
        let entropy_rows = (0..queries.len()).map(|i| {
            (0..t_max)
                .map(|t| {
                    let k = i * t_max + t;
                    -f64::from(targets.old_logprobs[k]) * f64::from(mask_host[k])
                })
                .sum::<f64>()
        });
        let [entropy_sum] = crate::dist::sum_f64(c, [entropy_rows.sum::<f64>()])?;
        let objective_entropy = entropy_sum / bs as f64;
        let mean_nsr = global_masked_mean(
            c,
            "ppo/mean_non_score_reward",
            targets.non_score_rewards.clone(),
            &rollout.mask,
        )?;
        let (mean_scores, std_scores) = mean_std(scores);
        let (mean_raw, _) = mean_std(raw_scores);
        let lens = |xs: &[Vec<u32>]| -> Result<Vec<f32>> {
            let mine: Vec<usize> = xs.iter().map(Vec::len).collect();
            Ok(all_gather_usize(c, &mine)?
                .into_iter()
                .map(|n| n as f32)
                .collect())
        };
        let ql = lens(queries)?;
        let rl = lens(responses)?;
        let (ql_mean, ql_std) = mean_std(&ql);
        let (rl_mean, rl_std) = mean_std(&rl);
        let loss = train.loss.mean();
        let var_explained = 1.0 - loss.val_error / loss.returns_var;
        let opt_steps = train.optimizer_steps;
        let stats = PpoStats {
            objective_kl: objective_kl as f32,
            objective_kl_dist: kl_dist,
            objective_kl_coef: beta,
            objective_entropy: objective_entropy as f32,
            mean_non_score_reward: mean_nsr,
            mean_scores,
            std_scores,
            mean_raw_scores: mean_raw,
            queries_len_mean: ql_mean,
            queries_len_std: ql_std,
            responses_len_mean: rl_mean,
            responses_len_std: rl_std,
            train: loss,
            val_var_explained: var_explained,
            learning_rate: self.config.learning_rate,
            skipped_minibatches: train.skipped,
            optimizer_steps: opt_steps,
            grad_norm: self
                .config
                .max_grad_norm
                .map(|_| (train.grad_norm_sum / opt_steps.max(1) as f64) as f32),
            kl_coef_next: beta,
        };
        Ok((stats, objective_kl))
    }
}
