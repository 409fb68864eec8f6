//! ggml tensor types and their conversion to f32.
//!
//! Block formats (ggml-quants.c, `dequantize_row_*`), little-endian, fields in storage order:
//! - Q4_0 (32 elements, 18 bytes): f16 scale `d`, 16 bytes of nibbles; `w = d·(q − 8)`.
//! - Q4_1 (32 elements, 20 bytes): f16 scale `d`, f16 minimum `m`, 16 bytes of nibbles;
//!   `w = d·q + m`.
//! - Q8_0 (32 elements, 34 bytes): f16 scale `d`, 32 × i8; `w = d·q`.
//!
//! In the 4-bit formats the low nibble of byte `j` is element `j` and the high nibble is
//! element `j + 16` of the 32-element block.
//!
//! The K-quants pack 256 elements (`QK_K`) into a super-block with one or two f16 super-scales
//! and small per-sub-block scales, so that the scales cost few bits per weight. Element `e` of
//! a super-block lies in sub-block `e / 16` (Q2_K, Q3_K, Q6_K) or `e / 32` (Q4_K, Q5_K):
//! - Q2_K (84 bytes): `scales[16]`, `qs[64]`, f16 `d`, f16 `dmin`. Sub-block `s` has scale
//!   `scales[s] & 15` and minimum `scales[s] >> 4`; `q` is 2 bits;
//!   `w = (d·scale)·q − dmin·min`.
//! - Q3_K (110 bytes): `hmask[32]`, `qs[64]`, `scales[12]`, f16 `d`. `q` is the 2-bit field of
//!   `qs` minus 4 where its `hmask` bit is clear (−4..=3). The 16 scales are 6 bits: the low 4
//!   are nibble `s / 8` of `scales[s % 8]`, the high 2 are bits `2·(s / 4)` of
//!   `scales[8 + s % 4]`; `w = (d·(scale − 32))·q`.
//! - Q4_K (144 bytes): f16 `d`, f16 `dmin`, `scales[12]`, `qs[128]`. Eight 6-bit scales and
//!   eight 6-bit minimums (`get_scale_min_k4`): for `s < 4` the low 6 bits of `scales[s]` and
//!   `scales[s + 4]`; for `s ≥ 4` the nibbles of `scales[s + 4]` (low: scale, high: minimum)
//!   with the top 2 bits of `scales[s − 4]` and `scales[s]` above them. `q` is a nibble;
//!   `w = (d·scale)·q − dmin·min`.
//! - Q5_K (176 bytes): f16 `d`, f16 `dmin`, `scales[12]` as Q4_K, `qh[32]`, `qs[128]`; `q` is
//!   Q4_K's nibble plus 16 times a bit of `qh` (0..=31); `w = (d·scale)·q − dmin·min`.
//! - Q6_K (210 bytes): `ql[128]`, `qh[64]`, `scales[16]` (i8), f16 `d`. `q` is a nibble of `ql`
//!   with two bits of `qh` above it, minus 32 (−32..=31); `w = (d·scale)·q`.
//! - Q8_K (292 bytes): f32 `d`, `qs[256]` (i8), `bsums[16]` (i16 sums of 16 quants, kept for
//!   dot products, unused here); `w = d·q`.
//!
//! The low bits are interleaved by 32-element groups so that SIMD code unpacks whole vectors:
//! a 2-bit field of element `e` is bits `2·((e / 32) % 4)` of byte `32·(e / 128) + e % 32`
//! (Q2_K, Q3_K `qs`, Q6_K `qh`); a nibble is nibble `(e / 32) % 2` of byte
//! `32·(e / 64) + e % 32` (Q4_K, Q5_K) or nibble `(e / 64) % 2` of byte
//! `64·(e / 128) + 32·((e / 32) % 2) + e % 32` (Q6_K `ql`); a high bit (Q3_K `hmask`, Q5_K
//! `qh`) is bit `e / 32` of byte `e % 32`.
//!
//! Values are computed in f32 in ggml's order (`d·scale`, then times `q`, then less
//! `dmin·min`). The products are exact: an f16 has at most 11 significant bits, a sub-scale at
//! most 7 and a quant at most 5 (|q| ≤ 32), within f32's 24; Q8_K's f32 `d` times an i8
//! rounds once. Only the subtraction rounds, so the result is ggml's to the bit, whether or not
//! its build fuses the multiply and the subtraction.
use half::{bf16, f16};

/// A ggml tensor type. The ones this reader dequantises have their own variant; the rest are
/// kept by number so that the error can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// ggml's own names: `Q4_K` rather than `Q4K`, as `Q4_0` is.
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    BF16,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    Other(u32),
}

/// Elements in a K-quant super-block (ggml's `QK_K`).
const QK_K: usize = 256;

impl GgmlType {
    pub fn from_u32(v: u32) -> Self {
        match v {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            10 => GgmlType::Q2_K,
            11 => GgmlType::Q3_K,
            12 => GgmlType::Q4_K,
            13 => GgmlType::Q5_K,
            14 => GgmlType::Q6_K,
            15 => GgmlType::Q8_K,
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
            GgmlType::Q2_K => 10,
            GgmlType::Q3_K => 11,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::Q8_K => 15,
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
            GgmlType::Q2_K => Some((QK_K, 84)),
            GgmlType::Q3_K => Some((QK_K, 110)),
            GgmlType::Q4_K => Some((QK_K, 144)),
            GgmlType::Q5_K => Some((QK_K, 176)),
            GgmlType::Q6_K => Some((QK_K, 210)),
            GgmlType::Q8_K => Some((QK_K, 292)),
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
        GgmlType::Q2_K => super_blocks(bytes, bytes_per, q2_k, &mut out),
        GgmlType::Q3_K => super_blocks(bytes, bytes_per, q3_k, &mut out),
        GgmlType::Q4_K => super_blocks(bytes, bytes_per, q4_k, &mut out),
        GgmlType::Q5_K => super_blocks(bytes, bytes_per, q5_k, &mut out),
        GgmlType::Q6_K => super_blocks(bytes, bytes_per, q6_k, &mut out),
        GgmlType::Q8_K => super_blocks(bytes, bytes_per, q8_k, &mut out),
        GgmlType::Other(_) => return None,
    }
    Some(out)
}

/// The f16 at byte `i` of a block.
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Dequantises each `bytes_per`-byte super-block of `bytes` with `block`, which is given
/// exactly one block (the size in [`GgmlType::block_layout`]), so that every index the
/// K-quant functions below use is within it.
fn super_blocks(
    bytes: &[u8],
    bytes_per: usize,
    block: fn(&[u8], &mut Vec<f32>),
    out: &mut Vec<f32>,
) {
    for blk in bytes.chunks_exact(bytes_per) {
        block(blk, out);
    }
}

/// The 2-bit field of element `e` in 64 bytes of 2-bit quants (Q2_K and Q3_K `qs`, Q6_K `qh`).
fn two_bits(q: &[u8], e: usize) -> u8 {
    (q[32 * (e / 128) + e % 32] >> (2 * (e / 32 % 4))) & 3
}

/// The nibble of element `e` in 128 bytes of 4-bit quants (Q4_K and Q5_K `qs`).
fn nibble(q: &[u8], e: usize) -> u8 {
    (q[32 * (e / 64) + e % 32] >> (4 * (e / 32 % 2))) & 0x0f
}

/// The bit of element `e` in 32 bytes of bit planes (Q3_K `hmask`, Q5_K `qh`).
fn high_bit(h: &[u8], e: usize) -> u8 {
    (h[e % 32] >> (e / 32)) & 1
}

/// Q2_K: `scales[16]`, `qs[64]`, f16 `d` at 80, f16 `dmin` at 82. Each byte of `scales` holds
/// its 16-element sub-block's scale (low nibble) and minimum (high nibble).
fn q2_k(blk: &[u8], out: &mut Vec<f32>) {
    let (scales, qs) = (&blk[..16], &blk[16..80]);
    let (d, dmin) = (f16_at(blk, 80), f16_at(blk, 82));
    for (s, &sc) in scales.iter().enumerate() {
        let (dl, ml) = (d * (sc & 0x0f) as f32, dmin * (sc >> 4) as f32);
        out.extend((16 * s..16 * s + 16).map(|e| dl * two_bits(qs, e) as f32 - ml));
    }
}

/// Q3_K: `hmask[32]`, `qs[64]`, `scales[12]`, f16 `d` at 108. The quant is the 2-bit field,
/// less 4 where the `hmask` bit is clear; the 6-bit scales are split into a low nibble (bytes
/// 0..8) and two high bits (bytes 8..12), stored offset by 32.
fn q3_k(blk: &[u8], out: &mut Vec<f32>) {
    let (hmask, qs, scales) = (&blk[..32], &blk[32..96], &blk[96..108]);
    let d = f16_at(blk, 108);
    for s in 0..16 {
        let low = (scales[s % 8] >> (4 * (s / 8))) & 0x0f;
        let high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        let dl = d * (i32::from(low | high << 4) - 32) as f32;
        out.extend((16 * s..16 * s + 16).map(|e| {
            let offset = if high_bit(hmask, e) == 1 { 0 } else { 4 };
            dl * (i32::from(two_bits(qs, e)) - offset) as f32
        }));
    }
}

/// Scale and minimum of sub-block `s` (0..8) from the 12 packed bytes of Q4_K and Q5_K
/// (ggml's `get_scale_min_k4`): six bits each, the first four sub-blocks in the low bits of
/// bytes 0..8, the last four in the nibbles of bytes 8..12 with their top two bits in the top
/// bits of bytes 0..8.
fn scale_min_k4(scales: &[u8], s: usize) -> (u8, u8) {
    if s < 4 {
        (scales[s] & 63, scales[s + 4] & 63)
    } else {
        (
            (scales[s + 4] & 0x0f) | (scales[s - 4] >> 6) << 4,
            (scales[s + 4] >> 4) | (scales[s] >> 6) << 4,
        )
    }
}

/// What Q4_K and Q5_K share: f16 `d` at 0, f16 `dmin` at 2, `scales[12]` at 4, and eight
/// 32-element sub-blocks of `w = (d·scale)·q − dmin·min`, where `q` is the nibble in `qs`
/// plus `high(e)`.
fn k4_sub_blocks(blk: &[u8], qs: &[u8], high: impl Fn(usize) -> u8, out: &mut Vec<f32>) {
    let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
    let scales = &blk[4..16];
    for s in 0..8 {
        let (sc, m) = scale_min_k4(scales, s);
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        out.extend((32 * s..32 * s + 32).map(|e| dl * (nibble(qs, e) | high(e)) as f32 - ml));
    }
}

/// Q4_K: `d`, `dmin`, `scales[12]`, `qs[128]` at 16.
fn q4_k(blk: &[u8], out: &mut Vec<f32>) {
    k4_sub_blocks(blk, &blk[16..144], |_| 0, out);
}

/// Q5_K: `d`, `dmin`, `scales[12]`, `qh[32]` at 16 (the fifth bit), `qs[128]` at 48.
fn q5_k(blk: &[u8], out: &mut Vec<f32>) {
    let qh = &blk[16..48];
    k4_sub_blocks(blk, &blk[48..176], |e| high_bit(qh, e) << 4, out);
}

/// Q6_K: `ql[128]`, `qh[64]`, `scales[16]` (i8), f16 `d` at 208. The quant is a nibble of
/// `ql` below a 2-bit field of `qh`, offset by 32.
fn q6_k(blk: &[u8], out: &mut Vec<f32>) {
    let (ql, qh, scales) = (&blk[..128], &blk[128..192], &blk[192..208]);
    let d = f16_at(blk, 208);
    for (s, &sc) in scales.iter().enumerate() {
        let dl = d * (sc as i8) as f32;
        out.extend((16 * s..16 * s + 16).map(|e| {
            let low =
                (ql[64 * (e / 128) + 32 * (e / 32 % 2) + e % 32] >> (4 * (e / 64 % 2))) & 0x0f;
            dl * (i32::from(low | two_bits(qh, e) << 4) - 32) as f32
        }));
    }
}

/// Q8_K: f32 `d`, `qs[256]` (i8) at 4, then `bsums[16]`, which only dot products read.
fn q8_k(blk: &[u8], out: &mut Vec<f32>) {
    let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
    out.extend(blk[4..4 + QK_K].iter().map(|&q| d * (q as i8) as f32));
}

#[cfg(test)]
mod tests {
    //! The element-index formulas above against the loop order of ggml's scalar
    //! `dequantize_row_*`, written out here loop by loop. (The values themselves are checked
    //! against gguf-py in `tests/gguf_kquants.rs`.)
    use super::*;

    /// Deterministic bytes (xorshift32).
    fn noise(n: usize, mut s: u32) -> Vec<u8> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s >> 7) as u8
            })
            .collect()
    }

    #[test]
    fn two_bit_fields_follow_ggml_loop_order() {
        // Q2_K / Q3_K: per 128 elements, four shifts, each over two halves of 16 bytes; the
        // pointer moves on 32 bytes per 128 elements.
        let q = noise(64, 1);
        let mut want = Vec::new();
        for n in 0..2 {
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    want.extend((0..16).map(|l| (q[32 * n + 16 * half + l] >> shift) & 3));
                }
            }
        }
        let got: Vec<u8> = (0..QK_K).map(|e| two_bits(&q, e)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn nibbles_and_high_bits_follow_ggml_loop_order() {
        // Q4_K / Q5_K: per 64 elements, the low nibbles of 32 bytes, then their high nibbles;
        // Q5_K's fifth bit comes from masks u1 = 1, u2 = 2 shifted by 2 per 64 elements.
        let (qs, qh) = (noise(128, 2), noise(32, 3));
        let (mut want_q, mut want_h) = (Vec::new(), Vec::new());
        let (mut u1, mut u2) = (1u8, 2u8);
        for j in 0..4 {
            want_q.extend((0..32).map(|l| qs[32 * j + l] & 0x0f));
            want_q.extend((0..32).map(|l| qs[32 * j + l] >> 4));
            want_h.extend((0..32).map(|l| u8::from(qh[l] & u1 != 0)));
            want_h.extend((0..32).map(|l| u8::from(qh[l] & u2 != 0)));
            u1 <<= 2;
            u2 <<= 2;
        }
        assert_eq!(
            (0..QK_K).map(|e| nibble(&qs, e)).collect::<Vec<_>>(),
            want_q
        );
        assert_eq!(
            (0..QK_K).map(|e| high_bit(&qh, e)).collect::<Vec<_>>(),
            want_h
        );
        // Q3_K's hmask: one mask bit per 32 elements, over bytes l and l + 16.
        let mut want = Vec::new();
        let mut m = 1u8;
        for _ in 0..8 {
            for half in 0..2 {
                want.extend((0..16).map(|l| u8::from(qh[16 * half + l] & m != 0)));
            }
            m = m.wrapping_shl(1);
        }
        assert_eq!(
            (0..QK_K).map(|e| high_bit(&qh, e)).collect::<Vec<_>>(),
            want
        );
    }

    /// `bytes` bytes of noise with the f16 at `at` set to 1.
    fn with_unit_scale(bytes: usize, seed: u32, at: usize) -> Vec<u8> {
        let mut b = noise(bytes, seed);
        b[at..at + 2].copy_from_slice(&f16::ONE.to_le_bytes());
        b
    }

    #[test]
    fn q6_k_follows_ggml_loop_order() {
        // d = 1 and every scale 1, so w is the quant itself.
        let mut blk = with_unit_scale(210, 4, 208);
        blk[192..208].fill(1);
        let (ql, qh) = (&blk[..128], &blk[128..192]);
        let mut want = [0f32; QK_K];
        for n in 0..2 {
            let (ql, qh, y) = (&ql[64 * n..], &qh[32 * n..], &mut want[128 * n..]);
            for l in 0..32 {
                let q = |low: u8, shift: u32| (low | ((qh[l] >> shift) & 3) << 4) as i32 - 32;
                y[l] = q(ql[l] & 0x0f, 0) as f32;
                y[l + 32] = q(ql[l + 32] & 0x0f, 2) as f32;
                y[l + 64] = q(ql[l] >> 4, 4) as f32;
                y[l + 96] = q(ql[l + 32] >> 4, 6) as f32;
            }
        }
        assert_eq!(dequantize(GgmlType::Q6_K, &blk, QK_K).unwrap(), want);
    }

    #[test]
    fn q3_k_scales_unpack_as_ggml_does() {
        // d = 1, every hmask bit set (no offset) and every 2-bit quant 1: w is scale − 32.
        let mut blk = with_unit_scale(110, 5, 108);
        blk[..32].fill(0xff);
        blk[32..96].fill(0x55);
        // ggml: four little-endian u32 words rebuilt with kmask1 = 0x03030303, kmask2 =
        // 0x0f0f0f0f, then read as 16 signed bytes.
        let word =
            |i: usize| u32::from_le_bytes([blk[96 + i], blk[97 + i], blk[98 + i], blk[99 + i]]);
        let (a0, a1, tmp) = (word(0), word(4), word(8));
        let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
        let aux = [
            (a0 & k2) | ((tmp & k1) << 4),
            (a1 & k2) | (((tmp >> 2) & k1) << 4),
            ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4),
            ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4),
        ];
        let scales: Vec<i32> = aux
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .map(|b| i32::from(b as i8) - 32)
            .collect();
        let got = dequantize(GgmlType::Q3_K, &blk, QK_K).unwrap();
        for (s, &scale) in scales.iter().enumerate() {
            assert!(
                got[16 * s..16 * s + 16].iter().all(|&w| w == scale as f32),
                "{s}"
            );
        }
    }

    #[test]
    fn k4_scales_and_mins_unpack_as_ggml_does() {
        // `get_scale_min_k4` as gguf-py writes it: three rows of four bytes (d, m, m_d);
        // scales d & 63 then (m_d & 15) | ((d >> 2) & 48), minimums m & 63 then
        // (m_d >> 4) | ((m >> 2) & 48).
        let q = noise(12, 6);
        let (d, m, md) = (&q[0..4], &q[4..8], &q[8..12]);
        for j in 0..4 {
            assert_eq!(scale_min_k4(&q, j), (d[j] & 63, m[j] & 63));
            assert_eq!(
                scale_min_k4(&q, j + 4),
                (
                    (md[j] & 15) | ((d[j] >> 2) & 48),
                    (md[j] >> 4) | ((m[j] >> 2) & 48)
                )
            );
        }
    }
}
