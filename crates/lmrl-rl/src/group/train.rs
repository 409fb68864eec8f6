//! The optimisation loop of a GRPO or RLOO step: `num_iterations` passes over the shuffled
//! micro-batches, one Adam step per `gradient_accumulation_steps` of them, and per micro-batch
//! the training forward and TRL 1.16's `_compute_loss` (GRPO's clipped per-token objective
//! with the k3 KL, or RLOO's clipped per-sequence one).

use std::ops::Range;

use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use lmrl_models::{CausalLm, QueryResponseBatch};

use crate::dist::all_reduce_grads;
use crate::error::Result;
use crate::group::agent::GroupAgent;
use crate::group::algorithm::GroupAlgorithm;
use crate::group::forward::{
    Prepass, gather, kl_and_entropy, log_softmaxes, response_logits, row_sums, select_rows,
};
use crate::group::loss::{
    GrpoLossInputs, GrpoLossParams, LossNormalisation, grpo_loss, rloo_loss, sequence_logps,
};
use crate::group::parallel::{MicroShare, combine_micro_stats};
use crate::group::stats::{Collected, push_grpo_stats, push_rloo_stats};
use crate::ppo::ResponseMask;
use crate::ppo::clip_grad_norm;
use crate::util::{to_scalar, to_vec};

/// What every micro-batch of a step reads.
pub(super) struct StepInputs<'a, M> {
    pub(super) queries: &'a [Vec<u32>],
    pub(super) responses: &'a [Vec<u32>],
    pub(super) loss_rows: &'a [Vec<f32>],
    /// This rank's completions' advantages.
    pub(super) advantages: &'a [f32],
    pub(super) prepass: Option<&'a Prepass>,
    pub(super) reference: &'a M,
    pub(super) normalisation: LossNormalisation,
    /// This rank's completions are the batch's `mine`.
    pub(super) mine: Range<usize>,
    /// The tokens each completion of the batch puts in the loss.
    pub(super) active: &'a [usize],
}

/// The per-token log-probabilities one micro-batch's loss compares, `[b, t]`, and its
/// advantages `[b]`.
struct MicroLogps {
    /// ℓ of the training forward (carries gradients).
    logps: Tensor<2>,
    /// ℓ^old from the pre-pass; `None` on-policy (then ℓ detached).
    old: Option<Tensor<2>>,
    /// ℓ^ref.
    reference: Option<Tensor<2>>,
    advantages: Tensor<1>,
}

fn host(v: Vec<f32>, dims: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, dims), device)
}

impl<M: CausalLm> GroupAgent<M> {
    /// `num_iterations` passes over the micro-batches `micro` (indices of the whole batch), one
    /// Adam step per `gradient_accumulation_steps` of them.
    pub(super) fn optimise(
        &mut self,
        ctx: &StepInputs<'_, M>,
        micro: &[&[usize]],
        col: &mut Collected,
    ) -> Result<()> {
        let sizes = self.algorithm.sizes();
        for pass in 0..sizes.num_iterations {
            for group in micro.chunks(sizes.gradient_accumulation_steps) {
                let mut accum = GradientsAccumulator::<M>::new();
                for mb in group {
                    if self.collective.world() == 1 {
                        let grads = self.train_micro(ctx, mb, pass, col, None)?;
                        accum.accumulate(&self.model, grads);
                    } else {
                        self.train_micro_share(ctx, mb, pass, col, &mut accum)?;
                    }
                }
                self.adam_step(accum, col)?;
            }
        }
        Ok(())
    }

    /// Data parallel: this rank's part of the micro-batch `mb` (indices of the whole batch),
    /// its loss scaled by its share, then the whole micro-batch's statistics. Every rank calls
    /// it for every micro-batch, holding members or not.
    fn train_micro_share(
        &self,
        ctx: &StepInputs<'_, M>,
        mb: &[usize],
        pass: usize,
        col: &mut Collected,
        accum: &mut GradientsAccumulator<M>,
    ) -> Result<()> {
        let share = MicroShare::new(mb, ctx.mine.clone(), ctx.active);
        if !share.local.is_empty() {
            let scale = share.loss_scale(&self.algorithm, ctx.normalisation);
            let grads = self.train_micro(ctx, &share.local, pass, col, Some(scale))?;
            accum.accumulate(&self.model, grads);
        }
        combine_micro_stats(
            &*self.collective,
            col,
            &share,
            &self.algorithm,
            ctx.normalisation,
        )
    }

    /// One Adam step on the accumulated gradients, summed over the ranks first, with the
    /// optional global-norm clipping.
    fn adam_step(&mut self, mut accum: GradientsAccumulator<M>, col: &mut Collected) -> Result<()> {
        let mut grads = all_reduce_grads(&*self.collective, &self.model, accum.grads())?;
        if let Some(max) = self.algorithm.max_grad_norm() {
            col.grad_norm_sum += f64::from(clip_grad_norm(&self.model, &mut grads, max)?);
        }
        let lr = self.algorithm.learning_rate();
        self.model = self.optimizer.step(lr, self.model.clone(), grads);
        col.optimizer_steps += 1;
        Ok(())
    }

    /// One micro-batch: the reference's no-grad forward (on-policy), the training forward at
    /// the sampling temperature, the GRPO or RLOO loss, its gradients ÷ the accumulation steps
    /// where TRL divides (`grpo`/`bnpo`/`dr_grpo`/RLOO; `dapo` has them in its normaliser).
    /// `mb` indexes this rank's completions; with several ranks the loss is multiplied by
    /// `scale`, the rank's share of the whole micro-batch's reduction.
    fn train_micro(
        &self,
        ctx: &StepInputs<'_, M>,
        mb: &[usize],
        pass: usize,
        col: &mut Collected,
        scale: Option<f32>,
    ) -> Result<GradientsParams> {
        let temp = self.algorithm.temperature();
        let q: Vec<Vec<u32>> = mb.iter().map(|&i| ctx.queries[i].clone()).collect();
        let y: Vec<Vec<u32>> = mb.iter().map(|&i| ctx.responses[i].clone()).collect();
        let batch = QueryResponseBatch::new(&q, &y, self.pad_id, &self.device)?;
        let (b, t) = (mb.len(), batch.max_response_len());
        let rows: Vec<Vec<f32>> = mb.iter().map(|&i| ctx.loss_rows[i][..t].to_vec()).collect();
        let mask = ResponseMask::from_host(rows.concat(), b, t, &self.device)?;
        let mask_t = mask.tensor();
        let advantages = Tensor::<1>::from_data(
            TensorData::new(mb.iter().map(|&i| ctx.advantages[i]).collect(), [b]),
            &self.device,
        );

        // Training forward.
        let (logits, ids) = response_logits(&self.model, &batch, &self.device);
        let (ls1, lst) = log_softmaxes(logits, temp);
        let logps = gather(lst, ids.clone(), &mask_t);

        // Old and reference log-probs.
        let (old, reference) = match ctx.prepass {
            Some(p) => (
                Some(host(
                    select_rows(&p.old_logps, p.t_max, mb, t),
                    [b, t],
                    &self.device,
                )),
                Some(host(
                    select_rows(&p.ref_logps, p.t_max, mb, t),
                    [b, t],
                    &self.device,
                )),
            ),
            None => (
                None,
                Some(self.on_policy_reference(ctx, mb, (&q, &y), &ls1, pass, col)?),
            ),
        };
        drop(ls1);
        push_approxkl(col, &logps, old.as_ref(), &mask)?;
        let inputs = MicroLogps {
            logps,
            old,
            reference,
            advantages,
        };
        let loss = self.compute_loss(ctx, inputs, &mask, col, scale)?;
        Ok(GradientsParams::from_grads(loss.backward(), &self.model))
    }

    /// On-policy, with no pre-pass: the reference's forward of the micro-batch's completions
    /// `(q, y)` now, and, in the first pass, the KL and entropy of the policy before its update
    /// from this (detached) training forward `ls1` (log-softmax at temperature 1).
    fn on_policy_reference(
        &self,
        ctx: &StepInputs<'_, M>,
        mb: &[usize],
        (q, y): (&[Vec<u32>], &[Vec<u32>]),
        ls1: &Tensor<2>,
        pass: usize,
        col: &mut Collected,
    ) -> Result<Tensor<2>> {
        let plain = self.plain_device();
        let pbatch = QueryResponseBatch::new(q, y, self.pad_id, &plain)?;
        let (b, t) = (mb.len(), pbatch.max_response_len());
        let reference = ctx.reference.valid();
        let (rlogits, rids) = response_logits(&reference, &pbatch, &plain);
        let (rls1, rlst) = log_softmaxes(rlogits, self.algorithm.temperature());
        let pmask = pbatch.response_mask(&plain);
        let refp = to_vec("ref_per_token_logps", gather(rlst, rids, &pmask))?;
        if pass == 0 {
            let ls1_plain = ls1.clone().detach().to_device(&plain);
            let (kl, ent) = kl_and_entropy(ls1_plain, rls1, b, t);
            let kl = row_sums("objective/kl_dist", kl, &pmask)?;
            let ent = row_sums("entropy", ent, &pmask)?;
            for (k, &i) in mb.iter().enumerate() {
                col.kl[i] = Some(kl[k]);
                col.entropy[i] = Some(ent[k]);
            }
        }
        Ok(host(refp, [b, t], &self.device))
    }

    /// TRL `_compute_loss` of one micro-batch, its statistics recorded, scaled by the rank's
    /// `scale` and divided by the accumulation steps as TRL divides it.
    fn compute_loss(
        &self,
        ctx: &StepInputs<'_, M>,
        x: MicroLogps,
        mask: &ResponseMask,
        col: &mut Collected,
        scale: Option<f32>,
    ) -> Result<Tensor<1>> {
        let gas = self.algorithm.sizes().gradient_accumulation_steps as f32;
        Ok(match &self.algorithm {
            GroupAlgorithm::Grpo(c) => {
                let out = grpo_loss(
                    GrpoLossInputs {
                        logps: x.logps,
                        old_logps: x.old,
                        ref_logps: (c.beta != 0.0).then_some(x.reference).flatten(),
                        advantages: x.advantages,
                    },
                    mask,
                    &GrpoLossParams {
                        normalisation: ctx.normalisation,
                        ..c.loss_params(1)
                    },
                )?;
                push_grpo_stats(col, &out.stats);
                col.loss.push(to_scalar("loss", out.loss.clone().detach())?);
                let loss = match scale {
                    Some(s) => out.loss.mul_scalar(s),
                    None => out.loss,
                };
                match ctx.normalisation {
                    LossNormalisation::GlobalToken { .. } => loss,
                    _ => loss.div_scalar(gas),
                }
            }
            GroupAlgorithm::Rloo(c) => {
                let old_seq = match x.old {
                    Some(o) => sequence_logps(o, mask)?,
                    None => sequence_logps(x.logps.clone().detach(), mask)?,
                };
                let out = rloo_loss(x.logps, old_seq, x.advantages, mask, &c.loss_params())?;
                push_rloo_stats(col, &out.stats);
                col.loss.push(to_scalar("loss", out.loss.clone().detach())?);
                match scale {
                    Some(s) => out.loss.mul_scalar(s).div_scalar(gas),
                    None => out.loss.div_scalar(gas),
                }
            }
        })
    }
}

/// ½·token mean of (ℓ − ℓ^old)² of the micro-batch (0 when old = ℓ.detach()).
fn push_approxkl(
    col: &mut Collected,
    logps: &Tensor<2>,
    old: Option<&Tensor<2>>,
    mask: &ResponseMask,
) -> Result<()> {
    let approxkl = match old {
        Some(o) => {
            let d = (logps.clone().detach() - o.clone()) * mask.tensor();
            let tokens = mask.total().max(1) as f32;
            0.5 * to_scalar("approxkl", d.square().sum())? / tokens
        }
        None => 0.0,
    };
    col.approxkl.push(approxkl);
    Ok(())
}
