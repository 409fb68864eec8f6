//! The data-parallel parts of [`crate::GroupAgent::step`]: how a micro-batch of the shared
//! order, split over the ranks that hold its members, gives the loss and the statistics one
//! process computes on the whole micro-batch.
//!
//! | quantity | single process | rank r of W |
//! |---|---|---|
//! | advantages, reward statistics | over the batch's scores | over the gathered scores |
//! | `"grpo"`, `"dr_grpo"`, RLOO loss (means over sequences) | mean over the micro-batch | own mean × own share of its sequences |
//! | `"bnpo"` loss, `approxkl`, GRPO's token means | token mean | own token mean × own share of its tokens |
//! | `"dapo"` loss | Σ ÷ the batch's active tokens | the same normaliser, from the gathered lengths |
//! | gradients | one backward per micro-batch | summed over ranks before clipping and Adam |
//! | `clip_ratio/low_min`, `high_max` | over the micro-batch's sequences | over the ranks' values |
//!
//! With one rank the gathers return this rank's values and the rest does not run.
use std::ops::Range;

use burn::tensor::{Device, Tensor, TensorData};

use crate::dist::{Collective, all_gather_f32, all_gather_usize};
use crate::error::Result;
use crate::group::algorithm::GroupAlgorithm;
use crate::group::loss::LossNormalisation;
use crate::group::stats::Collected;
use crate::util::to_vec;

/// Every completion's length, truncation and score, in batch order, from each rank's own.
pub(super) fn gather_completions(
    c: &dyn Collective,
    lengths: &[usize],
    truncated: &[bool],
    scores: &[f32],
) -> Result<(Vec<usize>, Vec<bool>, Vec<f32>)> {
    let all_lengths = all_gather_usize(c, lengths)?;
    let flags: Vec<usize> = truncated.iter().map(|&t| usize::from(t)).collect();
    let all_truncated: Vec<bool> = all_gather_usize(c, &flags)?
        .into_iter()
        .map(|t| t == 1)
        .collect();
    let all_scores = all_gather_f32(c, scores)?;
    Ok((all_lengths, all_truncated, all_scores))
}

/// RLOO's sequence KL of every completion of the batch, gathered from each rank's `kl`, and
/// its token mean over the batch's `active_tokens`.
pub(super) fn rloo_kl_across_ranks(
    c: &dyn Collective,
    kl: Tensor<1>,
    active_tokens: usize,
    device: &Device,
) -> Result<(Tensor<1>, f32)> {
    let all = all_gather_f32(c, &to_vec("rloo kl", kl)?)?;
    let mean = all.iter().sum::<f32>() / active_tokens.max(1) as f32;
    let n_all = all.len();
    let all = TensorData::new(all, [n_all]);
    Ok((Tensor::from_data(all, device), mean))
}

/// One micro-batch of the shared order as this rank sees it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MicroShare {
    /// This rank's members, as indices of its own completions, in micro-batch order.
    pub local: Vec<usize>,
    sequences: usize,
    local_sequences: usize,
    tokens: usize,
    local_tokens: usize,
}

impl MicroShare {
    /// The share of micro-batch `mb` (indices of the whole batch) held by the rank owning the
    /// completions `mine`; `active[i]` is the number of loss tokens of completion `i`.
    pub fn new(mb: &[usize], mine: Range<usize>, active: &[usize]) -> Self {
        let local: Vec<usize> = mb
            .iter()
            .filter(|i| mine.contains(i))
            .map(|&i| i - mine.start)
            .collect();
        let local_tokens = local.iter().map(|&i| active[i + mine.start]).sum();
        Self {
            sequences: mb.len(),
            local_sequences: local.len(),
            tokens: mb.iter().map(|&i| active[i]).sum(),
            local_tokens,
            local,
        }
    }

    fn sequence_share(&self) -> f64 {
        self.local_sequences as f64 / self.sequences.max(1) as f64
    }

    fn token_share(&self) -> f64 {
        self.local_tokens as f64 / self.tokens.max(1) as f64
    }

    /// The factor that turns this rank's reduction of its members' loss into its part of the
    /// whole micro-batch's (the parts sum to the single-process loss).
    pub fn loss_scale(&self, algorithm: &GroupAlgorithm, normalisation: LossNormalisation) -> f32 {
        let share = match (algorithm, normalisation) {
            (GroupAlgorithm::Rloo(_), _) => self.sequence_share(),
            (_, LossNormalisation::Sequence | LossNormalisation::DrGrpo { .. }) => {
                self.sequence_share()
            }
            (_, LossNormalisation::Token) => self.token_share(),
            // Already divided by the whole batch's token count.
            (_, LossNormalisation::GlobalToken { .. }) => 1.0,
        };
        share as f32
    }
}

/// Replaces the statistics this rank's part of a micro-batch pushed onto `col` (nothing when it
/// held no member) by the whole micro-batch's, the same on every rank: shares of the loss and
/// of the token (GRPO) or sequence (RLOO) means summed, the per-sequence extremes taken over
/// the ranks. Collective: every rank calls it for every micro-batch.
pub(super) fn combine_micro_stats(
    c: &dyn Collective,
    col: &mut Collected,
    share: &MicroShare,
    algorithm: &GroupAlgorithm,
    normalisation: LossNormalisation,
) -> Result<()> {
    let estimator_kl = matches!(algorithm, GroupAlgorithm::Grpo(g) if g.beta != 0.0);
    let (w_tokens, w_loss) = (
        share.token_share(),
        f64::from(share.loss_scale(algorithm, normalisation)),
    );
    let w_means = match algorithm {
        GroupAlgorithm::Grpo(_) => w_tokens,
        GroupAlgorithm::Rloo(_) => share.sequence_share(),
    };
    let mut sums = [0.0f64; 6];
    let mut extremes = [f32::NAN; 2];
    if !share.local.is_empty() {
        let pop = |v: &mut Vec<f32>| f64::from(v.pop().unwrap_or(f32::NAN));
        sums = [
            pop(&mut col.loss) * w_loss,
            pop(&mut col.approxkl) * w_tokens,
            if estimator_kl {
                pop(&mut col.estimator_kl) * w_tokens
            } else {
                0.0
            },
            pop(&mut col.low_mean) * w_means,
            pop(&mut col.high_mean) * w_means,
            pop(&mut col.region_mean) * w_means,
        ];
        extremes = [pop(&mut col.low_min) as f32, pop(&mut col.high_max) as f32];
    }
    c.all_reduce_f64(&mut sums)?;
    let all = all_gather_f32(c, &extremes)?;
    let pick = |k: usize, f: fn(f32, f32) -> f32| {
        all.iter()
            .skip(k)
            .step_by(2)
            .copied()
            .filter(|x| !x.is_nan())
            .reduce(f)
            .unwrap_or(f32::NAN)
    };
    col.loss.push(sums[0] as f32);
    col.approxkl.push(sums[1] as f32);
    if estimator_kl {
        col.estimator_kl.push(sums[2] as f32);
    }
    col.low_mean.push(sums[3] as f32);
    col.high_mean.push(sums[4] as f32);
    col.region_mean.push(sums[5] as f32);
    col.low_min.push(pick(0, f32::min));
    col.high_max.push(pick(1, f32::max));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A micro-batch {1, 4, 5} of a batch whose completions 3..6 are this rank's: two members
    /// here (local 1 and 2), and the token counts of the whole micro-batch and of this part.
    #[test]
    fn a_share_counts_its_members_sequences_and_tokens() {
        let active = [3, 1, 4, 1, 5, 9];
        let s = MicroShare::new(&[1, 4, 5], 3..6, &active);
        assert_eq!(s.local, vec![1, 2]);
        assert_eq!((s.sequences, s.local_sequences), (3, 2));
        assert_eq!((s.tokens, s.local_tokens), (1 + 5 + 9, 5 + 9));
        let grpo = GroupAlgorithm::Grpo(Default::default());
        let rloo = GroupAlgorithm::Rloo(Default::default());
        let seq = 2.0 / 3.0;
        let tok = 14.0 / 15.0;
        assert_eq!(s.loss_scale(&grpo, LossNormalisation::Sequence), seq);
        assert_eq!(s.loss_scale(&grpo, LossNormalisation::Token), tok);
        let dapo = LossNormalisation::GlobalToken { normalizer: 7.0 };
        assert_eq!(s.loss_scale(&grpo, dapo), 1.0);
        assert_eq!(s.loss_scale(&rloo, LossNormalisation::Token), seq);
    }
}
