//! The two MurmurHash variants that spaCy and thinc use to hash tokens into a bag-of-words
//! feature space (implemented here from the published algorithm descriptions).

/// MurmurHash64A (Austin Appleby), the 64-bit hash of spaCy's `StringStore`
/// (`hash_string(s) = MurmurHash64A(utf8(s), seed = 1)`).
pub(crate) fn murmurhash64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// MurmurHash3_x86_32, which thinc's `sparse_linear` layer applies to each 64-bit feature key
/// (as its 8 little-endian bytes) with seeds 0 and 1 to pick two weight rows.
pub(crate) fn murmurhash3_x86_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, &b) in tail.iter().enumerate() {
            k |= u32::from(b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values from Python: `mmh3.hash(b, seed, signed=False)` for x86_32, and for
    // 64A a reference implementation that reproduces spaCy's textcat scores on the fixture.
    #[test]
    fn murmur3_vectors() {
        assert_eq!(murmurhash3_x86_32(b"", 0), 0);
        assert_eq!(murmurhash3_x86_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmurhash3_x86_32(b"hello", 0), 613_153_351);
        assert_eq!(murmurhash3_x86_32(b"hello", 1), 3_142_237_357);
        assert_eq!(murmurhash3_x86_32(b"abc", 0), 3_017_643_002);
        let cases: [(u64, u32, u32); 4] = [
            (0, 1_669_671_676, 3_935_659_133),
            (1, 1_392_991_556, 3_741_873_941),
            (12_345_678_901_234_567_890, 3_549_359_617, 3_428_782_415),
            (u64::MAX, 1_651_860_712, 2_540_302_534),
        ];
        for (k, s0, s1) in cases {
            assert_eq!(murmurhash3_x86_32(&k.to_le_bytes(), 0), s0, "key {k}");
            assert_eq!(murmurhash3_x86_32(&k.to_le_bytes(), 1), s1, "key {k}");
        }
    }

    #[test]
    fn murmur64a_vectors() {
        let cases: [(&str, u64); 7] = [
            ("", 14_313_749_767_032_693_980),
            ("a", 11_901_859_001_352_538_922),
            ("good", 5_711_639_017_775_284_443),
            ("hello world!", 2_250_993_713_583_282_316),
            ("naïve", 16_224_804_062_388_677_344),
            ("abcdefgh", 17_751_780_907_874_141_760),
            ("abcdefghi", 13_885_881_106_499_164_936),
        ];
        for (s, h) in cases {
            assert_eq!(murmurhash64a(s.as_bytes(), 1), h, "{s:?}");
        }
    }
}
