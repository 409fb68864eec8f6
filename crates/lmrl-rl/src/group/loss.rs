//! The clipped-ratio objectives of TRL 1.16's GRPO (`GRPOTrainer._compute_loss`, per token,
//! four normalisations) and RLOO (`RLOOTrainer._compute_loss`, per sequence), with the
//! statistics TRL logs.

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::group::kl::k3_kl;
use crate::ppo::ResponseMask;
use crate::util::{check_finite, check_shape, to_scalar, to_vec};

/// How the masked per-token loss L_t of a batch of N completions becomes one scalar
/// (TRL 1.16 `GRPOConfig.loss_type`). m_t is the completion mask.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossNormalisation {
    /// `"grpo"` (DeepSeekMath): mean over sequences of the per-sequence token mean,
    /// (1/N)·Σ_i [Σ_t m L / max(Σ_t m, 1)]. Every sequence weighs the same, so a token of a
    /// long completion weighs less than one of a short completion.
    Sequence,
    /// `"bnpo"`: token mean over the local batch, Σ m L / max(Σ m, 1).
    Token,
    /// `"dapo"` (DAPO, TRL's default): Σ m L / `normalizer`, where `normalizer` is the number of
    /// active tokens of the whole generation batch rescaled to one micro-batch (build it with
    /// [`LossNormalisation::dapo`]).
    GlobalToken {
        /// TRL's `normalizer`.
        normalizer: f32,
    },
    /// `"dr_grpo"` (Dr. GRPO): Σ m L / (N · `max_completion_length`), a constant divisor.
    DrGrpo {
        /// `GRPOConfig.max_completion_length`.
        max_completion_length: usize,
    },
}

impl LossNormalisation {
    /// TRL's `"dapo"` normaliser in train mode:
    /// max(`num_items_in_batch`, 1) / `num_processes` · `gradient_accumulation_steps` /
    /// `steps_per_generation`, with `num_items_in_batch` the active tokens (Σ mask) of the whole
    /// generation batch over all processes. One process with one micro-batch per generation
    /// batch: `dapo(mask.total(), 1, 1, 1)`, the same value as [`Self::Token`].
    pub fn dapo(
        num_items_in_batch: usize,
        num_processes: usize,
        gradient_accumulation_steps: usize,
        steps_per_generation: usize,
    ) -> Self {
        let n = (num_items_in_batch.max(1) as f64) / num_processes.max(1) as f64
            * gradient_accumulation_steps as f64
            / steps_per_generation.max(1) as f64;
        Self::GlobalToken {
            normalizer: n as f32,
        }
    }
}

/// The clip range and KL weight of [`grpo_loss`] (fields of `GRPOConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GrpoLossParams {
    /// ε_low (`epsilon`).
    pub epsilon_low: f64,
    /// ε_high (`epsilon_high`, resolved: `epsilon` when unset).
    pub epsilon_high: f64,
    /// β (`beta`); 0 drops the KL term and needs no reference log-probs.
    pub beta: f64,
    /// Multiply the k3 KL by the importance ratio (`use_bias_correction_kl`).
    pub use_bias_correction_kl: bool,
    /// The reduction (`loss_type`).
    pub normalisation: LossNormalisation,
}

/// Inputs of [`grpo_loss`]: `[N, T]` per-token log-probabilities of the sampled completion
/// tokens and `[N]` advantages.
#[derive(Debug, Clone)]
pub struct GrpoLossInputs {
    /// ℓ_t of the policy being optimised (carries gradients), TRL `per_token_logps`.
    pub logps: Tensor<2>,
    /// ℓ^old_t of the policy that sampled the batch, TRL `old_per_token_logps`; `None` means
    /// on-policy (TRL uses `per_token_logps.detach()`: ratio 1, gradient of the ratio kept).
    pub old_logps: Option<Tensor<2>>,
    /// ℓ^ref_t of the reference model, TRL `ref_per_token_logps`; needed iff β ≠ 0.
    pub ref_logps: Option<Tensor<2>>,
    /// Â_i of [`crate::group::advantages::grpo_advantages`] (constants).
    pub advantages: Tensor<1>,
}

/// Statistics TRL's GRPO `_compute_loss` logs (names of `GRPOTrainer._metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct GrpoLossStats {
    /// `kl`: token mean of the KL term (after the bias correction), `None` when β = 0.
    pub kl: Option<f32>,
    /// `clip_ratio/low_mean`: token fraction with ρ < 1 − ε_low and Â < 0.
    pub clip_ratio_low_mean: f32,
    /// `clip_ratio/high_mean`: token fraction with ρ > 1 + ε_high and Â > 0.
    pub clip_ratio_high_mean: f32,
    /// `clip_ratio/region_mean`: token fraction clipped on either side.
    pub clip_ratio_region_mean: f32,
    /// `clip_ratio/low_min`: smallest per-sequence fraction of low-clipped tokens (sequences
    /// without tokens skipped; NaN if none has any).
    pub clip_ratio_low_min: f32,
    /// `clip_ratio/high_max`: largest per-sequence fraction of high-clipped tokens.
    pub clip_ratio_high_max: f32,
}

/// Output of [`grpo_loss`].
#[derive(Debug, Clone)]
pub struct GrpoLoss {
    /// The scalar to back-propagate (`[1]`), TRL's `policy_loss`: *not* divided by the
    /// gradient-accumulation steps (TRL divides `"grpo"`/`"bnpo"`/`"dr_grpo"` by them; `"dapo"`
    /// has them in its normaliser).
    pub loss: Tensor<1>,
    /// `[N, T]` L_t before masking, TRL `per_token_loss` (clipped objective + β·KL).
    pub per_token_loss: Tensor<2>,
    /// `[N, T]` the KL term before β (k3, ×ρ with the bias correction), `None` when β = 0.
    pub per_token_kl: Option<Tensor<2>>,
    /// `[N, T]` ρ_t = exp(ℓ_t − ℓ^old_t), TRL `coef_1`.
    pub ratio: Tensor<2>,
    /// Logged statistics.
    pub stats: GrpoLossStats,
}

/// TRL `coef_1` (`importance_sampling_level="token"`): ρ_t = exp(ℓ_t − ℓ^old_t).
pub fn importance_ratio(logps: Tensor<2>, old_logps: Tensor<2>) -> Tensor<2> {
    (logps - old_logps).exp()
}

/// The PPO clipped surrogate as TRL 1.16 writes it for GRPO (loss types grpo/bnpo/dr_grpo/dapo),
/// per token: −min(ρ_t·Â_i, clip(ρ_t, 1 − ε_low, 1 + ε_high)·Â_i). `ratio` `[N, T]`,
/// `advantages` `[N]` (one per sequence, broadcast over its tokens). Unmasked.
pub fn clipped_objective(
    ratio: Tensor<2>,
    advantages: Tensor<1>,
    epsilon_low: f64,
    epsilon_high: f64,
) -> Tensor<2> {
    let adv = advantages.unsqueeze_dim::<2>(1);
    let clipped = ratio
        .clone()
        .clamp((1.0 - epsilon_low) as f32, (1.0 + epsilon_high) as f32);
    (ratio * adv.clone()).min_pair(clipped * adv).neg()
}

/// The reduction of TRL 1.16 `GRPOTrainer._compute_loss` (see [`LossNormalisation`]):
/// masked per-token loss `[N, T]` → `[1]`.
pub fn aggregate_loss(
    per_token_loss: Tensor<2>,
    mask: &ResponseMask,
    normalisation: LossNormalisation,
) -> Result<Tensor<1>> {
    let dims = mask.dims();
    check_shape("per_token_loss", &per_token_loss, &dims)?;
    let m = mask.tensor();
    let masked = per_token_loss * m.clone();
    Ok(match normalisation {
        LossNormalisation::Sequence => {
            let per_seq = masked.sum_dim(1) / m.sum_dim(1).clamp_min(1.0);
            per_seq.mean()
        }
        LossNormalisation::Token => masked.sum().div_scalar(mask.total().max(1) as f32),
        LossNormalisation::GlobalToken { normalizer } => {
            if !(normalizer.is_finite() && normalizer > 0.0) {
                return Err(RlError::Config {
                    field: "num_items_in_batch".into(),
                    reason: format!("the dapo normaliser must be positive, got {normalizer}"),
                });
            }
            masked.sum().div_scalar(normalizer)
        }
        LossNormalisation::DrGrpo {
            max_completion_length,
        } => {
            if max_completion_length == 0 {
                return Err(RlError::Config {
                    field: "max_completion_length".into(),
                    reason: "must be at least 1".into(),
                });
            }
            masked
                .sum()
                .div_scalar((dims[0] * max_completion_length) as f32)
        }
    })
}

/// TRL's `global_masked_mean` on the host: Σ m x / max(Σ m, 1).
fn host_masked_mean(x: &[f32], mask: &[f32]) -> f32 {
    let (s, c) = x
        .iter()
        .zip(mask)
        .fold((0.0f32, 0.0f32), |(s, c), (v, m)| (s + v * m, c + m));
    s / c.max(1.0)
}

/// TRL's `masked_seq_mean` then `nanmin`/`nanmax`: per-row masked means (rows without tokens
/// are NaN and skipped), reduced by `pick`; NaN if every row is empty.
fn host_seq_extreme(x: &[f32], mask: &[f32], len: usize, pick: fn(f32, f32) -> f32) -> f32 {
    x.chunks(len)
        .zip(mask.chunks(len))
        .filter_map(|(xr, mr)| {
            let c: f32 = mr.iter().sum();
            (c > 0.0).then(|| xr.iter().zip(mr).map(|(v, m)| v * m).sum::<f32>() / c)
        })
        .reduce(pick)
        .unwrap_or(f32::NAN)
}

/// TRL 1.16 `GRPOTrainer._compute_loss` for `loss_type` in {grpo, bnpo, dr_grpo, dapo} with
/// `importance_sampling_level="token"`:
///
/// - ρ_t = exp(ℓ_t − ℓ^old_t) ([`importance_ratio`]);
/// - L_t = −min(ρ_t·Â, clip(ρ_t, 1−ε_low, 1+ε_high)·Â) ([`clipped_objective`]);
/// - if β ≠ 0: KL_t = k3 ([`k3_kl`]), ×ρ_t when `use_bias_correction_kl`, and L_t += β·KL_t;
/// - loss = [`aggregate_loss`] with the chosen [`LossNormalisation`].
///
/// The logged statistics are TRL's (`kl`, `clip_ratio/*`). Shapes: `[N, T]` log-probs matching
/// `mask`, `[N]` advantages, else [`RlError::Shape`]; NaN/Inf in any input or in the loss is an
/// [`RlError::NonFinite`]; β ≠ 0 without reference log-probs is an [`RlError::Config`].
pub fn grpo_loss(
    inputs: GrpoLossInputs,
    mask: &ResponseMask,
    p: &GrpoLossParams,
) -> Result<GrpoLoss> {
    let dims = mask.dims();
    let GrpoLossInputs {
        logps,
        old_logps,
        ref_logps,
        advantages,
    } = inputs;
    check_shape("logps", &logps, &dims)?;
    check_shape("advantages", &advantages, &dims[..1])?;
    check_finite("logps", &logps)?;
    check_finite("advantages", &advantages)?;
    let old_logps = match old_logps {
        Some(o) => {
            check_shape("old_logps", &o, &dims)?;
            check_finite("old_logps", &o)?;
            o
        }
        None => logps.clone().detach(),
    };
    let ratio = importance_ratio(logps.clone(), old_logps);
    let mut per_token_loss = clipped_objective(
        ratio.clone(),
        advantages.clone(),
        p.epsilon_low,
        p.epsilon_high,
    );
    let per_token_kl = if p.beta != 0.0 {
        let r = ref_logps.ok_or_else(|| RlError::Config {
            field: "beta".into(),
            reason: "β ≠ 0 needs the reference model's log-probs".into(),
        })?;
        check_shape("ref_logps", &r, &dims)?;
        check_finite("ref_logps", &r)?;
        let mut kl = k3_kl(logps, r);
        if p.use_bias_correction_kl {
            kl = kl * ratio.clone();
        }
        per_token_loss = per_token_loss + kl.clone().mul_scalar(p.beta as f32);
        Some(kl)
    } else {
        None
    };
    let loss = aggregate_loss(per_token_loss.clone(), mask, p.normalisation)?;
    let value = to_scalar("grpo loss", loss.clone().detach())?;
    if !value.is_finite() {
        return Err(RlError::NonFinite {
            what: "grpo/loss".into(),
            location: "scalar".into(),
            value,
        });
    }

    // Statistics on the host (one read of ρ, Â and the KL).
    let m = mask.host();
    let len = dims[1];
    let rho = to_vec("ratio", ratio.clone().detach())?;
    let adv = to_vec("advantages", advantages.detach())?;
    let (lo, hi) = ((1.0 - p.epsilon_low) as f32, (1.0 + p.epsilon_high) as f32);
    let mut low = vec![0.0f32; rho.len()];
    let mut high = vec![0.0f32; rho.len()];
    for (i, &r) in rho.iter().enumerate() {
        let a = adv[i / len];
        low[i] = f32::from(u8::from(r < lo && a < 0.0));
        high[i] = f32::from(u8::from(r > hi && a > 0.0));
    }
    let region: Vec<f32> = low.iter().zip(&high).map(|(a, b)| a.max(*b)).collect();
    let kl_stat = match &per_token_kl {
        Some(kl) => Some(host_masked_mean(
            &to_vec("per_token_kl", kl.clone().detach())?,
            m,
        )),
        None => None,
    };
    let stats = GrpoLossStats {
        kl: kl_stat,
        clip_ratio_low_mean: host_masked_mean(&low, m),
        clip_ratio_high_mean: host_masked_mean(&high, m),
        clip_ratio_region_mean: host_masked_mean(&region, m),
        clip_ratio_low_min: host_seq_extreme(&low, m, len, f32::min),
        clip_ratio_high_max: host_seq_extreme(&high, m, len, f32::max),
    };
    Ok(GrpoLoss {
        loss,
        per_token_loss,
        per_token_kl,
        ratio,
        stats,
    })
}

/// TRL `(per_token_logps * completion_mask).sum(1)`: the log-probability of each whole
/// completion, `[N, T]` → `[N]` (RLOO's `old_logps` and `logps`).
pub fn sequence_logps(per_token_logps: Tensor<2>, mask: &ResponseMask) -> Result<Tensor<1>> {
    check_shape("per_token_logps", &per_token_logps, &mask.dims())?;
    Ok((per_token_logps * mask.tensor())
        .sum_dim(1)
        .squeeze_dim::<1>(1))
}

/// The clip range of [`rloo_loss`] (fields of `RLOOConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RlooLossParams {
    /// ε_low (`epsilon`).
    pub epsilon_low: f64,
    /// ε_high (`epsilon_high`, resolved).
    pub epsilon_high: f64,
}

/// Statistics TRL's RLOO `_compute_loss` logs; over sequences, since RLOO's ratio is one per
/// sequence.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct RlooLossStats {
    /// `clip_ratio/low_mean`: fraction of sequences with ρ < 1 − ε_low and Â < 0.
    pub clip_ratio_low_mean: f32,
    /// `clip_ratio/high_mean`: fraction with ρ > 1 + ε_high and Â > 0.
    pub clip_ratio_high_mean: f32,
    /// `clip_ratio/region_mean`: fraction clipped on either side.
    pub clip_ratio_region_mean: f32,
    /// `clip_ratio/low_min`: min over sequences of the low-clip indicator.
    pub clip_ratio_low_min: f32,
    /// `clip_ratio/high_max`: max over sequences of the high-clip indicator.
    pub clip_ratio_high_max: f32,
}

/// Output of [`rloo_loss`].
#[derive(Debug, Clone)]
pub struct RlooLoss {
    /// The scalar to back-propagate (`[1]`), mean over sequences; RLOO returns it unscaled (the
    /// Trainer divides by the gradient-accumulation steps).
    pub loss: Tensor<1>,
    /// `[N]` −min(ρ_i·Â_i, clip(ρ_i)·Â_i), TRL `per_sequence_loss`.
    pub per_sequence_loss: Tensor<1>,
    /// `[N]` Σ_t m ℓ_t of the current policy, TRL `logps`.
    pub logps: Tensor<1>,
    /// `[N]` ρ_i = exp(logps_i − old_logps_i), TRL `coef_1`.
    pub ratio: Tensor<1>,
    /// Logged statistics.
    pub stats: RlooLossStats,
}

/// TRL 1.16 `RLOOTrainer._compute_loss`, the clipped objective on the *sequence* ratio:
///
/// - logps_i = Σ_t m ℓ_t ([`sequence_logps`] of `logps`, carrying gradients);
/// - ρ_i = exp(logps_i − old_logps_i), `old_logps` `[N]` the rollout policy's sums;
/// - loss = (1/N)·Σ_i −min(ρ_i·Â_i, clip(ρ_i, 1−ε_low, 1+ε_high)·Â_i).
///
/// No KL term: RLOO puts it in the reward ([`crate::group::advantages::rloo_rewards`]).
/// Shapes and NaN/Inf as in [`grpo_loss`].
pub fn rloo_loss(
    logps: Tensor<2>,
    old_logps: Tensor<1>,
    advantages: Tensor<1>,
    mask: &ResponseMask,
    p: &RlooLossParams,
) -> Result<RlooLoss> {
    let dims = mask.dims();
    check_shape("logps", &logps, &dims)?;
    check_shape("old_logps", &old_logps, &dims[..1])?;
    check_shape("advantages", &advantages, &dims[..1])?;
    check_finite("logps", &logps)?;
    check_finite("old_logps", &old_logps)?;
    check_finite("advantages", &advantages)?;
    let seq = sequence_logps(logps, mask)?;
    let ratio = (seq.clone() - old_logps).exp();
    let clipped = ratio
        .clone()
        .clamp((1.0 - p.epsilon_low) as f32, (1.0 + p.epsilon_high) as f32);
    let per_sequence_loss = (ratio.clone() * advantages.clone())
        .min_pair(clipped * advantages.clone())
        .neg();
    let loss = per_sequence_loss.clone().mean();
    let value = to_scalar("rloo loss", loss.clone().detach())?;
    if !value.is_finite() {
        return Err(RlError::NonFinite {
            what: "rloo/loss".into(),
            location: "scalar".into(),
            value,
        });
    }
    let rho = to_vec("ratio", ratio.clone().detach())?;
    let adv = to_vec("advantages", advantages.detach())?;
    let (lo, hi) = ((1.0 - p.epsilon_low) as f32, (1.0 + p.epsilon_high) as f32);
    let low: Vec<f32> = rho
        .iter()
        .zip(&adv)
        .map(|(&r, &a)| f32::from(u8::from(r < lo && a < 0.0)))
        .collect();
    let high: Vec<f32> = rho
        .iter()
        .zip(&adv)
        .map(|(&r, &a)| f32::from(u8::from(r > hi && a > 0.0)))
        .collect();
    let n = rho.len() as f32;
    let mean = |v: &[f32]| v.iter().sum::<f32>() / n;
    let region: Vec<f32> = low.iter().zip(&high).map(|(a, b)| a.max(*b)).collect();
    let stats = RlooLossStats {
        clip_ratio_low_mean: mean(&low),
        clip_ratio_high_mean: mean(&high),
        clip_ratio_region_mean: mean(&region),
        clip_ratio_low_min: low.iter().copied().fold(f32::INFINITY, f32::min),
        clip_ratio_high_max: high.iter().copied().fold(f32::NEG_INFINITY, f32::max),
    };
    Ok(RlooLoss {
        loss,
        per_sequence_loss,
        logps: seq,
        ratio,
        stats,
    })
}
