//! The PPO objective: TRL 0.11 `PPOTrainer.loss` (clipped surrogate, Schulman et al. 2017 eq. 7,
//! plus TRL's clipped value loss) and its logged statistics.

use burn::tensor::Tensor;
use lmrl_models::{entropy_rows, log_softmax};

use crate::error::Result;
use crate::ppo::mask::ResponseMask;
use crate::ppo::whiten::{masked_mean, masked_var};
use crate::util::{check_finite, check_shape, to_vec};

/// Hyper-parameters of [`ppo_loss`] (fields of TRL's `PPOConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossParams {
    /// ε of the ratio clip (`cliprange`, 0.2).
    pub cliprange: f64,
    /// Clip of the value prediction around the old value (`cliprange_value`, 0.2).
    pub cliprange_value: f64,
    /// Weight of the value loss (`vf_coef`, 0.1).
    pub vf_coef: f64,
    /// A minibatch whose token-mean ratio exceeds this has its loss multiplied by 0
    /// (`ratio_threshold`, 10).
    pub ratio_threshold: f64,
}

/// Inputs of [`ppo_loss`]; all `[B, T]` except `log_softmax` (`[B, T, V]`).
#[derive(Debug, Clone)]
pub struct LossInputs {
    /// ℓ^old_t: log-probs of the rollout policy (constants).
    pub old_logprobs: Tensor<2>,
    /// V^old_t: masked values from [`crate::ppo::advantages::compute_advantages`] (constants).
    pub values: Tensor<2>,
    /// Logits or log-softmax of the current policy, for the logged entropy only.
    pub logits: Tensor<3>,
    /// V^new_t: current value predictions (carry gradients).
    pub vpreds: Tensor<2>,
    /// ℓ^new_t: current log-probs (carry gradients).
    pub logprobs: Tensor<2>,
    /// Whitened advantages Â_t (constants).
    pub advantages: Tensor<2>,
    /// Returns G_t (constants).
    pub returns: Tensor<2>,
}

/// The statistics TRL's `loss` returns (names as in TRL's `train_stats`, all token-masked means
/// over the minibatch).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct LossStats {
    /// `loss/policy`: L_pg (0 when the ratio threshold skipped the minibatch).
    pub loss_policy: f32,
    /// `loss/value`: L_v, **not** multiplied by `vf_coef` (as TRL logs it).
    pub loss_value: f32,
    /// `loss/total`: L_pg + vf_coef·L_v.
    pub loss_total: f32,
    /// `policy/entropy`: masked mean of the full-vocabulary entropy of the current policy.
    pub policy_entropy: f32,
    /// `policy/approxkl`: ½·mean (ℓ^new − ℓ^old)².
    pub policy_approxkl: f32,
    /// `policy/policykl`: mean (ℓ^old − ℓ^new).
    pub policy_policykl: f32,
    /// `policy/clipfrac`: fraction of tokens where the clipped surrogate was the larger loss.
    pub policy_clipfrac: f32,
    /// `policy/advantages_mean`.
    pub policy_advantages_mean: f32,
    /// Masked mean of the ratio ρ (compared with `ratio_threshold`).
    pub policy_ratio_mean: f32,
    /// `returns/mean`.
    pub returns_mean: f32,
    /// `returns/var` (unbiased; NaN for a single-token minibatch, as in TRL).
    pub returns_var: f32,
    /// `val/vpred`: mean V^new.
    pub val_vpred: f32,
    /// `val/error`: mean (V^new − G)².
    pub val_error: f32,
    /// `val/clipfrac`: fraction of tokens where the clipped value loss was larger.
    pub val_clipfrac: f32,
    /// `val/mean`: mean V^old.
    pub val_mean: f32,
    /// `val/var`: unbiased variance of V^old (NaN for a single-token minibatch, as in TRL).
    pub val_var: f32,
}

/// Output of [`ppo_loss`].
#[derive(Debug, Clone)]
pub struct PpoLoss {
    /// L = L_pg + vf_coef·L_v (×0 if skipped): the tensor to back-propagate.
    pub loss: Tensor<1>,
    /// L_pg (TRL's first return value `pg_loss`).
    pub pg_loss: Tensor<1>,
    /// vf_coef·L_v (TRL's second return value).
    pub vf_loss_weighted: Tensor<1>,
    /// True when the token-mean ratio exceeded `ratio_threshold` and the loss was zeroed.
    pub skipped: bool,
    /// Logged statistics.
    pub stats: LossStats,
}

/// TRL `entropy_from_logits`: `logsumexp(logits) − Σ softmax(logits)·logits`, per position,
/// computed as the equal `−Σ p·log p` with `log p = log_softmax(logits)` (two fused row passes
/// instead of TRL's eight element-wise ones). Accepts logits or a log-softmax.
pub fn entropy_from_logits(logits: Tensor<3>) -> Tensor<2> {
    let [b, t, v] = logits.dims();
    entropy_rows(log_softmax(logits.reshape([b * t, v]))).reshape([b, t])
}

/// TRL `clip_by_value(x, lo, hi)` = `max(min(x, hi), lo)` (element-wise bounds).
pub fn clip_by_value(x: Tensor<2>, lo: Tensor<2>, hi: Tensor<2>) -> Tensor<2> {
    x.min_pair(hi).max_pair(lo)
}

/// TRL `PPOTrainer.loss`:
///
/// - value loss: V^clip = clip(V^new, V^old ± `cliprange_value`),
///   L_v = ½·masked_mean(max((V^new − G)², (V^clip − G)²));
/// - policy loss: ρ = exp(ℓ^new − ℓ^old),
///   L_pg = masked_mean(max(−Â·ρ, −Â·clip(ρ, 1−ε, 1+ε)));
/// - L = L_pg + `vf_coef`·L_v; if masked_mean(ρ) > `ratio_threshold` all three are ×0.
///
/// Returns `(L, L_pg, vf_coef·L_v)` with the statistics TRL logs. NaN/Inf in the current
/// log-probs, values or the loss is an [`crate::RlError::NonFinite`].
pub fn ppo_loss(inputs: LossInputs, mask: &ResponseMask, p: &LossParams) -> Result<PpoLoss> {
    check_loss_inputs(&inputs, mask)?;
    let LossInputs {
        old_logprobs,
        values,
        logits,
        vpreds,
        logprobs,
        advantages,
        returns,
    } = inputs;
    let value = value_loss(&vpreds, &values, &returns, mask, p.cliprange_value)?;
    let policy = policy_loss(logprobs, old_logprobs, &advantages, mask, p.cliprange)?;
    let vf_coef = p.vf_coef as f32;
    let mut vf_weighted = value.loss.clone().mul_scalar(vf_coef);
    let mut pg_loss = policy.loss.clone();
    let s = loss_statistics(
        &value,
        policy,
        StatisticsInputs {
            logits,
            values,
            vpreds,
            advantages,
            returns,
        },
        mask,
    )?;
    let skipped = f64::from(s[7]) > p.ratio_threshold;
    let (mut lp, mut lv) = (s[0], s[1]);
    if skipped {
        pg_loss = pg_loss.mul_scalar(0.0);
        vf_weighted = vf_weighted.mul_scalar(0.0);
        lp *= 0.0;
        lv *= 0.0;
    }
    let loss = pg_loss.clone() + vf_weighted.clone();
    let stats = LossStats {
        loss_policy: lp,
        loss_value: lv,
        loss_total: lp + vf_coef * lv,
        policy_entropy: s[2],
        policy_approxkl: s[3],
        policy_policykl: s[4],
        policy_clipfrac: s[5],
        policy_advantages_mean: s[6],
        policy_ratio_mean: s[7],
        returns_mean: s[8],
        returns_var: s[9],
        val_vpred: s[10],
        val_error: s[11],
        val_clipfrac: s[12],
        val_mean: s[13],
        val_var: s[14],
    };
    if !(stats.loss_total.is_finite()) {
        return Err(crate::RlError::NonFinite {
            what: "ppo/loss/total".into(),
            location: "scalar".into(),
            value: stats.loss_total,
        });
    }
    Ok(PpoLoss {
        loss,
        pg_loss,
        vf_loss_weighted: vf_weighted,
        skipped,
        stats,
    })
}

/// Every `[B, T]` input has the mask's shape; the current log-probs and values are finite.
fn check_loss_inputs(inputs: &LossInputs, mask: &ResponseMask) -> Result<()> {
    let dims = mask.dims();
    for (name, t) in [
        ("old_logprobs", &inputs.old_logprobs),
        ("values", &inputs.values),
        ("vpreds", &inputs.vpreds),
        ("logprobs", &inputs.logprobs),
        ("advantages", &inputs.advantages),
        ("returns", &inputs.returns),
    ] {
        check_shape(name, t, &dims)?;
    }
    check_finite("logprobs", &inputs.logprobs)?;
    check_finite("vpreds", &inputs.vpreds)
}

/// TRL's clipped value loss and `val/clipfrac`.
struct ValueLoss {
    /// L_v = ½·masked_mean(max((V^new − G)², (V^clip − G)²)).
    loss: Tensor<1>,
    clipfrac: Tensor<1>,
}

/// The value half of TRL `loss`: V^clip = clip(V^new, V^old ± `cliprange_value`),
/// L_v = ½·masked_mean(max((V^new − G)², (V^clip − G)²)).
fn value_loss(
    vpreds: &Tensor<2>,
    values: &Tensor<2>,
    returns: &Tensor<2>,
    mask: &ResponseMask,
    cliprange_value: f64,
) -> Result<ValueLoss> {
    let cv = cliprange_value as f32;
    let vpredclipped = clip_by_value(
        vpreds.clone(),
        values.clone().sub_scalar(cv),
        values.clone().add_scalar(cv),
    );
    let vf_losses1 = (vpreds.clone() - returns.clone()).square();
    let vf_losses2 = (vpredclipped - returns.clone()).square();
    let loss = masked_mean(
        "vf_loss",
        vf_losses1.clone().max_pair(vf_losses2.clone()),
        mask,
    )?
    .mul_scalar(0.5);
    let clipfrac = masked_mean(
        "val/clipfrac",
        vf_losses2.detach().greater(vf_losses1.detach()).float(),
        mask,
    )?;
    Ok(ValueLoss { loss, clipfrac })
}

/// TRL's clipped surrogate, `policy/clipfrac`, and the ratio its statistics read.
struct PolicyLoss {
    /// L_pg = masked_mean(max(−Â·ρ, −Â·clip(ρ, 1−ε, 1+ε))).
    loss: Tensor<1>,
    clipfrac: Tensor<1>,
    /// ρ = exp(ℓ^new − ℓ^old).
    ratio: Tensor<2>,
    /// ℓ^new − ℓ^old.
    log_ratio: Tensor<2>,
}

/// The policy half of TRL `loss` (Schulman et al. 2017 eq. 7): ρ = exp(ℓ^new − ℓ^old),
/// L_pg = masked_mean(max(−Â·ρ, −Â·clip(ρ, 1−ε, 1+ε))).
fn policy_loss(
    logprobs: Tensor<2>,
    old_logprobs: Tensor<2>,
    advantages: &Tensor<2>,
    mask: &ResponseMask,
    cliprange: f64,
) -> Result<PolicyLoss> {
    let log_ratio = logprobs - old_logprobs;
    let ratio = log_ratio.clone().exp();
    let neg_adv = advantages.clone().neg();
    let pg_losses = neg_adv.clone() * ratio.clone();
    let eps = cliprange as f32;
    let pg_losses2 = neg_adv * ratio.clone().clamp(1.0 - eps, 1.0 + eps);
    let loss = masked_mean(
        "pg_loss",
        pg_losses.clone().max_pair(pg_losses2.clone()),
        mask,
    )?;
    let clipfrac = masked_mean(
        "policy/clipfrac",
        pg_losses2.detach().greater(pg_losses.detach()).float(),
        mask,
    )?;
    Ok(PolicyLoss {
        loss,
        clipfrac,
        ratio,
        log_ratio,
    })
}

/// What the logged statistics read besides the two losses.
struct StatisticsInputs {
    logits: Tensor<3>,
    values: Tensor<2>,
    vpreds: Tensor<2>,
    advantages: Tensor<2>,
    returns: Tensor<2>,
}

/// The statistics TRL's `loss` returns, on detached tensors, read back in one transfer, in
/// the order `L_pg, L_v, entropy, approxkl, policykl, policy clipfrac, advantages mean, ratio
/// mean, returns mean, returns var, vpred, val error, val clipfrac, val mean, val var`.
fn loss_statistics(
    value: &ValueLoss,
    policy: PolicyLoss,
    x: StatisticsInputs,
    mask: &ResponseMask,
) -> Result<Vec<f32>> {
    let ratio_d = policy.ratio.detach();
    let log_ratio_d = policy.log_ratio.detach();
    let entropy = masked_mean(
        "policy/entropy",
        entropy_from_logits(x.logits.detach()),
        mask,
    )?;
    let approxkl =
        masked_mean("policy/approxkl", log_ratio_d.clone().square(), mask)?.mul_scalar(0.5);
    let policykl = masked_mean("policy/policykl", log_ratio_d.neg(), mask)?;
    let adv_mean = masked_mean("policy/advantages_mean", x.advantages, mask)?;
    let ratio_mean = masked_mean("policy/ratio", ratio_d, mask)?;
    let returns_d = x.returns.detach();
    let ret_mean = masked_mean("returns/mean", returns_d.clone(), mask)?;
    // A minibatch with a single unmasked token has no unbiased variance; TRL's
    // `masked_var` yields NaN there (0·1/0). These two are logged statistics only, so the same
    // NaN is reported instead of failing the step.
    let logged_var = |what: &str, x: Tensor<2>| -> Result<Tensor<1>> {
        if mask.total() >= 2 {
            masked_var(what, x, mask, true)
        } else {
            Ok(Tensor::<1>::from_data([f32::NAN], &x.device()))
        }
    };
    let ret_var = logged_var("returns/var", returns_d.clone())?;
    let vpreds_d = x.vpreds.detach();
    let vpred_mean = masked_mean("val/vpred", vpreds_d.clone(), mask)?;
    let val_error = masked_mean("val/error", (vpreds_d - returns_d).square(), mask)?;
    let val_mean = masked_mean("val/mean", x.values.clone(), mask)?;
    let val_var = logged_var("val/var", x.values)?;
    let scalars = Tensor::cat(
        vec![
            policy.loss.detach(),
            value.loss.clone().detach(),
            entropy,
            approxkl,
            policykl,
            policy.clipfrac,
            adv_mean,
            ratio_mean,
            ret_mean,
            ret_var,
            vpred_mean,
            val_error,
            value.clipfrac.clone(),
            val_mean,
            val_var,
        ],
        0,
    );
    to_vec("ppo loss statistics", scalars)
}
