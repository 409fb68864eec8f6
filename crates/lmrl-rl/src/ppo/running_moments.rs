//! Running reward statistics: TRL `RunningMoments` (Chan et al.'s parallel update, as in
//! MOSS-RLHF) and the score normalisation of `PPOTrainer.step` (`use_score_scaling`,
//! `use_score_norm`, `score_clip`).

use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::util::check_finite_host;

/// The ε added to the running std: `torch.finfo(float32).eps`.
pub const SCORE_SCALING_EPS: f64 = f32::EPSILON as f64;

/// TRL `RunningMoments`: mean, (biased) variance, unbiased std and count of every score seen.
/// Starts at mean 0, var 1, std 1, count 1e-24 (so the prior has vanishing weight).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunningMoments {
    /// Running mean μ.
    pub mean: f64,
    /// Running unbiased std σ = √(var·n/(n−1)).
    pub std: f64,
    /// Running biased variance.
    pub var: f64,
    /// Number of values seen (plus the 1e-24 prior).
    pub count: f64,
}

impl Default for RunningMoments {
    fn default() -> Self {
        Self {
            mean: 0.0,
            std: 1.0,
            var: 1.0,
            count: 1e-24,
        }
    }
}

/// The batch's own moments returned by [`RunningMoments::update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchMoments {
    /// Batch mean.
    pub mean: f64,
    /// Batch unbiased std (0 for a single value, where TRL would divide by zero).
    pub std: f64,
}

impl RunningMoments {
    /// Fresh statistics.
    pub fn new() -> Self {
        Self::default()
    }

    /// TRL `RunningMoments.update(xs)`: merges the batch (biased `var_mean`) into the running
    /// moments with Chan's formula
    /// `M2 = var·n + var_b·n_b + δ²·n·n_b/(n+n_b)`, then `std = √(M2/(N−1))`.
    pub fn update(&mut self, xs: &[f32]) -> Result<BatchMoments> {
        if xs.is_empty() {
            return Err(RlError::TooFewTokens {
                what: "RunningMoments.update".into(),
                needed: 1,
                found: 0,
            });
        }
        check_finite_host("scores", &[xs.len()], xs)?;
        let n = xs.len() as f64;
        let xs_mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let xs_var = xs
            .iter()
            .map(|&x| (f64::from(x) - xs_mean).powi(2))
            .sum::<f64>()
            / n;
        let delta = xs_mean - self.mean;
        let tot_count = self.count + n;
        let new_sum = xs_var * n;
        let old_sum = self.var * self.count + delta * delta * self.count * n / tot_count;
        let tot_sum = old_sum + new_sum;
        self.mean += delta * n / tot_count;
        self.var = tot_sum / tot_count;
        self.std = (self.var * tot_count / (tot_count - 1.0)).sqrt();
        self.count = tot_count;
        let batch_std = if xs.len() > 1 {
            (xs_var * n / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Ok(BatchMoments {
            mean: xs_mean,
            std: batch_std,
        })
    }
}

/// Score post-processing of TRL `PPOTrainer.step`, in TRL's order:
/// 1. if `use_score_scaling`: update `running` with the batch, then
///    s ← (s − μ)/(σ + ε) when `use_score_norm`, else s ← s/(σ + ε) (ε = f32 machine epsilon);
///    `use_score_norm` alone does nothing, as in TRL;
/// 2. if `score_clip` is set: s ← clip(s, −c, c).
///
/// Done on the host: scores are one float per sample.
pub fn normalise_scores(
    scores: &[f32],
    running: &mut RunningMoments,
    use_score_scaling: bool,
    use_score_norm: bool,
    score_clip: Option<f32>,
) -> Result<Vec<f32>> {
    check_finite_host("scores", &[scores.len()], scores)?;
    let mut out: Vec<f32> = scores.to_vec();
    if use_score_scaling {
        running.update(scores)?;
        let factor = running.std + SCORE_SCALING_EPS;
        for s in &mut out {
            let x = f64::from(*s);
            *s = if use_score_norm {
                ((x - running.mean) / factor) as f32
            } else {
                (x / factor) as f32
            };
        }
    }
    if let Some(c) = score_clip {
        for s in &mut out {
            *s = s.clamp(-c, c);
        }
    }
    check_finite_host("normalised scores", &[out.len()], &out)?;
    Ok(out)
}
