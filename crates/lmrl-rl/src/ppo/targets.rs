//! What the no-grad pass fixes for the whole step: TRL 0.11 `PPOTrainer.compute_rewards` and
//! `compute_advantages` on the [`Rollout`], kept on the host for the minibatch loop (TRL's
//! `batch_dict`).

use burn::tensor::{Tensor, TensorData};
use lmrl_models::CausalLm;

use crate::error::Result;
use crate::ppo::advantages::{Advantages, compute_advantages_with};
use crate::ppo::agent::PpoAgent;
use crate::ppo::forward::Rollout;
use crate::ppo::parallel::compute_advantages_across_ranks;
use crate::ppo::rewards::{self, ShapedRewards};
use crate::ppo::whiten::masked_whiten;
use crate::util::to_vec;

/// The step's fixed per-token quantities (TRL's `batch_dict` entries), on the host: `[B, T]`
/// row-major, `T` = the batch's longest response.
pub(super) struct Targets {
    pub(super) t_max: usize,
    pub(super) old_logprobs: Vec<f32>,
    pub(super) old_values: Vec<f32>,
    pub(super) advantages: Vec<f32>,
    pub(super) returns: Vec<f32>,
    pub(super) non_score_rewards: Tensor<2>,
}

impl Targets {
    fn new(rollout: &Rollout, adv: Advantages, non_score_rewards: Tensor<2>) -> Result<Self> {
        Ok(Self {
            t_max: rollout.mask.dims()[1],
            old_logprobs: to_vec("logprobs", rollout.logprobs.clone())?,
            old_values: to_vec("values", adv.values.clone())?,
            advantages: to_vec("advantages", adv.advantages.clone())?,
            returns: to_vec("returns", adv.returns.clone())?,
            non_score_rewards,
        })
    }
}

impl<M: CausalLm> PpoAgent<M> {
    /// TRL `compute_rewards` on the rollout: the per-token shaped rewards r_t = −β·KL_t, plus
    /// the score s at the last token ([`rewards::compute_rewards`]).
    pub(super) fn compute_rewards(
        &self,
        rollout: &Rollout,
        scores: &[f32],
        beta: f64,
    ) -> Result<ShapedRewards> {
        let bs = scores.len();
        let score_t =
            Tensor::<1>::from_data(TensorData::new(scores.to_vec(), [bs]), &self.plain_device());
        rewards::compute_rewards(score_t, rollout.kls.clone(), &rollout.mask, beta)
    }

    /// TRL `compute_advantages` on the shaped rewards: GAE, returns and whitened advantages,
    /// whitened over every rank's tokens when data parallel.
    pub(super) fn compute_advantages(
        &self,
        rollout: &Rollout,
        shaped: ShapedRewards,
    ) -> Result<Targets> {
        let adv = if self.parallel() {
            compute_advantages_across_ranks(
                &*self.collective,
                rollout.values.clone(),
                shaped.rewards,
                &rollout.mask,
                &self.config.gae(),
            )?
        } else {
            compute_advantages_with(
                rollout.values.clone(),
                shaped.rewards,
                &rollout.mask,
                &self.config.gae(),
                &masked_whiten,
            )?
        };
        Targets::new(rollout, adv, shaped.non_score_rewards)
    }
}
