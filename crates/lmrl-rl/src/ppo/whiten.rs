//! Masked statistics and whitening: TRL 0.11 `trl.core.masked_mean`, `masked_var`,
//! `masked_whiten` and `whiten`.

use burn::tensor::Tensor;

use crate::error::{Result, RlError};
use crate::ppo::mask::ResponseMask;

/// The `1e-8` TRL adds to the variance before `rsqrt` in `whiten` / `masked_whiten`.
pub const WHITEN_EPS: f32 = 1e-8;

/// TRL `masked_mean(values, mask)`: `(values·mask).sum() / mask.sum()`, a token-weighted mean
/// over the whole batch. An all-masked batch is an [`RlError::TooFewTokens`] (TRL would return
/// NaN from 0/0).
pub fn masked_mean(what: &str, values: Tensor<2>, mask: &ResponseMask) -> Result<Tensor<1>> {
    let n = mask.require(what, 1)?;
    Ok((values * mask.tensor()).sum().div_scalar(n as f32))
}

/// TRL `masked_var(values, mask, unbiased)`: the masked mean of squared deviations from the
/// masked mean, times the Bessel correction `n/(n−1)` when `unbiased`. Fewer than two unmasked
/// tokens with `unbiased` is an [`RlError::TooFewTokens`] (TRL raises for zero and divides by zero
/// for one).
pub fn masked_var(
    what: &str,
    values: Tensor<2>,
    mask: &ResponseMask,
    unbiased: bool,
) -> Result<Tensor<1>> {
    let n = mask.require(what, if unbiased { 2 } else { 1 })?;
    let mean = masked_mean(what, values.clone(), mask)?;
    let centered = values - mean.unsqueeze::<2>();
    let variance = masked_mean(what, centered.square(), mask)?;
    if unbiased {
        let bessel = n as f32 / (n as f32 - 1.0);
        Ok(variance.mul_scalar(bessel))
    } else {
        Ok(variance)
    }
}

/// TRL `masked_whiten(values, mask, shift_mean)`: `(x − mean)·rsqrt(var_unbiased + 1e-8)`, with
/// mean and variance taken over unmasked tokens only; with `shift_mean = false` the mean is added
/// back. Masked positions are transformed too (TRL does not zero them), so callers must keep
/// masking downstream.
///
/// Zero variance is not an error: the `1e-8` keeps the result finite (≈0 for `shift_mean`),
/// which is TRL's own fallback.
pub fn masked_whiten(
    what: &str,
    values: Tensor<2>,
    mask: &ResponseMask,
    shift_mean: bool,
) -> Result<Tensor<2>> {
    let mean = masked_mean(what, values.clone(), mask)?;
    let var = masked_var(what, values.clone(), mask, true)?;
    let inv_std = var.add_scalar(WHITEN_EPS).sqrt().recip();
    let mean2 = mean.unsqueeze::<2>();
    let whitened = (values - mean2.clone()) * inv_std.unsqueeze::<2>();
    Ok(if shift_mean {
        whitened
    } else {
        whitened + mean2
    })
}

/// TRL `trl.core.whiten(values, shift_mean)`: whitening over every element (no mask), with the
/// unbiased `torch.var`. Needs at least two elements.
pub fn whiten<const D: usize>(
    what: &str,
    values: Tensor<D>,
    shift_mean: bool,
) -> Result<Tensor<D>> {
    let n = values.shape().num_elements();
    if n < 2 {
        return Err(RlError::TooFewTokens {
            what: what.to_string(),
            needed: 2,
            found: n,
        });
    }
    let flat: Tensor<1> = values.clone().flatten(0, D - 1);
    let mean = flat.clone().mean();
    let var = (flat - mean.clone())
        .square()
        .sum()
        .div_scalar(n as f32 - 1.0);
    let inv_std = var.add_scalar(WHITEN_EPS).sqrt().recip();
    let mean_d = mean.reshape([1; D]);
    let whitened = (values - mean_d.clone()) * inv_std.reshape([1; D]);
    Ok(if shift_mean {
        whitened
    } else {
        whitened + mean_d
    })
}
