//! The response-token mask of a batch, kept on the device (for the masked means) and on the
//! host (for the per-row bookkeeping that TRL does with `mask.nonzero()`), so validation costs no
//! device round trip.

use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{Result, RlError};
use crate::util::to_vec;

/// A `[B, T]` 0/1 mask over response positions (TRL's `masks` from `batched_forward_pass`).
#[derive(Debug, Clone)]
pub struct ResponseMask {
    tensor: Tensor<2>,
    host: Vec<f32>,
    batch: usize,
    len: usize,
}

impl ResponseMask {
    /// Builds the mask from host rows of 0/1 values (all rows of equal length).
    pub fn from_rows(rows: &[Vec<f32>], device: &Device) -> Result<Self> {
        let batch = rows.len();
        let len = rows.first().map_or(0, Vec::len);
        let mut host = Vec::with_capacity(batch * len);
        for (i, r) in rows.iter().enumerate() {
            if r.len() != len {
                return Err(RlError::Shape {
                    what: format!("mask row {i}"),
                    expected: vec![len],
                    got: vec![r.len()],
                });
            }
            host.extend_from_slice(r);
        }
        Self::from_host(host, batch, len, device)
    }

    /// Builds the mask from a flat row-major host vector of shape `[batch, len]`.
    pub fn from_host(host: Vec<f32>, batch: usize, len: usize, device: &Device) -> Result<Self> {
        if host.len() != batch * len {
            return Err(RlError::Shape {
                what: "mask".into(),
                expected: vec![batch, len],
                got: vec![host.len()],
            });
        }
        if let Some(i) = host.iter().position(|&m| m != 0.0 && m != 1.0) {
            return Err(RlError::Config {
                field: "mask".into(),
                reason: format!(
                    "mask must hold 0/1, found {} at {}",
                    host[i],
                    crate::util::location(&[batch, len], i)
                ),
            });
        }
        let tensor = Tensor::<2>::from_data(TensorData::new(host.clone(), [batch, len]), device);
        Ok(Self {
            tensor,
            host,
            batch,
            len,
        })
    }

    /// Reads a device mask back to the host (one read).
    pub fn from_tensor(mask: Tensor<2>) -> Result<Self> {
        let [batch, len] = mask.dims();
        let device = mask.device();
        let host = to_vec("mask", mask)?;
        Self::from_host(host, batch, len, &device)
    }

    /// Mask of the response lengths: row `i` has `lengths[i]` leading ones, then zeros.
    pub fn from_lengths(lengths: &[usize], len: usize, device: &Device) -> Result<Self> {
        let mut host = vec![0.0f32; lengths.len() * len];
        for (i, &l) in lengths.iter().enumerate() {
            if l > len {
                return Err(RlError::Shape {
                    what: format!("response length of sample {i}"),
                    expected: vec![len],
                    got: vec![l],
                });
            }
            host[i * len..i * len + l].fill(1.0);
        }
        Self::from_host(host, lengths.len(), len, device)
    }

    /// The mask as a float `[B, T]` tensor.
    pub fn tensor(&self) -> Tensor<2> {
        self.tensor.clone()
    }

    /// The host copy, row-major `[B, T]`.
    pub fn host(&self) -> &[f32] {
        &self.host
    }

    /// `[B, T]`.
    pub fn dims(&self) -> [usize; 2] {
        [self.batch, self.len]
    }

    /// Number of unmasked tokens in the whole batch (`mask.sum()`).
    pub fn total(&self) -> usize {
        self.host.iter().filter(|&&m| m != 0.0).count()
    }

    /// Number of unmasked tokens of row `i`.
    pub fn row_count(&self, i: usize) -> usize {
        self.host[i * self.len..(i + 1) * self.len]
            .iter()
            .filter(|&&m| m != 0.0)
            .count()
    }

    /// Index of the last unmasked token of each row (TRL: `mask.nonzero()[-1]`); a row without
    /// any is an [`RlError::EmptyResponse`] for `what`.
    pub fn last_indices(&self, what: &str) -> Result<Vec<usize>> {
        (0..self.batch)
            .map(|i| {
                self.host[i * self.len..(i + 1) * self.len]
                    .iter()
                    .rposition(|&m| m != 0.0)
                    .ok_or_else(|| RlError::EmptyResponse {
                        what: what.to_string(),
                        sample: i,
                    })
            })
            .collect()
    }

    /// The rows `indices` (a minibatch), in that order.
    pub fn select(&self, indices: &[usize], device: &Device) -> Result<Self> {
        let mut host = Vec::with_capacity(indices.len() * self.len);
        for &i in indices {
            if i >= self.batch {
                return Err(RlError::Shape {
                    what: "minibatch index into mask".into(),
                    expected: vec![self.batch],
                    got: vec![i],
                });
            }
            host.extend_from_slice(&self.host[i * self.len..(i + 1) * self.len]);
        }
        Self::from_host(host, indices.len(), self.len, device)
    }

    /// Fails with [`RlError::TooFewTokens`] unless at least `needed` tokens are unmasked.
    pub fn require(&self, what: &str, needed: usize) -> Result<usize> {
        let found = self.total();
        if found < needed {
            return Err(RlError::TooFewTokens {
                what: what.to_string(),
                needed,
                found,
            });
        }
        Ok(found)
    }
}
