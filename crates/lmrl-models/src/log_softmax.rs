//! Log-probabilities over the vocabulary and their statistics: the log-softmax of every
//! response token's logits (`[B·T, V]` rows, V = 50257 for GPT-2 and 49152 for SmolLM2: the
//! largest element-wise work of a PPO or GRPO step), the full-vocabulary KL between two such
//! rows and their entropy.
//!
//! On burn's CPU backend (this crate's `flex` feature) each is one fused, row-parallel kernel,
//! and the log-softmax has a hand-written backward, `∂L/∂x = g − softmax(x)·Σ_v g` with
//! `softmax(x) = exp(output)`, so the output is the only tensor kept for it (`crate::fused`).
//! Elsewhere burn's composite computes the same function.
use burn::tensor::activation;
use burn::tensor::{Int, Tensor};

/// `log_softmax(x)` along the last dimension: `x_v − ln Σ_u exp(x_u)` for each row, numerically
/// stable (the row maximum is subtracted first). Differentiable; see the module docs for where
/// the fused kernel runs.
pub fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if crate::fused::takes(&x) {
        return crate::fused::log_softmax(x);
    }
    activation::log_softmax(x, D - 1)
}

/// The entry of each row of `x` `[N, V]` at its column in `ids` `[N, 1]`: `[N, 1]`, i.e.
/// `x.gather(1, ids)` (the log-probability of each row's token, from a [`log_softmax`]).
/// Differentiable. On burn's CPU backend its backward writes the `N` gradient entries into one
/// zeroed `[N, V]` allocation (`crate::fused`) instead of burn's zeroed tensor and scatter.
pub fn gather_columns(x: Tensor<2>, ids: Tensor<2, Int>) -> Tensor<2> {
    #[cfg(feature = "flex")]
    if crate::fused::takes(&x) && ids.dims() == [x.dims()[0], 1] {
        return crate::fused::gather_columns(x, ids);
    }
    x.gather(1, ids)
}

/// `Σ_v exp(a_v)·(a_v − b_v)` for each row of two log-probability tensors `[N, V]`, i.e.
/// KL(p‖q) for `a = log p`, `b = log q`: TRL's `"full"` KL penalty per token, `[N]`. A statistic:
/// no gradient flows through it (inputs on an autodiff device are read as constants).
pub fn kl_rows(log_p: Tensor<2>, log_q: Tensor<2>) -> Tensor<1> {
    let (log_p, log_q) = (log_p.detach(), log_q.detach());
    #[cfg(feature = "flex")]
    if crate::fused::takes(&log_p) && crate::fused::takes(&log_q) && log_p.dims() == log_q.dims() {
        return crate::fused::kl_rows(log_p, log_q);
    }
    let n = log_p.dims()[0];
    zero_where_impossible(log_p.clone(), log_p - log_q)
        .sum_dim(1)
        .reshape([n])
}

/// `exp(log_p)·x`, with the terms of zero-probability entries 0 (as `p·ln p → 0`) instead of
/// the NaN of `0·(−∞)`: what the fused kernels compute.
fn zero_where_impossible(log_p: Tensor<2>, x: Tensor<2>) -> Tensor<2> {
    let p = log_p.exp();
    let impossible = p.clone().equal_elem(0.0);
    (p * x).mask_fill(impossible, 0.0)
}

/// `−Σ_v exp(a_v)·a_v` for each row of a log-probability tensor `[N, V]`: the entropy of each
/// row's distribution, `[N]`. A statistic, without gradient, as [`kl_rows`].
pub fn entropy_rows(log_p: Tensor<2>) -> Tensor<1> {
    let log_p = log_p.detach();
    #[cfg(feature = "flex")]
    if crate::fused::takes(&log_p) {
        return crate::fused::entropy_rows(log_p);
    }
    let n = log_p.dims()[0];
    zero_where_impossible(log_p.clone(), log_p)
        .sum_dim(1)
        .neg()
        .reshape([n])
}
