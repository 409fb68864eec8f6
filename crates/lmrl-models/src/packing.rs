//! Right-padded batches computed on their real tokens only.
//!
//! A right-padded `[B, S]` batch of sequences of lengths `ℓ_b` holds `N = Σ ℓ_b` real tokens
//! and `B·S − N` padding. Every layer of a transformer but attention works position by
//! position, so those layers can run on the `N` real rows stacked (`[1, N, C]`, "packed") and
//! only attention needs the padded layout, which [`Packing::pad`] and [`Packing::pack`] move
//! between. The result is the padded forward's at every real position (padding is masked as a
//! key, and a padded query's output is never read), up to float rounding, at `N / (B·S)` of
//! the cost of the position-wise layers: for RL batches of prompts and sampled responses
//! of different lengths, a fifth to a third of the rows are padding.
use burn::tensor::{Device, Int, Tensor, TensorData};

/// How the real tokens of a right-padded `[B, S]` batch map to `N` packed rows: row `b`'s
/// tokens `0..ℓ_b` are packed rows `o_b..o_b + ℓ_b`, with `o_b = Σ_{b' < b} ℓ_b'`.
#[derive(Debug, Clone)]
pub struct Packing {
    lengths: Vec<usize>,
    seq: usize,
    /// `[B, S]` 1 on real tokens, 0 on padding.
    attention_mask: Tensor<2, Int>,
    /// `[B·S]` the packed row of each padded slot; padding reads row 0 (masked as a key, and
    /// its query's output is dropped by [`Packing::pack`]).
    to_padded: Tensor<1, Int>,
    /// `[N]` the padded slot `b·S + i` of each packed row.
    to_packed: Tensor<1, Int>,
}

impl Packing {
    /// The packing of sequences of `lengths` (each ≥ 1) right-padded to `seq` ≥ every length.
    pub fn new(lengths: &[usize], seq: usize, device: &Device) -> Self {
        let b = lengths.len();
        let mut mask = vec![0i64; b * seq];
        let mut to_padded = vec![0i64; b * seq];
        let mut to_packed = Vec::with_capacity(lengths.iter().sum());
        for (r, &len) in lengths.iter().enumerate() {
            for i in 0..len.min(seq) {
                mask[r * seq + i] = 1;
                to_padded[r * seq + i] = to_packed.len() as i64;
                to_packed.push((r * seq + i) as i64);
            }
        }
        let n = to_packed.len();
        Self {
            lengths: lengths.to_vec(),
            seq,
            attention_mask: Tensor::from_data(TensorData::new(mask, [b, seq]), device),
            to_padded: Tensor::from_data(TensorData::new(to_padded, [b * seq]), device),
            to_packed: Tensor::from_data(TensorData::new(to_packed, [n]), device),
        }
    }

    /// `N`, the number of real tokens.
    pub fn rows(&self) -> usize {
        self.to_packed.dims()[0]
    }

    /// `B`, the number of sequences.
    pub fn batch_size(&self) -> usize {
        self.lengths.len()
    }

    /// `S`, the padded length.
    pub fn seq_len(&self) -> usize {
        self.seq
    }

    /// The packed row of token `i` of sequence `b`.
    pub fn row(&self, b: usize, i: usize) -> usize {
        self.lengths[..b].iter().sum::<usize>() + i
    }

    /// `[B, S]` attention mask of the padded layout (1 on real tokens).
    pub fn attention_mask(&self) -> Tensor<2, Int> {
        self.attention_mask.clone()
    }

    /// `[1, N, C]` packed rows to the padded layout `[B, S, C]`.
    pub fn pad(&self, x: Tensor<3>) -> Tensor<3> {
        let c = x.dims()[2];
        x.reshape([self.rows(), c])
            .select(0, self.to_padded.clone())
            .reshape([self.batch_size(), self.seq, c])
    }

    /// `[1, N]` packed ids (or positions) to the padded layout `[B, S]`.
    pub fn pad_ints(&self, x: Tensor<2, Int>) -> Tensor<2, Int> {
        x.reshape([self.rows()])
            .select(0, self.to_padded.clone())
            .reshape([self.batch_size(), self.seq])
    }

    /// `[B, S, C]` in the padded layout to its real rows, `[1, N, C]`.
    pub fn pack(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, s, c] = x.dims();
        x.reshape([b * s, c])
            .select(0, self.to_packed.clone())
            .reshape([1, self.rows(), c])
    }
}

/// `x` in the padded layout: moved there from packed rows if `packing` is given, else as is.
pub(crate) fn padded(packing: Option<&Packing>, x: Tensor<3>) -> Tensor<3> {
    match packing {
        Some(p) => p.pad(x),
        None => x,
    }
}

/// `x` back to packed rows if `packing` is given, else as is.
pub(crate) fn packed(packing: Option<&Packing>, x: Tensor<3>) -> Tensor<3> {
    match packing {
        Some(p) => p.pack(x),
        None => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_and_pad_move_the_real_rows() {
        let device = Device::default();
        let p = Packing::new(&[2, 3, 1], 3, &device);
        assert_eq!((p.rows(), p.batch_size(), p.seq_len()), (6, 3, 3));
        assert_eq!(p.row(1, 2), 4);
        let packed = Tensor::<3>::from_data(
            TensorData::new((0..6).map(|v| v as f32).collect::<Vec<_>>(), [1, 6, 1]),
            &device,
        );
        let padded = p.pad(packed.clone());
        let v: Vec<f32> = padded.clone().into_data().try_to_vec::<f32>().unwrap();
        // Padding slots read row 0.
        assert_eq!(v, vec![0.0, 1.0, 0.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]);
        let back: Vec<f32> = p.pack(padded).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(back, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let mask: Vec<i64> = p.attention_mask().into_data().iter::<i64>().collect();
        assert_eq!(mask, vec![1, 1, 0, 1, 1, 1, 1, 0, 0]);
    }
}
