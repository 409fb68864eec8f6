//! Per-token KL penalty estimators: TRL 0.11 `PPOTrainer._kl_penalty` (`config.kl_penalty`).
//!
//! All four return a `[B, T]` tensor of per-token penalties KL_t; masking is left to the caller
//! (TRL computes them for every position and masks later, in `record_step_stats` and through the
//! masked GAE).

use burn::tensor::Tensor;
use lmrl_models::{kl_rows, log_softmax};
use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::util::check_shape;

/// Which KL estimator shapes the reward (TRL `PPOConfig.kl_penalty`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum KlPenalty {
    /// `"kl"`: the sampled-token estimator ℓ_t − ℓ^ref_t (Schulman's k1).
    Kl,
    /// `"abs"`: |ℓ_t − ℓ^ref_t|.
    Abs,
    /// `"mse"`: ½(ℓ_t − ℓ^ref_t)² (k2).
    Mse,
    /// `"full"`: the exact KL(π_θ(·|h_t) ‖ π_ref(·|h_t)) over the whole vocabulary. CORY and
    /// this project's default.
    #[default]
    Full,
}

impl KlPenalty {
    /// Whether this estimator needs the full `[B, T, V]` log-softmax of both models.
    pub fn needs_full_distribution(self) -> bool {
        matches!(self, KlPenalty::Full)
    }
}

/// Log-probabilities of one model on the response positions of a batch.
#[derive(Debug, Clone)]
pub struct TokenLogProbs {
    /// `[B, T]`: log π(y_t | h_t) of the sampled tokens (TRL `all_logprobs`).
    pub gathered: Tensor<2>,
    /// `[B, T, V]`: the full log-softmax (TRL `logprobs_from_logits(logits, None, gather=False)`),
    /// needed only for [`KlPenalty::Full`].
    pub full: Option<Tensor<3>>,
}

/// TRL `logprobs_from_logits(logits, labels)`: log-softmax over the vocabulary, then the entry of
/// each label. `logits` `[B, T, V]`, `labels` `[B, T]` → `[B, T]`.
pub fn logprobs_from_logits(logits: Tensor<3>, labels: Tensor<2, burn::tensor::Int>) -> Tensor<2> {
    gather_logprobs(log_softmax(logits), labels)
}

/// Gathers the log-probabilities of `labels` from a `[B, T, V]` log-softmax.
pub fn gather_logprobs(log_softmax: Tensor<3>, labels: Tensor<2, burn::tensor::Int>) -> Tensor<2> {
    log_softmax
        .gather(2, labels.unsqueeze_dim::<3>(2))
        .squeeze_dim::<2>(2)
}

/// `kl_penalty="kl"`: `logprob − ref_logprob`.
pub fn kl_k1(logprobs: Tensor<2>, ref_logprobs: Tensor<2>) -> Tensor<2> {
    logprobs - ref_logprobs
}

/// `kl_penalty="abs"`: `(logprob − ref_logprob).abs()`.
pub fn kl_abs(logprobs: Tensor<2>, ref_logprobs: Tensor<2>) -> Tensor<2> {
    (logprobs - ref_logprobs).abs()
}

/// `kl_penalty="mse"`: `0.5·(logprob − ref_logprob)²`.
pub fn kl_mse(logprobs: Tensor<2>, ref_logprobs: Tensor<2>) -> Tensor<2> {
    (logprobs - ref_logprobs).square().mul_scalar(0.5)
}

/// `kl_penalty="full"`: TRL's `F.kl_div(ref_logprob, logprob, log_target=True).sum(-1)`, i.e.
/// KL_t = Σ_v p_θ(v)·(log p_θ(v) − log p_ref(v)) from two `[B, T, V]` log-softmax tensors
/// (the per-token KL of the reward shaping; `docs/cory.md`).
pub fn kl_full(log_softmax: Tensor<3>, ref_log_softmax: Tensor<3>) -> Tensor<2> {
    let [b, t, v] = log_softmax.dims();
    kl_rows(
        log_softmax.reshape([b * t, v]),
        ref_log_softmax.reshape([b * t, v]),
    )
    .reshape([b, t])
}

/// Dispatches on `kind` (TRL `PPOTrainer._kl_penalty`). For [`KlPenalty::Full`] both inputs must
/// carry their full log-softmax.
pub fn kl_penalty(
    kind: KlPenalty,
    policy: &TokenLogProbs,
    reference: &TokenLogProbs,
) -> Result<Tensor<2>> {
    let dims = policy.gathered.dims();
    check_shape("ref_logprobs", &reference.gathered, &dims)?;
    Ok(match kind {
        KlPenalty::Kl => kl_k1(policy.gathered.clone(), reference.gathered.clone()),
        KlPenalty::Abs => kl_abs(policy.gathered.clone(), reference.gathered.clone()),
        KlPenalty::Mse => kl_mse(policy.gathered.clone(), reference.gathered.clone()),
        KlPenalty::Full => {
            let (Some(p), Some(r)) = (&policy.full, &reference.full) else {
                return Err(RlError::Config {
                    field: "kl_penalty".into(),
                    reason: "\"full\" needs the full log-softmax of policy and reference".into(),
                });
            };
            let pd = p.dims();
            if pd[0] != dims[0] || pd[1] != dims[1] {
                return Err(RlError::Shape {
                    what: "policy log_softmax".into(),
                    expected: vec![dims[0], dims[1], pd[2]],
                    got: pd.to_vec(),
                });
            }
            check_shape("ref log_softmax", r, &pd)?;
            kl_full(p.clone(), r.clone())
        }
    })
}
