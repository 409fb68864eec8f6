//! ggml tensor types and their conversion to f32.
//!
//! Block formats (ggml-quants.c):
//! - Q4_0: f16 scale `d`, 16 bytes of nibbles; `w = d·(q − 8)`.
//! - Q4_1: f16 scale `d`, f16 minimum `m`, 16 bytes of nibbles; `w = d·q + m`.
//! - Q8_0: f16 scale `d`, 32 × i8; `w = d·q`.
//!
//! In the 4-bit formats the low nibble of byte `j` is element `j` and the high nibble is
//! element `j + 16` of the 32-element block.
use half::{bf16, f16};

/// A ggml tensor type. The ones this reader dequantises have their own variant; the rest are
/// kept by number so that the error can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    BF16,
    Other(u32),
}

impl GgmlType {
    pub fn from_u32(v: u32) -> Self {
        match v {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            30 => GgmlType::BF16,
            other => GgmlType::Other(other),
        }
    }

    /// The number ggml uses for the type (`enum ggml_type`).
    pub fn to_u32(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q8_0 => 8,
            GgmlType::BF16 => 30,
            GgmlType::Other(v) => v,
        }
    }

    /// ggml's name of the type (`ggml_type_name`), including the types that are not supported.
    pub fn name(self) -> String {
        let known = match self.to_u32() {
            0 => "F32",
            1 => "F16",
            2 => "Q4_0",
            3 => "Q4_1",
            6 => "Q5_0",
            7 => "Q5_1",
            8 => "Q8_0",
            9 => "Q8_1",
            10 => "Q2_K",
            11 => "Q3_K",
            12 => "Q4_K",
            13 => "Q5_K",
            14 => "Q6_K",
            15 => "Q8_K",
            16 => "IQ2_XXS",
            17 => "IQ2_XS",
            18 => "IQ3_XXS",
            19 => "IQ1_S",
            20 => "IQ4_NL",
            21 => "IQ3_S",
            22 => "IQ2_S",
            23 => "IQ4_XS",
            24 => "I8",
            25 => "I16",
            26 => "I32",
            27 => "I64",
            28 => "F64",
            29 => "IQ1_M",
            30 => "BF16",
            34 => "TQ1_0",
            35 => "TQ2_0",
            39 => "MXFP4",
            _ => "",
        };
        if known.is_empty() {
            format!("ggml type {}", self.to_u32())
        } else {
            format!("{known} (ggml type {})", self.to_u32())
        }
    }

    /// (elements per block, bytes per block) for the supported types.
    pub fn block_layout(self) -> Option<(usize, usize)> {
        match self {
            GgmlType::F32 => Some((1, 4)),
            GgmlType::F16 | GgmlType::BF16 => Some((1, 2)),
            GgmlType::Q4_0 => Some((32, 18)),
            GgmlType::Q4_1 => Some((32, 20)),
            GgmlType::Q8_0 => Some((32, 34)),
            GgmlType::Other(_) => None,
        }
    }

    /// Bytes taken by `n` elements, or `None` for an unsupported type, an `n` that is not a
    /// whole number of blocks, or a size that does not fit in `u64`.
    pub fn byte_size(self, n: u64) -> Option<u64> {
        let (elems, bytes_per) = self.block_layout()?;
        let elems = elems as u64;
        n.is_multiple_of(elems)
            .then(|| (n / elems).checked_mul(bytes_per as u64))
            .flatten()
    }
}

/// Dequantises `n` elements of type `ty` from `bytes` (which must be exactly their size).
/// Returns `None` for types this reader does not support or a byte count that does not match.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Option<Vec<f32>> {
    let (_, bytes_per) = ty.block_layout()?;
    // Checking the size first also bounds the allocation below by the bytes actually given.
    if ty.byte_size(n as u64)? != bytes.len() as u64 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    let f16_at = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    match ty {
        GgmlType::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        GgmlType::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        GgmlType::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        GgmlType::Q4_0 => {
            for blk in bytes.chunks_exact(bytes_per) {
                let d = f16_at(blk, 0);
                let qs = &blk[2..18];
                out.extend(qs.iter().map(|&q| d * ((q & 0x0f) as i32 - 8) as f32));
                out.extend(qs.iter().map(|&q| d * ((q >> 4) as i32 - 8) as f32));
            }
        }
        GgmlType::Q4_1 => {
            for blk in bytes.chunks_exact(bytes_per) {
                let d = f16_at(blk, 0);
                let m = f16_at(blk, 2);
                let qs = &blk[4..20];
                out.extend(qs.iter().map(|&q| d * (q & 0x0f) as f32 + m));
                out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
            }
        }
        GgmlType::Q8_0 => {
            for blk in bytes.chunks_exact(bytes_per) {
                let d = f16_at(blk, 0);
                out.extend(blk[2..34].iter().map(|&q| d * (q as i8) as f32));
            }
        }
        GgmlType::Other(_) => return None,
    }
    Some(out)
}
