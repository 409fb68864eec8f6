//! The statistics of the PPO-vs-CORY comparison: small-sample confidence intervals over seeds,
//! least squares with an algorithm factor, and a cluster bootstrap over seeds.
//!
//! Seeds are the independent units: points within one run are autocorrelated, so every interval
//! here resamples or averages whole runs, never single points.
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use lmrl_runs::t975;

/// A point estimate with a 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// The interval mapped through an increasing function (e.g. `exp` of a log ratio).
    pub fn map(self, f: impl Fn(f64) -> f64) -> Interval {
        Interval {
            estimate: f(self.estimate),
            low: f(self.low),
            high: f(self.high),
        }
    }

    /// Whether the interval excludes `x`.
    pub fn excludes(&self, x: f64) -> bool {
        x < self.low || x > self.high
    }
}

/// Mean of `xs` with the t interval (n − 1 degrees of freedom); NaN bounds for one value.
pub fn mean_ci(xs: &[f64]) -> Interval {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let sd = (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let half = t975(xs.len().saturating_sub(1)) * sd / n.sqrt();
    Interval {
        estimate: m,
        low: m - half,
        high: m + half,
    }
}

/// Ordinary least squares `y ≈ X·β` by the normal equations (Gaussian elimination with partial
/// pivoting); `None` when `XᵀX` is singular.
pub fn least_squares(rows: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let p = rows.first()?.len();
    let mut a = vec![vec![0.0; p + 1]; p];
    for (x, &yi) in rows.iter().zip(y) {
        for i in 0..p {
            for j in 0..p {
                a[i][j] += x[i] * x[j];
            }
            a[i][p] += x[i] * yi;
        }
    }
    for col in 0..p {
        let pivot = (col..p).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, pv) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * pv;
                }
            }
        }
    }
    Some((0..p).map(|i| a[i][p] / a[i][i]).collect())
}

/// One run's smoothed curve: `(task reward, KL)` points.
#[derive(Debug, Clone)]
pub struct RunPoints {
    /// `true` for CORY, `false` for PPO.
    pub cory: bool,
    /// The seed (runs of the same seed are paired).
    pub seed: u64,
    pub points: Vec<(f64, f64)>,
}

/// The KL ratio CORY / PPO at matched task reward: the coefficient `c` of the fit
/// `log KL = a + b·reward + c·[CORY]` over every smoothed point, as `exp(c)`, with a 95% interval
/// from a cluster bootstrap that resamples whole runs within each algorithm (`draws`
/// resamples, seeded). `None` if the fit is singular.
pub fn kl_ratio_at_matched_reward(runs: &[RunPoints], draws: usize, seed: u64) -> Option<Interval> {
    let fit = |sample: &[&RunPoints]| -> Option<f64> {
        let mut rows = Vec::new();
        let mut y = Vec::new();
        for r in sample {
            for &(reward, kl) in &r.points {
                if kl > 0.0 && kl.is_finite() && reward.is_finite() {
                    rows.push(vec![1.0, reward, f64::from(u8::from(r.cory))]);
                    y.push(kl.ln());
                }
            }
        }
        least_squares(&rows, &y).map(|b| b[2])
    };
    let all: Vec<&RunPoints> = runs.iter().collect();
    let estimate = fit(&all)?;
    let (ppo, cory): (Vec<&RunPoints>, Vec<&RunPoints>) = runs.iter().partition(|r| !r.cory);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut boot = Vec::with_capacity(draws);
    for _ in 0..draws {
        let mut sample: Vec<&RunPoints> = Vec::new();
        for group in [&ppo, &cory] {
            for _ in 0..group.len() {
                sample.push(group[rng.random_range(0..group.len())]);
            }
        }
        if let Some(c) = fit(&sample) {
            boot.push(c);
        }
    }
    let (low, high) = percentile_interval(&mut boot)?;
    Some(
        Interval {
            estimate,
            low,
            high,
        }
        .map(f64::exp),
    )
}

/// The 2.5% and 97.5% percentiles of `xs` (sorted in place).
pub fn percentile_interval(xs: &mut [f64]) -> Option<(f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    Some((at(0.025), at(0.975)))
}

/// The ratio `a / b` of paired positive measurements (one pair per seed), as the geometric mean
/// of the per-seed ratios with a t interval on their logs.
pub fn paired_ratio(pairs: &[(f64, f64)]) -> Interval {
    let logs: Vec<f64> = pairs.iter().map(|(a, b)| (a / b).ln()).collect();
    mean_ci(&logs).map(f64::exp)
}

/// Slope of `y` against `x` (least squares).
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let rows: Vec<Vec<f64>> = points.iter().map(|(x, _)| vec![1.0, *x]).collect();
    let y: Vec<f64> = points.iter().map(|(_, y)| *y).collect();
    least_squares(&rows, &y).map(|b| b[1])
}

/// Moving average of `xs` over a centred window of `w` (shrunk at the ends).
pub fn smooth(xs: &[f64], w: usize) -> Vec<f64> {
    let h = w / 2;
    (0..xs.len())
        .map(|i| {
            let (lo, hi) = (i.saturating_sub(h), (i + h + 1).min(xs.len()));
            xs[lo..hi].iter().sum::<f64>() / (hi - lo) as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_interval_matches_a_hand_computation() {
        // mean 2, sd 1, n 3: half-width 4.303 / √3 = 2.4843.
        let i = mean_ci(&[1.0, 2.0, 3.0]);
        assert!((i.estimate - 2.0).abs() < 1e-12);
        assert!((i.high - 2.0 - 4.303 / 3f64.sqrt()).abs() < 1e-9);
    }

    #[test]
    fn least_squares_recovers_an_exact_plane() {
        let rows: Vec<Vec<f64>> = (0..6)
            .map(|i| vec![1.0, i as f64, f64::from(u8::from(i % 2 == 0))])
            .collect();
        let y: Vec<f64> = rows.iter().map(|r| 0.5 + 2.0 * r[1] - 3.0 * r[2]).collect();
        let b = least_squares(&rows, &y).unwrap();
        for (got, want) in b.iter().zip([0.5, 2.0, -3.0]) {
            assert!((got - want).abs() < 1e-9, "{b:?}");
        }
        assert!(least_squares(&[vec![1.0, 1.0], vec![2.0, 2.0]], &[1.0, 2.0]).is_none());
    }

    #[test]
    fn matched_reward_ratio_finds_a_constant_factor() {
        // CORY's KL is exactly half PPO's at every reward, with seed-to-seed noise in reward
        // only: the fit gives exp(c) = 0.5 and the bootstrap interval holds it.
        let run = |cory: bool, seed: u64| RunPoints {
            cory,
            seed,
            points: (0..10)
                .map(|i| {
                    let r = 0.1 * i as f64 + 0.01 * seed as f64;
                    let kl = (1.0 + 2.0 * r).exp() * if cory { 0.5 } else { 1.0 };
                    (r, kl)
                })
                .collect(),
        };
        let runs: Vec<RunPoints> = (0..4).flat_map(|s| [run(false, s), run(true, s)]).collect();
        let i = kl_ratio_at_matched_reward(&runs, 200, 1).unwrap();
        assert!((i.estimate - 0.5).abs() < 1e-9, "{i:?}");
        assert!(i.low <= 0.5 + 1e-9 && i.high >= 0.5 - 1e-9, "{i:?}");
    }

    #[test]
    fn paired_ratio_is_the_geometric_mean() {
        let i = paired_ratio(&[(2.0, 1.0), (8.0, 1.0)]);
        assert!((i.estimate - 4.0).abs() < 1e-12);
        assert!(i.low < 4.0 && i.high > 4.0);
        assert!(!i.excludes(4.0));
    }

    #[test]
    fn smoothing_and_slope() {
        assert_eq!(smooth(&[0.0, 3.0, 6.0], 3), vec![1.5, 3.0, 4.5]);
        let s = slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]).unwrap();
        assert!((s - 2.0).abs() < 1e-12);
    }
}
