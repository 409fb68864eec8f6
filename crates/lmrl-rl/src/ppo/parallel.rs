//! The data-parallel parts of [`crate::PpoAgent::step`]: what a rank holding only its share of
//! the global batch reduces so that its step equals a single process's step on the whole batch.
//!
//! | quantity | single process | rank r of W |
//! |---|---|---|
//! | score normalisation | running moments over the batch | over the gathered global scores |
//! | advantage (and reward) whitening | `masked_whiten` over every token | Σx, Σ(x−μ)², count reduced |
//! | minibatch loss | token mean over the minibatch | own token sum ÷ the minibatch's global token count |
//! | ratio threshold | token-mean ratio of the minibatch | the global one (reduced before the backward) |
//! | gradients | one backward | summed over ranks before clipping and Adam |
//! | logged statistics | batch means | reduced sums, gathered per-sample values |
//!
//! With one rank none of this runs: the single-process step calls the plain functions
//! (`masked_whiten`, the minibatch's own loss) where a rank calls these.
use burn::tensor::{Device, Tensor};

use crate::dist::{Collective, all_gather_usize};
use crate::error::Result;
use crate::ppo::advantages::{Advantages, Gae, compute_advantages_with};
use crate::ppo::forward::pad_cols;
use crate::ppo::loss::{LossParams, LossStats, PpoLoss};
use crate::ppo::mask::ResponseMask;
use crate::ppo::whiten::{WHITEN_EPS, masked_mean};
use crate::util::{to_scalar, to_vec};

fn host_sum(what: &str, t: Tensor<2>) -> Result<f64> {
    Ok(to_vec(what, t)?.iter().map(|&x| f64::from(x)).sum())
}

/// TRL `masked_whiten(values, mask, shift_mean)` with the mean and the unbiased variance taken
/// over the unmasked tokens of **every** rank: two reductions, (Σx, n) then Σ(x − μ)².
pub fn global_masked_whiten(
    c: &dyn Collective,
    what: &str,
    values: Tensor<2>,
    mask: &ResponseMask,
    shift_mean: bool,
) -> Result<Tensor<2>> {
    let m = mask.tensor();
    let local = [
        host_sum(what, values.clone() * m.clone())?,
        mask.total() as f64,
    ];
    let [sum, n] = crate::dist::sum_f64(c, local)?;
    if n < 2.0 {
        return Err(crate::RlError::TooFewTokens {
            what: what.to_string(),
            needed: 2,
            found: n as usize,
        });
    }
    let mean = sum / n;
    let centered = values.clone().sub_scalar(mean as f32);
    let [ss] = crate::dist::sum_f64(c, [host_sum(what, centered.clone().square() * m)?])?;
    let var = ss / (n - 1.0);
    let inv_std = 1.0 / (var as f32 + WHITEN_EPS).sqrt();
    let whitened = centered.mul_scalar(inv_std);
    Ok(if shift_mean {
        whitened
    } else {
        whitened.add_scalar(mean as f32)
    })
}

/// TRL `masked_mean` over every rank's tokens, read back as a scalar.
pub fn global_masked_mean(
    c: &dyn Collective,
    what: &str,
    values: Tensor<2>,
    mask: &ResponseMask,
) -> Result<f32> {
    if c.world() == 1 {
        return to_scalar(what, masked_mean(what, values, mask)?);
    }
    let local = [host_sum(what, values * mask.tensor())?, mask.total() as f64];
    let [sum, n] = crate::dist::sum_f64(c, local)?;
    Ok((sum / n.max(1.0)) as f32)
}

/// Number of values reduced per minibatch by [`combine_loss_stats`].
const N_STATS: usize = 17;

/// The statistics of a minibatch split over ranks, from each rank's own `(stats, tokens)` (its
/// token means, `None` when it holds no sample of the minibatch): every mean weighted by the
/// ranks' token counts, the two unbiased variances from Σx and Σx². Returns the minibatch's
/// statistics as one process would log them (before the ratio-threshold zeroing) and its
/// global token count.
pub fn combine_loss_stats(
    c: &dyn Collective,
    local: Option<(&LossStats, usize)>,
) -> Result<(LossStats, usize)> {
    let mut v = [0.0f64; N_STATS];
    if let Some((s, n)) = local {
        let n = n as f64;
        let means = [
            s.loss_policy,
            s.loss_value,
            s.policy_entropy,
            s.policy_approxkl,
            s.policy_policykl,
            s.policy_clipfrac,
            s.policy_advantages_mean,
            s.policy_ratio_mean,
            s.returns_mean,
            s.val_vpred,
            s.val_error,
            s.val_clipfrac,
            s.val_mean,
        ];
        for (k, m) in means.iter().enumerate() {
            v[k] = f64::from(*m) * n;
        }
        // Σx² from the local mean and unbiased variance (NaN for a single token: x² = mean²).
        let sum_sq = |mean: f32, var: f32| {
            let (mean, var) = (f64::from(mean), f64::from(var));
            if n >= 2.0 {
                var * (n - 1.0) + n * mean * mean
            } else {
                n * mean * mean
            }
        };
        v[13] = sum_sq(s.returns_mean, s.returns_var);
        v[14] = sum_sq(s.val_mean, s.val_var);
        v[15] = n;
        v[16] = 1.0;
    }
    c.all_reduce_f64(&mut v)?;
    let n = v[15];
    let mean = |k: usize| (v[k] / n.max(1.0)) as f32;
    let var = |sum_k: usize, sq_k: usize| {
        if n >= 2.0 {
            let m = v[sum_k] / n;
            ((v[sq_k] - n * m * m) / (n - 1.0)) as f32
        } else {
            f32::NAN
        }
    };
    let stats = LossStats {
        loss_policy: mean(0),
        loss_value: mean(1),
        loss_total: 0.0,
        policy_entropy: mean(2),
        policy_approxkl: mean(3),
        policy_policykl: mean(4),
        policy_clipfrac: mean(5),
        policy_advantages_mean: mean(6),
        policy_ratio_mean: mean(7),
        returns_mean: mean(8),
        returns_var: var(8, 13),
        val_vpred: mean(9),
        val_error: mean(10),
        val_clipfrac: mean(11),
        val_mean: mean(12),
        val_var: var(12, 14),
    };
    Ok((stats, n as usize))
}

/// TRL `compute_advantages` on a rank's share of the batch, with the whitening over every
/// token of the global batch and GAE over the global batch's padded length. TRL's GAE runs over
/// the padding too, and with `whiten_rewards` the whitened padding is not zero (−μ/σ + μ), so it
/// reaches the advantages of the real tokens by an amount that depends on how many padded
/// columns a row has: the share is padded to the longest response of the whole batch, as one
/// process pads it, and the extra columns are dropped afterwards.
pub(crate) fn compute_advantages_across_ranks(
    c: &dyn Collective,
    values: Tensor<2>,
    rewards: Tensor<2>,
    mask: &ResponseMask,
    gae: &Gae,
) -> Result<Advantages> {
    let [b, t_local] = mask.dims();
    let t_global = all_gather_usize(c, &[t_local])?
        .into_iter()
        .max()
        .unwrap_or(t_local);
    let padded = ResponseMask::from_tensor(pad_cols(mask.tensor(), t_global))?;
    let whiten_across_ranks = |what: &str, x: Tensor<2>, m: &ResponseMask, shift: bool| {
        global_masked_whiten(c, what, x, m, shift)
    };
    let adv = compute_advantages_with(
        pad_cols(values, t_global),
        pad_cols(rewards, t_global),
        &padded,
        gae,
        &whiten_across_ranks,
    )?;
    let local = |x: Tensor<2>| x.slice([0..b, 0..t_local]);
    Ok(Advantages {
        values: local(adv.values),
        advantages: local(adv.advantages),
        returns: local(adv.returns),
    })
}

/// One minibatch's loss split over ranks: this rank's `(loss, tokens)` (token means over its
/// own samples, or `None` if it has none) becomes its share of the global minibatch's loss —
/// its token sum ÷ the minibatch's global token count, so that the gradients summed over ranks
/// are those of the global token mean —, the ratio threshold is decided on the global ratio
/// mean, and the statistics are the global minibatch's. Returns the loss (zeros on `device`
/// for a rank without samples), the statistics and whether the minibatch was skipped.
pub(crate) fn reduce_minibatch(
    c: &dyn Collective,
    p: &LossParams,
    local: Option<(PpoLoss, usize)>,
    device: &Device,
) -> Result<(PpoLoss, LossStats, bool)> {
    let (mut stats, n_global) = combine_loss_stats(c, local.as_ref().map(|(o, n)| (&o.stats, *n)))?;
    let skipped = f64::from(stats.policy_ratio_mean) > p.ratio_threshold;
    if skipped {
        stats.loss_policy *= 0.0;
        stats.loss_value *= 0.0;
    }
    stats.loss_total = stats.loss_policy + p.vf_coef as f32 * stats.loss_value;
    let out = match local {
        Some((out, n)) => {
            let share = if skipped {
                0.0
            } else {
                n as f32 / n_global.max(1) as f32
            };
            PpoLoss {
                loss: out.loss.mul_scalar(share),
                pg_loss: out.pg_loss.mul_scalar(share),
                vf_loss_weighted: out.vf_loss_weighted.mul_scalar(share),
                skipped,
                stats,
            }
        }
        None => {
            let zero = Tensor::<1>::zeros([1], device);
            PpoLoss {
                loss: zero.clone(),
                pg_loss: zero.clone(),
                vf_loss_weighted: zero,
                skipped,
                stats,
            }
        }
    };
    Ok((out, stats, skipped))
}
