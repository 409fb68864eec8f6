//! Host read-back and finiteness checks shared by the PPO and CORY code.

use burn::tensor::Tensor;
use lmrl_models::CausalLm;

use crate::error::{Result, RlError};

/// Checks that `responses` pairs one non-empty response with each query; `what` names the
/// step in the error of an empty one.
pub fn check_pairs(queries: &[Vec<u32>], responses: &[Vec<u32>], what: &str) -> Result<()> {
    if queries.len() != responses.len() {
        return Err(RlError::Shape {
            what: "responses".into(),
            expected: vec![queries.len()],
            got: vec![responses.len()],
        });
    }
    if let Some(i) = responses.iter().position(Vec::is_empty) {
        return Err(RlError::EmptyResponse {
            what: what.into(),
            sample: i,
        });
    }
    Ok(())
}

/// Checks on the host that each query followed by its response fits `model` (ids below its
/// vocabulary, length within its context) and that `pad_id`, which fills the shorter rows of a
/// batch, is one of its tokens: once this passes, no forward pass over these rows indexes out
/// of range, so the batches need no check of their own.
pub fn check_fits<M: CausalLm>(
    model: &M,
    queries: &[Vec<u32>],
    responses: &[Vec<u32>],
    pad_id: u32,
) -> Result<()> {
    let joined: Vec<Vec<u32>> = queries
        .iter()
        .zip(responses)
        .map(|(q, y)| q.iter().chain(y).copied().collect())
        .collect();
    model.validate_ids(&joined, 0)?;
    if pad_id as usize >= model.vocab_size() {
        return Err(RlError::Config {
            field: "pad_id".into(),
            reason: format!(
                "{pad_id} (the policy's end-of-sequence id, which pads batches) is outside a \
                 vocabulary of {}",
                model.vocab_size()
            ),
        });
    }
    Ok(())
}

/// Reads a float tensor back to the host as `f32`, naming `what` on failure.
pub fn to_vec<const D: usize>(what: &str, t: Tensor<D>) -> Result<Vec<f32>> {
    t.try_into_vec_as::<f32>().map_err(|e| RlError::Read {
        what: what.to_string(),
        message: format!("{e:?}"),
    })
}

/// Reads a one-element float tensor back to the host.
pub fn to_scalar(what: &str, t: Tensor<1>) -> Result<f32> {
    let v = to_vec(what, t)?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(RlError::Shape {
            what: what.to_string(),
            expected: vec![1],
            got: vec![v.len()],
        }),
    }
}

/// Describes a flat index of a tensor of `dims` as `sample i, token j[, vocab k]`.
pub fn location(dims: &[usize], flat: usize) -> String {
    let mut idx = vec![0usize; dims.len()];
    let mut rest = flat;
    for (k, d) in dims.iter().enumerate().rev() {
        let d = (*d).max(1);
        idx[k] = rest % d;
        rest /= d;
    }
    match idx.as_slice() {
        [] => "scalar".to_string(),
        [i] => format!("element {i}"),
        [b, t] => format!("sample {b}, token {t}"),
        [b, t, v] => format!("sample {b}, token {t}, vocab {v}"),
        more => format!("index {more:?}"),
    }
}

/// Fails with [`RlError::NonFinite`] naming the first NaN/±Inf in `values` (laid out as `dims`).
pub fn check_finite_host(what: &str, dims: &[usize], values: &[f32]) -> Result<()> {
    match values.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(RlError::NonFinite {
            what: what.to_string(),
            location: location(dims, i),
            value: values[i],
        }),
    }
}

/// Fails with [`RlError::NonFinite`] if `t` holds a NaN or ±Inf. One device reduction and one
/// scalar read; the full tensor is read back only to locate the culprit.
pub fn check_finite<const D: usize>(what: &str, t: &Tensor<D>) -> Result<()> {
    let all_finite = t
        .clone()
        .is_finite()
        .all()
        .try_into_scalar::<bool>()
        .map_err(|e| RlError::Read {
            what: what.to_string(),
            message: format!("{e:?}"),
        })?;
    if all_finite {
        return Ok(());
    }
    let dims = t.dims().to_vec();
    let values = to_vec(what, t.clone())?;
    check_finite_host(what, &dims, &values)?;
    // The device said "not finite" but the host copy is finite: report it rather than hide it.
    Err(RlError::NonFinite {
        what: what.to_string(),
        location: "unknown (device and host disagree)".to_string(),
        value: f32::NAN,
    })
}

/// Checks that a tensor has the expected shape.
pub fn check_shape<const D: usize>(what: &str, t: &Tensor<D>, expected: &[usize]) -> Result<()> {
    let got = t.dims().to_vec();
    if got != expected {
        return Err(RlError::Shape {
            what: what.to_string(),
            expected: expected.to_vec(),
            got,
        });
    }
    Ok(())
}

/// SplitMix64-style mixing of several integers into one well-spread 64-bit seed. Streams of
/// random numbers derived as `StdRng::seed_from_u64(mix_seed(&[seed, step]))` need no saved
/// generator state to continue exactly after a restart.
pub fn mix_seed(parts: &[u64]) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15;
    for &p in parts {
        h ^= p.wrapping_add(0x9E37_79B9_7F4A_7C15);
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
        h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
    }
    h
}
