//! The minibatch epochs of TRL 0.11 `PPOTrainer.step`: `ppo_epochs` passes over a seeded
//! permutation of the batch, one Adam step per backward batch, and TRL's `train_minibatch`
//! (training forward, `loss`, backward) per minibatch; plus [`PpoAgent::evaluate_loss`], the
//! same loss measured without an update.

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use lmrl_models::{
    CausalLm, LmWithValueHead, QueryResponseBatch, response_hidden_and_values,
    response_token_logprobs,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::dist::all_reduce_grads;
use crate::error::Result;
use crate::ppo::advantages::compute_advantages_with;
use crate::ppo::agent::PpoAgent;
use crate::ppo::forward::{MinibatchForward, Rollout};
use crate::ppo::grad::clip_grad_norm;
use crate::ppo::loss::{LossInputs, LossStats, ppo_loss};
use crate::ppo::mask::ResponseMask;
use crate::ppo::parallel::reduce_minibatch;
use crate::ppo::rewards::compute_rewards;
use crate::ppo::stats::LossStatsMean;
use crate::ppo::targets::Targets;
use crate::ppo::whiten::masked_whiten;
use crate::util::mix_seed;

/// The minibatch order of a step: a permutation of the batch drawn from a generator derived
/// from `(seed, steps since seeding)`, so that a restored agent draws the same permutations.
pub(super) struct MinibatchOrder {
    pub(super) inds: Vec<usize>,
    rng: StdRng,
}

impl MinibatchOrder {
    pub(super) fn new(seed: u64, rng_steps: usize, batch_size: usize) -> Self {
        let mut inds: Vec<usize> = (0..batch_size).collect();
        let mut rng = StdRng::seed_from_u64(mix_seed(&[seed, rng_steps as u64]));
        inds.shuffle(&mut rng);
        Self { inds, rng }
    }

    /// The permutation of the next epoch.
    fn reshuffle(&mut self) {
        self.inds.shuffle(&mut self.rng);
    }
}

/// The step's samples and what their losses need.
#[derive(Clone, Copy)]
pub(super) struct StepBatch<'a> {
    pub(super) queries: &'a [Vec<u32>],
    pub(super) responses: &'a [Vec<u32>],
    pub(super) targets: &'a Targets,
}

/// What the minibatch loop of one step accumulates for `record_step_stats`.
#[derive(Default)]
pub(super) struct TrainStats {
    pub(super) loss: LossStatsMean,
    pub(super) skipped: usize,
    pub(super) optimizer_steps: usize,
    pub(super) grad_norm_sum: f64,
}

fn host_tensor(v: Vec<f32>, dims: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, dims), device)
}

/// Rows `idx` of a row-major `[B, T]` host matrix, cut to the first `t_new` columns.
fn select_rows(host: &[f32], t: usize, idx: &[usize], t_new: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(idx.len() * t_new);
    for &i in idx {
        out.extend_from_slice(&host[i * t..i * t + t_new]);
    }
    out
}

impl<M: CausalLm> PpoAgent<M> {
    /// `ppo_epochs` passes over the batch in the order `order` (reshuffled after the first),
    /// one [`PpoAgent::train_backward_batch`] per `backward_batch_size` samples; without
    /// `update` one pass that only measures. `kept` is the first minibatch's training forward,
    /// if the rollout ran it.
    pub(super) fn train_epochs(
        &mut self,
        batch: StepBatch<'_>,
        order: &mut MinibatchOrder,
        mut kept: Option<MinibatchForward>,
        update: bool,
    ) -> Result<TrainStats> {
        let mut train = TrainStats::default();
        for epoch in 0..self.config.ppo_epochs {
            if epoch > 0 {
                order.reshuffle();
            }
            for bb in order.inds.chunks(self.config.backward_batch_size()) {
                self.train_backward_batch(batch, bb, &mut kept, &mut train, update)?;
            }
            if !update {
                break;
            }
        }
        Ok(train)
    }

    /// One optimizer step on the samples `bb`: [`PpoAgent::train_minibatch`] on each minibatch
    /// of `mini_batch_size`, gradients summed (accelerate's accumulation), optional global-norm
    /// clipping, one Adam step. Data parallel, `bb` are global sample indices: each rank trains
    /// on its own samples of every minibatch and the gradients are summed over the ranks before
    /// the clipping. Without `update` the minibatches are only measured (their forward and
    /// statistics, no backward).
    /// `kept` is the training forward the rollout kept, taken by the minibatch it belongs to.
    fn train_backward_batch(
        &mut self,
        batch: StepBatch<'_>,
        bb: &[usize],
        kept: &mut Option<MinibatchForward>,
        train: &mut TrainStats,
        update: bool,
    ) -> Result<()> {
        let mut accum = GradientsAccumulator::<LmWithValueHead<M>>::new();
        if self.parallel() {
            // Every rank goes through the same minibatches, holding some of their samples (or
            // none) each time.
            let local = self.local_range();
            for mb in bb.chunks(self.config.mini_batch_size) {
                let mine: Vec<usize> = mb
                    .iter()
                    .filter(|i| local.contains(i))
                    .map(|i| i - local.start)
                    .collect();
                let loss = self.train_minibatch_shard(batch, &mine, train)?;
                if let Some(loss) = loss.filter(|_| update) {
                    accum.accumulate(&self.model, self.gradients(loss));
                }
            }
        } else {
            for mb in bb.chunks(self.config.mini_batch_size) {
                let reuse = kept.take_if(|f| f.samples == mb);
                let loss = self.train_minibatch(batch, mb, train, reuse)?;
                if update {
                    accum.accumulate(&self.model, self.gradients(loss));
                }
            }
        }
        if !update {
            return Ok(());
        }
        let mut grads = all_reduce_grads(&*self.collective, &self.model, accum.grads())?;
        if let Some(max_norm) = self.config.max_grad_norm {
            train.grad_norm_sum += f64::from(clip_grad_norm(&self.model, &mut grads, max_norm)?);
        }
        let lr = self.config.learning_rate;
        self.model = self.optimizer.step(lr, self.model.clone(), grads);
        train.optimizer_steps += 1;
        Ok(())
    }

    /// The gradients of a minibatch's loss (accelerate's `backward`).
    fn gradients(&self, loss: Tensor<1>) -> GradientsParams {
        GradientsParams::from_grads(loss.backward(), &self.model)
    }

    /// TRL `train_minibatch` up to the backward: the training forward of the samples `mb`
    /// (dropout off, logits only at the response tokens; `kept` when the rollout already ran
    /// it), TRL's `loss` with its statistics recorded, returned ÷ `gradient_accumulation_steps`
    /// (what accelerate's `backward` sees).
    fn train_minibatch(
        &self,
        batch: StepBatch<'_>,
        mb: &[usize],
        train: &mut TrainStats,
        kept: Option<MinibatchForward>,
    ) -> Result<Tensor<1>> {
        let targets = batch.targets;
        let fwd = match kept {
            Some(f) => f,
            None => self.forward_minibatch(batch.queries, batch.responses, mb)?,
        };
        let t_mb = fwd.batch.max_response_len();
        let mask = ResponseMask::from_lengths(&fwd.batch.response_lens, t_mb, &self.device)?;
        let sel = |h: &[f32]| {
            host_tensor(
                select_rows(h, targets.t_max, mb, t_mb),
                [mb.len(), t_mb],
                &self.device,
            )
        };
        let mut params = self.config.loss_params();
        if self.parallel() {
            // Decided on the ratio mean of the whole minibatch, over every rank (below).
            params.ratio_threshold = f64::INFINITY;
        }
        let out = ppo_loss(
            LossInputs {
                old_logprobs: sel(&targets.old_logprobs),
                values: sel(&targets.old_values),
                logits: fwd.log_softmax,
                vpreds: fwd.vpreds,
                logprobs: fwd.logprobs,
                advantages: sel(&targets.advantages),
                returns: sel(&targets.returns),
            },
            &mask,
            &params,
        )?;
        let out = if self.parallel() {
            let c = &*self.collective;
            let local = Some((out, mask.total()));
            reduce_minibatch(c, &self.config.loss_params(), local, &self.plain_device())?.0
        } else {
            out
        };
        if out.skipped {
            train.skipped += 1;
        }
        train.loss.push(&out.stats);
        let gas = self.config.gradient_accumulation_steps;
        Ok(if gas > 1 {
            out.loss.div_scalar(gas as f32)
        } else {
            out.loss
        })
    }

    /// Data parallel [`PpoAgent::train_minibatch`] on this rank's samples `mb` (local indices)
    /// of a global minibatch: a rank holding none of its samples still takes part in the
    /// minibatch's reduction, and contributes no loss.
    fn train_minibatch_shard(
        &self,
        batch: StepBatch<'_>,
        mb: &[usize],
        train: &mut TrainStats,
    ) -> Result<Option<Tensor<1>>> {
        if mb.is_empty() {
            let c = &*self.collective;
            let p = self.config.loss_params();
            let (_, stats, skipped) = reduce_minibatch(c, &p, None, &self.plain_device())?;
            if skipped {
                train.skipped += 1;
            }
            train.loss.push(&stats);
            return Ok(None);
        }
        Ok(Some(self.train_minibatch(batch, mb, train, None)?))
    }

    /// The PPO loss statistics of the **current** policy on a whole batch against a fixed
    /// rollout `old` (or a fresh one): rewards with `beta` from `scores` (used as given, no
    /// normalisation), GAE, then [`ppo_loss`] with the current log-probs and values, no update.
    /// Evaluating before and after [`PpoAgent::step`] with the same `old` shows whether the
    /// step lowered the objective it optimised.
    pub fn evaluate_loss(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
        beta: f64,
        old: Option<&Rollout>,
    ) -> Result<LossStats> {
        let rollout = match old {
            Some(r) => r.clone(),
            None => self.rollout(queries, responses, reference)?,
        };
        let plain = self.plain_device();
        let bs = queries.len();
        let score_t = Tensor::<1>::from_data(TensorData::new(scores.to_vec(), [bs]), &plain);
        let shaped = compute_rewards(score_t, rollout.kls.clone(), &rollout.mask, beta)?;
        let adv = compute_advantages_with(
            rollout.values.clone(),
            shaped.rewards,
            &rollout.mask,
            &self.config.gae(),
            &masked_whiten,
        )?;
        let batch = QueryResponseBatch::new(queries, responses, self.pad_id, &plain)?;
        let model = self.model.valid();
        let (hidden, vpreds) = response_hidden_and_values(&model, &batch, &plain);
        let (logprobs, log_softmax) = response_token_logprobs(&model.lm, hidden, &batch);
        let out = ppo_loss(
            LossInputs {
                old_logprobs: rollout.logprobs,
                values: adv.values,
                logits: log_softmax,
                vpreds,
                logprobs,
                advantages: adv.advantages,
                returns: adv.returns,
            },
            &rollout.mask,
            &self.config.loss_params(),
        )?;
        Ok(out.stats)
    }
}
