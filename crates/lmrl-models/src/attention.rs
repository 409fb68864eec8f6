//! Scaled dot-product attention shared by GPT-2 and Llama.
//!
//! Attention is a pair of batched matmuls per layer. Grouped-query attention is computed without
//! repeating key/value heads: the `G = heads / kv_heads` query heads that share one key/value
//! head are stacked along the sequence axis, so `[B, KV, G·S, D] @ [B, KV, D, T]` does the work
//! of HF's `repeat_kv` + matmul with no copy of K or V.
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Added to the scores of masked (key) positions. Large and negative but finite, so a query row
/// whose keys are all masked (a left-pad query) gives a uniform softmax instead of NaN.
pub const MASK_VALUE: f32 = -1.0e30;

/// Builds the additive attention bias `[B, 1, S, T]` (T = past + S) once per forward.
///
/// Key `j` is visible to query `i` when `attention_mask[b, j] == 1` and `j <= past + i`
/// (causal order over cache slots); masked pairs get [`MASK_VALUE`], visible pairs 0.
pub fn attention_bias(attention_mask: Tensor<2, Int>, past: usize, seq: usize) -> Tensor<4> {
    let device = attention_mask.device();
    let [batch, total] = attention_mask.dims();
    let keys = attention_mask.float().reshape([batch, 1, 1, total]);
    let causal = causal_visibility(past, seq, total, &device);
    (keys * causal).sub_scalar(1.0).mul_scalar(-MASK_VALUE)
}

/// `[1, 1, S, T]` with 1 where key slot `j <= past + i`, else 0; built on the host (no sync).
fn causal_visibility(past: usize, seq: usize, total: usize, device: &Device) -> Tensor<4> {
    let mut data = vec![0.0f32; seq * total];
    for i in 0..seq {
        let visible = (past + i + 1).min(total);
        data[i * total..i * total + visible].fill(1.0);
    }
    Tensor::from_data(TensorData::new(data, [1, 1, seq, total]), device)
}

/// Splits `[B, S, H·D]` into heads `[B, H, S, D]`.
pub fn split_heads(x: Tensor<3>, heads: usize) -> Tensor<4> {
    let [b, s, hd] = x.dims();
    x.reshape([b, s, heads, hd / heads]).swap_dims(1, 2)
}

/// Softmax over the last dimension: on the CPU backend one fused pass with a hand-written
/// backward `p·(g − Σ p·g)` (`crate::fused`; burn's composite records five ops under autodiff),
/// elsewhere burn's `softmax`.
fn softmax_last<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if crate::fused::takes(&x) {
        return crate::fused::softmax(x);
    }
    softmax(x, D - 1)
}

/// Softmax attention `softmax(q·kᵀ/√D + bias)·v` (HF `eager_attention_forward`).
///
/// `q`: `[B, H, S, D]`; `k`, `v`: `[B, KV, T, D]` with `H = G·KV` (query head `h` uses key/value
/// head `h / G`, as HF `repeat_kv`); `bias`: `[B, 1, S, T]`. Returns `[B, S, H·D]`.
pub fn attend(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, bias: Tensor<4>) -> Tensor<3> {
    let [b, h, s, d] = q.dims();
    let [_, kv, t, _] = k.dims();
    let g = h / kv;
    let q = q
        .mul_scalar(1.0 / (d as f64).sqrt())
        .reshape([b, kv, g * s, d]);
    let scores = q.matmul(k.swap_dims(2, 3)).reshape([b, kv, g, s, t]);
    let scores = scores + bias.reshape([b, 1, 1, s, t]);
    let probs = softmax_last(scores).reshape([b, kv, g * s, t]);
    let ctx = probs.matmul(v).reshape([b, h, s, d]);
    ctx.swap_dims(1, 2).reshape([b, s, h * d])
}
