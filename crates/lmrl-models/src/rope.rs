//! Rotary position embeddings (HF `LlamaRotaryEmbedding` and the `rope_scaling` variants of
//! `transformers.modeling_rope_utils`) for the Llama-family decoders.
//!
//! A scaling changes only the inverse frequencies `θ^(-2i/d)`; the rotation itself (rotate-half
//! layout) is the same for every variant, so [`Rope`] takes the frequencies ready-made.
use burn::tensor::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `rope_scaling` of a Hugging Face config (`rope_type`, or the older key `type`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    /// `linear` (position interpolation): every frequency divided by `factor`.
    Linear { factor: f64 },
    /// `dynamic` (NTK): θ grows with the sequence once it passes `max_position_embeddings`.
    /// Sequences never pass it here (longer ones are refused), and below it transformers uses
    /// the unscaled frequencies, so this computes exactly what the unscaled RoPE does.
    Dynamic { factor: f64 },
    /// `llama3` (Llama 3.1/3.2): low frequencies divided by `factor`, high ones kept, the band
    /// between interpolated smoothly (`_compute_llama3_parameters`).
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
}

/// A `rope_scaling` that cannot be used: the field (relative to `rope_scaling`) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeScalingIssue {
    pub field: String,
    pub reason: String,
}

fn issue(field: &str, reason: impl Into<String>) -> RopeScalingIssue {
    RopeScalingIssue {
        field: format!("rope_scaling.{field}"),
        reason: reason.into(),
    }
}

impl RopeScaling {
    /// Parses a `rope_scaling` object; `None` for `null`, a missing object or `rope_type`
    /// `default`. Types that change the attention itself (`yarn`, `longrope`, …) are refused.
    pub fn from_hf_json(v: Option<&Value>) -> Result<Option<Self>, RopeScalingIssue> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let obj = v
            .as_object()
            .ok_or_else(|| issue("", "expected an object or null"))?;
        let kind = obj
            .get("rope_type")
            .or_else(|| obj.get("type"))
            .and_then(Value::as_str)
            .ok_or_else(|| issue("rope_type", "missing (or not a string)"))?;
        let num = |field: &str| -> Result<f64, RopeScalingIssue> {
            obj.get(field)
                .and_then(Value::as_f64)
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| issue(field, "expected a finite number > 0"))
        };
        let scaling = match kind {
            "default" => return Ok(None),
            "linear" => Self::Linear {
                factor: num("factor")?,
            },
            "dynamic" => Self::Dynamic {
                factor: num("factor")?,
            },
            "llama3" => {
                let original = obj
                    .get("original_max_position_embeddings")
                    .and_then(Value::as_u64)
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        issue(
                            "original_max_position_embeddings",
                            "expected an integer > 0",
                        )
                    })?;
                let (low, high) = (num("low_freq_factor")?, num("high_freq_factor")?);
                if low >= high {
                    return Err(issue(
                        "high_freq_factor",
                        format!("{high} must exceed low_freq_factor {low}"),
                    ));
                }
                Self::Llama3 {
                    factor: num("factor")?,
                    low_freq_factor: low,
                    high_freq_factor: high,
                    original_max_position_embeddings: original,
                }
            }
            other => {
                return Err(issue(
                    "rope_type",
                    format!("`{other}` is not supported (default, linear, dynamic and llama3 are)"),
                ));
            }
        };
        Ok(Some(scaling))
    }

    /// The `rope_scaling` object transformers writes for this scaling.
    pub fn to_hf_json(&self) -> Value {
        match self {
            Self::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
            Self::Dynamic { factor } => json!({"rope_type": "dynamic", "factor": factor}),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            }),
        }
    }

    /// llama.cpp's per-frequency divisors for this scaling (the `rope_freqs` tensor its
    /// converter writes for `llama3`): `inv_freq_scaled[i] = inv_freq[i] / divisors[i]`.
    pub fn frequency_divisors(&self, head_dim: usize, theta: f64) -> Vec<f64> {
        unscaled_inv_freq(head_dim, theta)
            .iter()
            .zip(self.scaled(head_dim, theta))
            .map(|(f, s)| f / s)
            .collect()
    }

    fn scaled(&self, head_dim: usize, theta: f64) -> Vec<f64> {
        let base = unscaled_inv_freq(head_dim, theta);
        match *self {
            Self::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            Self::Dynamic { .. } => base,
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let old = original_max_position_embeddings as f64;
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}

/// `θ^(-2i/d)` for `i < d/2`.
fn unscaled_inv_freq(head_dim: usize, theta: f64) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64))
        .collect()
}

/// The inverse frequencies of a RoPE with base `theta` over `head_dim`, scaled if asked.
pub fn inv_freq(head_dim: usize, theta: f64, scaling: Option<&RopeScaling>) -> Vec<f32> {
    let f = match scaling {
        Some(s) => s.scaled(head_dim, theta),
        None => unscaled_inv_freq(head_dim, theta),
    };
    f.into_iter().map(|x| x as f32).collect()
}

/// RoPE tables `cos`, `sin`: `[B, 1, S, head_dim]`, shared by every layer of one forward.
pub struct Rope {
    cos: Tensor<4>,
    sin: Tensor<4>,
}

impl Rope {
    /// HF `LlamaRotaryEmbedding` without scaling: angles `pos · θ^(-2i/d)`.
    pub fn new(position_ids: Tensor<2, Int>, head_dim: usize, theta: f64) -> Self {
        Self::from_inv_freq(position_ids, &inv_freq(head_dim, theta, None))
    }

    /// Angles `pos · inv_freq[i]`, duplicated over both halves of the head.
    pub fn from_inv_freq(position_ids: Tensor<2, Int>, inv_freq: &[f32]) -> Self {
        let device = position_ids.device();
        let [b, s] = position_ids.dims();
        let half = inv_freq.len();
        let inv = Tensor::<3>::from_data(TensorData::new(inv_freq.to_vec(), [1, 1, half]), &device);
        let freqs = position_ids.float().reshape([b, s, 1]) * inv;
        let emb = Tensor::cat(vec![freqs.clone(), freqs], 2).reshape([b, 1, s, 2 * half]);
        Self {
            cos: emb.clone().cos(),
            sin: emb.sin(),
        }
    }

    /// `x·cos + rotate_half(x)·sin` for `x`: `[B, heads, S, head_dim]`.
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let d = x.dims()[3];
        let x1 = x.clone().narrow(3, 0, d / 2);
        let x2 = x.clone().narrow(3, d / 2, d / 2);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x * self.cos.clone() + rotated * self.sin.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama3() -> RopeScaling {
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        }
    }

    #[test]
    fn llama3_keeps_high_frequencies_and_divides_low_ones() {
        // Hand-computed bands for Llama 3.2's values (θ = 500000, d = 64): wavelengths below
        // 8192/4 = 2048 keep their frequency; above 8192 they are divided by 8.
        let (d, theta) = (64, 500000.0);
        let base = unscaled_inv_freq(d, theta);
        let scaled = inv_freq(d, theta, Some(&llama3()));
        for (f, s) in base.iter().zip(&scaled) {
            let wavelen = 2.0 * std::f64::consts::PI / f;
            let s = *s as f64;
            if wavelen < 2048.0 {
                assert_eq!(s, *f as f32 as f64);
            } else if wavelen > 8192.0 {
                assert!((s - f / 8.0).abs() <= 1e-7 * f, "{s} vs {}", f / 8.0);
            } else {
                assert!(s < *f && s > f / 8.0, "smoothed band must lie between");
            }
        }
    }

    #[test]
    fn divisors_are_the_ratio_llama_cpp_stores() {
        let div = llama3().frequency_divisors(64, 500000.0);
        assert_eq!(div[0], 1.0);
        assert!((div[31] - 8.0).abs() < 1e-12);
    }

    #[test]
    fn parses_both_key_spellings_and_refuses_unknown_types() {
        let v = json!({"type": "linear", "factor": 2.0});
        assert_eq!(
            RopeScaling::from_hf_json(Some(&v)).unwrap(),
            Some(RopeScaling::Linear { factor: 2.0 })
        );
        let v = json!({"rope_type": "default"});
        assert_eq!(RopeScaling::from_hf_json(Some(&v)).unwrap(), None);
        let v = json!({"rope_type": "yarn", "factor": 4.0});
        let e = RopeScaling::from_hf_json(Some(&v)).unwrap_err();
        assert_eq!(e.field, "rope_scaling.rope_type");
        assert!(e.reason.contains("yarn"));
        let v = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
            "high_freq_factor": 1.0, "original_max_position_embeddings": 8192});
        let e = RopeScaling::from_hf_json(Some(&v)).unwrap_err();
        assert_eq!(e.field, "rope_scaling.high_freq_factor");
        let round = llama3().to_hf_json();
        assert_eq!(
            RopeScaling::from_hf_json(Some(&round)).unwrap(),
            Some(llama3())
        );
    }
}
