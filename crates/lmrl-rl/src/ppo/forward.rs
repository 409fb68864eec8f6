//! TRL 0.11 `PPOTrainer.batched_forward_pass`: the no-grad forward of policy and reference
//! over the step's samples in chunks of `forward_batch_size`, giving ℓ, ℓ^ref, V and the
//! per-token KL penalty ([`Rollout`]); and the training forward of one minibatch.

use burn::tensor::{Int, Tensor, TensorData};
use lmrl_models::{
    CausalLm, QueryResponseBatch, Scored, response_hidden_and_values, response_token_logprobs,
    score, score_reference,
};

use crate::error::Result;
use crate::ppo::agent::PpoAgent;
use crate::ppo::kl::{TokenLogProbs, kl_penalty};
use crate::ppo::mask::ResponseMask;
use crate::util::to_vec;

/// The no-grad pass over a batch: TRL `batched_forward_pass` of policy and reference plus the
/// per-token KL, padded to the batch's longest response `T`.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// `[B, T]` ℓ_t of the policy.
    pub logprobs: Tensor<2>,
    /// `[B, T]` ℓ^ref_t.
    pub ref_logprobs: Tensor<2>,
    /// `[B, T]` V_t.
    pub values: Tensor<2>,
    /// `[B, T]` KL_t (estimator `kl_penalty`), not masked.
    pub kls: Tensor<2>,
    /// `[B, T]` response mask.
    pub mask: ResponseMask,
}

impl Rollout {
    /// Σ_t KL_t·mask per sample (TRL `objective/kl_dist`).
    pub fn kl_per_sample(&self) -> Result<Vec<f32>> {
        let s = (self.kls.clone() * self.mask.tensor()).sum_dim(1);
        to_vec("objective/kl_dist", s)
    }
}

/// Pads `[b, t]` to `[b, t_max]` with zeros on the right.
pub(super) fn pad_cols(x: Tensor<2>, t_max: usize) -> Tensor<2> {
    let [b, t] = x.dims();
    if t == t_max {
        return x;
    }
    let z = Tensor::<2>::zeros([b, t_max - t], &x.device());
    Tensor::cat(vec![x, z], 1)
}

impl<M: CausalLm> PpoAgent<M> {
    /// TRL `batched_forward_pass` of policy and reference (no grad, chunks of
    /// `forward_batch_size`) and the per-token KL penalty.
    pub fn rollout(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Rollout> {
        Ok(self
            .batched_forward_pass(queries, responses, reference, &[])?
            .0)
    }

    /// [`PpoAgent::rollout`], with the samples `keep` (if any) scored by the training forward
    /// itself, whose graph is returned for their minibatch's loss: in the first minibatch of a
    /// step the weights are still those of the rollout, so TRL's second forward of those
    /// samples would compute the same numbers again. The other samples go through in forward
    /// batches, in order. A sample's scores do not depend on the batch it is scored in, up to
    /// float rounding (padding is left out of the forward and masked in attention).
    pub(super) fn batched_forward_pass(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
        keep: &[usize],
    ) -> Result<(Rollout, Option<MinibatchForward>)> {
        crate::util::check_pairs(queries, responses, "rollout")?;
        crate::util::check_fits(&self.model.lm, queries, responses, self.pad_id)?;
        crate::util::check_fits(reference, queries, responses, self.pad_id)?;
        let device = self.plain_device();
        let t_max = responses.iter().map(Vec::len).max().unwrap_or(0);
        let fbs = self.config.forward_batch_size();
        let rest: Vec<usize> = (0..queries.len()).filter(|i| !keep.contains(i)).collect();
        let mut parts = Vec::new();
        let mut kept = None;
        if !keep.is_empty() {
            let fwd = self.forward_minibatch(queries, responses, keep)?;
            let policy = Scored {
                logprobs: fwd.logprobs.clone().inner(),
                log_softmax: fwd.log_softmax.clone().inner(),
                values: fwd.vpreds.clone().inner(),
                mask: fwd.batch.response_mask(&device),
            };
            parts.push(self.rollout_part(policy, &fwd.batch, reference, t_max)?);
            kept = Some(fwd);
        }
        for chunk in rest.chunks(fbs) {
            let pick =
                |v: &[Vec<u32>]| -> Vec<Vec<u32>> { chunk.iter().map(|&i| v[i].clone()).collect() };
            let batch =
                QueryResponseBatch::new(&pick(queries), &pick(responses), self.pad_id, &device)?;
            let policy = score(&self.model, &batch);
            parts.push(self.rollout_part(policy, &batch, reference, t_max)?);
        }
        // Back to sample order when the kept samples went first: row `p` of the parts is
        // sample `order[p]`.
        let reorder = (!keep.is_empty()).then(|| {
            let order: Vec<usize> = keep.iter().chain(&rest).copied().collect();
            let mut at = vec![0i64; order.len()];
            for (p, &i) in order.iter().enumerate() {
                at[i] = p as i64;
            }
            Tensor::<1, Int>::from_data(TensorData::new(at, [order.len()]), &device)
        });
        let cat = |f: fn(&RolloutPart) -> Tensor<2>| -> Tensor<2> {
            let rows = Tensor::cat(parts.iter().map(f).collect(), 0);
            match &reorder {
                Some(at) => rows.select(0, at.clone()),
                None => rows,
            }
        };
        let lengths: Vec<usize> = responses.iter().map(Vec::len).collect();
        let rollout = Rollout {
            logprobs: cat(|p| p.logprobs.clone()),
            ref_logprobs: cat(|p| p.ref_logprobs.clone()),
            values: cat(|p| p.values.clone()),
            kls: cat(|p| p.kls.clone()),
            mask: ResponseMask::from_lengths(&lengths, t_max, &device)?,
        };
        crate::util::check_finite("logprobs", &rollout.logprobs)?;
        crate::util::check_finite("ref_logprobs", &rollout.ref_logprobs)?;
        Ok((rollout, kept))
    }

    /// One forward batch of the rollout: the policy's scores, the reference's on the same
    /// batch, the KL penalty per token, each padded to `t_max` columns.
    fn rollout_part(
        &self,
        policy: Scored,
        batch: &QueryResponseBatch,
        reference: &M,
        t_max: usize,
    ) -> Result<RolloutPart> {
        let needs_full = self.config.kl_penalty.needs_full_distribution();
        let r = score_reference(reference, batch);
        let p = TokenLogProbs {
            gathered: policy.logprobs,
            full: needs_full.then_some(policy.log_softmax),
        };
        let refp = TokenLogProbs {
            gathered: r.logprobs,
            full: needs_full.then_some(r.log_softmax),
        };
        let kl = kl_penalty(self.config.kl_penalty, &p, &refp)?;
        Ok(RolloutPart {
            logprobs: pad_cols(p.gathered, t_max),
            ref_logprobs: pad_cols(refp.gathered, t_max),
            values: pad_cols(policy.values, t_max),
            kls: pad_cols(kl, t_max),
        })
    }

    /// Σ_t KL_t of each response under this policy vs `reference` on the given contexts (no
    /// grad): the KL metric of a batch the agent did not train on.
    pub fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Vec<f32>> {
        self.rollout(queries, responses, reference)?.kl_per_sample()
    }

    /// The training forward of the samples `mb` (dropout off, with gradients): their `[q; y]`
    /// batch through the policy, log-probabilities and values read at the response tokens.
    pub(super) fn forward_minibatch(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        mb: &[usize],
    ) -> Result<MinibatchForward> {
        let q: Vec<Vec<u32>> = mb.iter().map(|&i| queries[i].clone()).collect();
        let y: Vec<Vec<u32>> = mb.iter().map(|&i| responses[i].clone()).collect();
        let batch = QueryResponseBatch::new(&q, &y, self.pad_id, &self.device)?;
        let (hidden, vpreds) = response_hidden_and_values(&self.model, &batch, &self.device);
        let (logprobs, log_softmax) = response_token_logprobs(&self.model.lm, hidden, &batch);
        Ok(MinibatchForward {
            samples: mb.to_vec(),
            batch,
            logprobs,
            log_softmax,
            vpreds,
        })
    }
}

/// One forward batch of the rollout, each `[b, T]` padded to the batch's longest response.
struct RolloutPart {
    logprobs: Tensor<2>,
    ref_logprobs: Tensor<2>,
    values: Tensor<2>,
    kls: Tensor<2>,
}

/// The training forward of one minibatch, on the autodiff device.
pub(super) struct MinibatchForward {
    /// The step's sample indices it holds, in batch order.
    pub(super) samples: Vec<usize>,
    pub(super) batch: QueryResponseBatch,
    /// `[b, t]` log π of the response tokens.
    pub(super) logprobs: Tensor<2>,
    /// `[b, t, V]` log-softmax at the response positions.
    pub(super) log_softmax: Tensor<3>,
    /// `[b, t]` value predictions.
    pub(super) vpreds: Tensor<2>,
}
