//! `x·W` for a few rows of `x`: the projections of a decoding step, where the batch is one new
//! token per sequence (`[B, H]` with B ≤ [`MAX_ROWS`]).
//!
//! Such a product is bound by reading `W` from memory, not by arithmetic, and the general GEMM
//! burn calls is tuned for the opposite (it packs `W` into panels first and threads over
//! blocks sized for large `x`): on a 2-core AVX2 machine it reads GPT-2 small's weights at
//! 4–8 GB/s for 8 rows, where memory delivers ≈ 15. These kernels read `W` once, in the order it
//! lies in memory, keeping the rows of `x` and the output tile in registers; two layouts occur:
//!
//! - row-major `W` `[k, n]` (a `Linear` weight, burn's `[in, out]`): a tile of 24 output
//!   columns × 4 rows in twelve AVX registers, one row of `W` per step with the row 16 steps
//!   ahead prefetched (the tile walks down the columns, a stride the hardware prefetcher
//!   follows late);
//! - a transposed view of row-major `Wᵀ` `[n, k]` (the tied vocabulary head, `x·Eᵀ`): dot
//!   products of 3 rows of `Wᵀ` with 4 rows of `x`, contiguous on both sides.
//!
//! Column ranges go to the rayon pool; each output element is one thread's sum in a fixed
//! order, so the result does not depend on the thread count. Only with AVX2 and FMA (checked
//! at run time); otherwise, and for any other shape or layout, [`small_matmul`] declines and
//! burn's matmul runs.
use burn::tensor::{DType, TensorData};
use burn_flex::FlexTensor;
use rayon::prelude::*;

/// Up to this many rows of `x` the kernels here beat the general GEMM on both layouts
/// (measured on GPT-2 small and SmolLM2-135M shapes, docs/benchmarks.md).
pub(crate) const MAX_ROWS: usize = 32;

/// `x·W` by the kernels of this module, or `None` when they do not take the operands: `x`
/// `[m, k]` with `m ≤ MAX_ROWS`, `W` `[k, n]` f32 either row-major or the transpose of a
/// row-major `[n, k]`, on a CPU with AVX2 and FMA.
pub(super) fn small_matmul(x: &FlexTensor, w: &FlexTensor) -> Option<FlexTensor> {
    let (xs, ws) = (x.layout().shape(), w.layout().shape());
    if xs.num_dims() != 2
        || ws.num_dims() != 2
        || x.dtype() != DType::F32
        || w.dtype() != DType::F32
    {
        return None;
    }
    let (m, k, n) = (xs[0], xs[1], ws[1]);
    if ws[0] != k || m == 0 || m > MAX_ROWS || k == 0 || n == 0 || !simd::available() {
        return None;
    }
    let layout = match w.layout().strides() {
        [s0, 1] if *s0 == n as isize => Layout::RowMajor,
        [1, s1] if *s1 == k as isize => Layout::Transposed,
        _ => return None,
    };
    let x = x.to_contiguous();
    let xv = &x.storage::<f32>()[x.layout().start_offset()..][..m * k];
    let wv = &w.storage::<f32>()[w.layout().start_offset()..][..k * n];
    let mut out = vec![0.0f32; m * n];
    let unit = match layout {
        Layout::RowMajor => simd::ROW_MAJOR_COLS,
        Layout::Transposed => simd::TRANSPOSED_COLS,
    };
    let out_ptr = OutPtr(out.as_mut_ptr());
    column_ranges(n, unit).into_par_iter().for_each(|(j0, j1)| {
        let out = out_ptr;
        // SAFETY: `xv` holds m·k and `wv` k·n elements, `out` m·n; the ranges are disjoint, so
        // each task writes only its own columns of `out`, which outlives the parallel loop.
        unsafe {
            match layout {
                Layout::RowMajor => simd::row_major(xv, m, k, wv, n, out.0, j0, j1),
                Layout::Transposed => simd::transposed(xv, m, k, wv, n, out.0, j0, j1),
            }
        }
    });
    Some(FlexTensor::from_data(TensorData::new(out, [m, n])))
}

/// burn-flex's threshold (`m·n·k`) above which a product is split over the rayon pool.
const PARALLEL_OPS: usize = 192 * 192 * 192;

/// `lhs·rhs` for 2-D f32 operands in any strides, by the `gemm` crate as burn-flex's
/// `float_matmul` calls it (the same bits), a large product cut into one band of the output
/// per thread ([`split`]). `None` for other dtypes or ranks.
///
/// Why not burn-flex's: it allocates the output as zeroed bytes and then, because a byte
/// vector reports alignment 1, reallocates it 16-aligned and copies it (`FlexTensor::empty` →
/// `Bytes::from_bytes_vec`), for every product; here the output is allocated once as f32s
/// and written by `gemm` without being cleared first.
pub(super) fn gemm_2d(lhs: &FlexTensor, rhs: &FlexTensor) -> Option<FlexTensor> {
    let (ls, rs) = (lhs.layout(), rhs.layout());
    if ls.shape().num_dims() != 2
        || rs.shape().num_dims() != 2
        || lhs.dtype() != DType::F32
        || rhs.dtype() != DType::F32
    {
        return None;
    }
    let (m, k, n) = (ls.shape()[0], ls.shape()[1], rs.shape()[1]);
    if rs.shape()[0] != k {
        return None;
    }
    let ([l_rs, l_cs], [r_rs, r_cs]) = (strides_2d(ls.strides())?, strides_2d(rs.strides())?);
    if k == 0 {
        return Some(FlexTensor::from_data(TensorData::new(
            vec![0.0f32; m * n],
            [m, n],
        )));
    }
    let l = lhs.storage::<f32>()[ls.start_offset()..].as_ptr();
    let r = rhs.storage::<f32>()[rs.start_offset()..].as_ptr();
    let large = m.saturating_mul(n).saturating_mul(k) >= PARALLEL_OPS;
    let plan = large
        .then(|| split(m, n, rayon::current_num_threads()))
        .flatten();
    // SAFETY: `l` and `r` point at the first elements of `[m, k]` and `[k, n]` views whose
    // strides address only their buffers (burn-flex's layouts guarantee it).
    let out = unsafe {
        product_in_bands(
            [m, k, n],
            Operand(l, l_rs, l_cs),
            Operand(r, r_rs, r_cs),
            plan,
            large,
        )
    };
    Some(FlexTensor::from_data(TensorData::new(out, [m, n])))
}

/// `lhs·rhs` for `[m, k]·[k, n]` operands, row-major: one `gemm` call per band of `plan`, on
/// the rayon pool, or a single call (threaded by gemm when `large`).
///
/// # Safety
/// The operands must address `[m, k]` and `[k, n]` readable f32s.
unsafe fn product_in_bands(
    [m, k, n]: [usize; 3],
    lhs: Operand,
    rhs: Operand,
    plan: Option<Split>,
    large: bool,
) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let dst = OutPtr(out.as_mut_ptr());
    // SAFETY (all three calls): the caller's operands; `out` has room for `m·n` elements,
    // row-major. Each call writes `lhs·rhs` to its block of `out` without reading it
    // (`read_dst` false, `beta` 1); the blocks tile `[m, n]`, so all `m·n` elements are
    // initialised when `set_len` runs.
    match plan {
        Some(Split::Rows(bands)) => bands.into_par_iter().for_each(|(r0, r1)| unsafe {
            let band = dst; // the whole `Send` wrapper, not its raw field
            let a = lhs.offset(r0 as isize * lhs.1);
            gemm_block(
                r1 - r0,
                n,
                k,
                band.0.add(r0 * n),
                n,
                a,
                rhs,
                gemm::Parallelism::None,
            )
        }),
        Some(Split::Columns(bands)) => bands.into_par_iter().for_each(|(c0, c1)| unsafe {
            let band = dst;
            let b = rhs.offset(c0 as isize * rhs.2);
            gemm_block(
                m,
                c1 - c0,
                k,
                band.0.add(c0),
                n,
                lhs,
                b,
                gemm::Parallelism::None,
            )
        }),
        None => unsafe {
            let parallelism = match large {
                true => gemm::Parallelism::Rayon(0),
                false => gemm::Parallelism::None,
            };
            gemm_block(m, n, k, dst.0, n, lhs, rhs, parallelism)
        },
    }
    // SAFETY: see above.
    unsafe { out.set_len(m * n) };
    out
}

/// A 2-D f32 operand: first element, row stride, column stride.
#[derive(Clone, Copy)]
struct Operand(*const f32, isize, isize);
// SAFETY: operands are only read, by tasks that all finish before the buffers are dropped.
unsafe impl Send for Operand {}
unsafe impl Sync for Operand {}

impl Operand {
    /// The operand starting `elements` further on (a block of its rows or columns).
    fn offset(self, elements: isize) -> Self {
        Self(self.0.wrapping_offset(elements), self.1, self.2)
    }
}

/// `lhs·rhs` (`[m, k]·[k, n]`) written to `dst`, row-major with row stride `dst_rs`.
///
/// # Safety
/// The operands must address `[m, k]` and `[k, n]` readable f32s; `dst` must have room for the
/// `[m, n]` block, which no other thread writes meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_block(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: usize,
    lhs: Operand,
    rhs: Operand,
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the caller's.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            false,
            lhs.0,
            lhs.2,
            lhs.1,
            rhs.0,
            rhs.2,
            rhs.1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// How a large product is shared among the threads.
#[derive(Clone, Debug)]
enum Split {
    /// Bands of output rows (`lhs` rows), each thread reading all of `rhs`.
    Rows(Vec<(usize, usize)>),
    /// Bands of output columns (`rhs` columns), each thread reading all of `lhs`.
    Columns(Vec<(usize, usize)>),
}

/// Output bands of at least this many rows or columns (a multiple of gemm's AVX-512 and AVX2
/// tile heights, 64 and 24 rows of its transposed problem).
const BAND: usize = 192;

/// One band per thread along the longer side of the `[m, n]` output (so the operand each
/// thread reads whole, and packs again, is the smaller one), or `None` for one thread or a
/// product too small to share that way.
///
/// Why not gemm's own threading: it packs the `[m, k]` operand of a `[m, n]` output with
/// `n ≤ 2·mc` on the calling thread while the pool waits (the backward products `g·Wᵀ`, for
/// one); bands share that packing too. Every output element is the same sum in the same order
/// either way (gemm's depth blocking depends on `k` alone once both sides exceed 64), so the
/// result does not depend on the split.
fn split(m: usize, n: usize, threads: usize) -> Option<Split> {
    let long = m.max(n);
    if threads < 2 || m.min(n) <= 64 || long < threads * BAND {
        return None;
    }
    let band = long.div_ceil(threads).div_ceil(BAND) * BAND;
    let bands = (0..long)
        .step_by(band)
        .map(|a| (a, (a + band).min(long)))
        .collect();
    Some(match m > n {
        true => Split::Rows(bands),
        false => Split::Columns(bands),
    })
}

/// `[row stride, column stride]` of a 2-D layout.
fn strides_2d(strides: &[isize]) -> Option<[isize; 2]> {
    match strides {
        [r, c] => Some([*r, *c]),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Layout {
    RowMajor,
    Transposed,
}

/// The output buffer, shared by tasks that write disjoint columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: see its uses in `small_matmul` and `gemm_2d`: tasks write disjoint elements.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// `n` columns cut into about four ranges per thread, each a multiple of `unit` wide but the
/// last.
fn column_ranges(n: usize, unit: usize) -> Vec<(usize, usize)> {
    let chunk = n.div_ceil(4 * rayon::current_num_threads()).div_ceil(unit) * unit;
    (0..n)
        .step_by(chunk)
        .map(|j0| (j0, (j0 + chunk).min(n)))
        .collect()
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    /// Output columns of one row-major tile (three 8-lane registers).
    pub const ROW_MAJOR_COLS: usize = 24;
    /// Rows of `Wᵀ` (output columns) of one transposed tile.
    pub const TRANSPOSED_COLS: usize = 3;
    /// Rows of `x` per tile: 4 × 3 accumulators leave registers for the operands.
    const ROWS: usize = 4;
    /// How many rows of `W` ahead the row-major kernel prefetches.
    const PREFETCH_ROWS: usize = 16;

    pub fn available() -> bool {
        crate::fused::simd_allowed()
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
    }

    /// Evaluates `$tile` (a tile call written with `$R` rows starting at row `$r` and column
    /// `$j`) for every block of `$R ≤ ROWS` rows (`ROWS` at a time, then the remainder) at every
    /// `$cols`-wide column tile of `j0..j1`, then computes the columns left over (fewer than
    /// `$cols`) one element at a time, `W`'s element `(kk, jj)` at `kk·$ks + jj·$js`.
    macro_rules! tiles {
        (|$R:ident, $r:ident, $j:ident| $tile:expr, $cols:expr,
         ($x:expr, $m:expr, $k:expr, $w:expr, $n:expr, $out:expr, $j0:expr, $j1:expr),
         ($ks:expr, $js:expr)) => {{
            let mut $j = $j0;
            while $j + $cols <= $j1 {
                let mut $r = 0;
                while $r + ROWS <= $m {
                    {
                        const $R: usize = ROWS;
                        $tile
                    }
                    $r += ROWS;
                }
                match $m - $r {
                    1 => {
                        const $R: usize = 1;
                        $tile
                    }
                    2 => {
                        const $R: usize = 2;
                        $tile
                    }
                    3 => {
                        const $R: usize = 3;
                        $tile
                    }
                    _ => {}
                }
                $j += $cols;
            }
            // SAFETY: as the caller's; the remaining columns are in bounds.
            unsafe { scalar_columns($x, $m, $k, $w, ($ks, $js), $n, $out, $j, $j1) };
        }};
    }

    /// `out[:, j0..j1] = x·W[:, j0..j1]` for row-major `W` `[k, n]`, `x` `[m, k]`, `out`
    /// `[m, n]`.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `out` points at `m·n` writable elements; `j0 ≤ j1 ≤ n`.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn row_major(
        x: &[f32],
        m: usize,
        k: usize,
        w: &[f32],
        n: usize,
        out: *mut f32,
        j0: usize,
        j1: usize,
    ) {
        let (x, w) = (x.as_ptr(), w.as_ptr());
        // SAFETY: rows r..r+R of x and columns j..j+24 of W and out are in bounds; the
        // prefetch address may run past W, which a prefetch tolerates.
        tiles!(
            |R, r, j| unsafe { tile_rm::<R>(x.add(r * k), k, w.add(j), n, out.add(r * n + j)) },
            ROW_MAJOR_COLS,
            (x, m, k, w, n, out, j0, j1),
            (n, 1)
        );
    }

    /// `R` rows × 24 columns of the row-major product, down all `k` rows of `W`.
    #[inline(always)]
    unsafe fn tile_rm<const R: usize>(
        x: *const f32,
        k: usize,
        w: *const f32,
        n: usize,
        out: *mut f32,
    ) {
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 3]; R];
            for kk in 0..k {
                let wp = w.add(kk * n);
                let ahead = wp.wrapping_add(PREFETCH_ROWS * n);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(16) as *const i8);
                let w0 = _mm256_loadu_ps(wp);
                let w1 = _mm256_loadu_ps(wp.add(8));
                let w2 = _mm256_loadu_ps(wp.add(16));
                for (r, a) in acc.iter_mut().enumerate() {
                    let xr = _mm256_broadcast_ss(&*x.add(r * k + kk));
                    a[0] = _mm256_fmadd_ps(xr, w0, a[0]);
                    a[1] = _mm256_fmadd_ps(xr, w1, a[1]);
                    a[2] = _mm256_fmadd_ps(xr, w2, a[2]);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                let o = out.add(r * n);
                _mm256_storeu_ps(o, a[0]);
                _mm256_storeu_ps(o.add(8), a[1]);
                _mm256_storeu_ps(o.add(16), a[2]);
            }
        }
    }

    /// `out[:, j0..j1] = x·Wᵀ[j0..j1, :]ᵀ` for row-major `Wᵀ` `[n, k]` (passed as `wt`).
    ///
    /// # Safety
    /// As [`row_major`].
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn transposed(
        x: &[f32],
        m: usize,
        k: usize,
        wt: &[f32],
        n: usize,
        out: *mut f32,
        j0: usize,
        j1: usize,
    ) {
        let (x, wt) = (x.as_ptr(), wt.as_ptr());
        // SAFETY: rows r..r+R of x, rows j..j+3 of Wᵀ and the matching elements of out are in
        // bounds.
        tiles!(
            |R, r, j| unsafe {
                tile_tr::<R>(x.add(r * k), k, wt.add(j * k), out.add(r * n + j), n)
            },
            TRANSPOSED_COLS,
            (x, m, k, wt, n, out, j0, j1),
            (1, k)
        );
    }

    /// Columns `j0..j1` of `x·W` one element at a time, `W`'s element `(kk, jj)` at
    /// `kk·strides.0 + jj·strides.1`.
    ///
    /// # Safety
    /// Every index read or written is in bounds.
    #[allow(clippy::too_many_arguments)]
    unsafe fn scalar_columns(
        x: *const f32,
        m: usize,
        k: usize,
        w: *const f32,
        strides: (usize, usize),
        n: usize,
        out: *mut f32,
        j0: usize,
        j1: usize,
    ) {
        for jj in j0..j1 {
            for r in 0..m {
                let mut s = 0.0;
                for kk in 0..k {
                    s += unsafe { *x.add(r * k + kk) * *w.add(kk * strides.0 + jj * strides.1) };
                }
                unsafe { *out.add(r * n + jj) = s };
            }
        }
    }

    /// `R` rows × 3 columns of the transposed product: dot products over `k`, 8 lanes at a
    /// time, the `k mod 8` tail added after the lanes are summed.
    #[inline(always)]
    unsafe fn tile_tr<const R: usize>(
        x: *const f32,
        k: usize,
        wt: *const f32,
        out: *mut f32,
        n: usize,
    ) {
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 3]; R];
            let k8 = k / 8 * 8;
            let mut c = 0;
            while c < k8 {
                let w0 = _mm256_loadu_ps(wt.add(c));
                let w1 = _mm256_loadu_ps(wt.add(k + c));
                let w2 = _mm256_loadu_ps(wt.add(2 * k + c));
                for (r, a) in acc.iter_mut().enumerate() {
                    let xr = _mm256_loadu_ps(x.add(r * k + c));
                    a[0] = _mm256_fmadd_ps(xr, w0, a[0]);
                    a[1] = _mm256_fmadd_ps(xr, w1, a[1]);
                    a[2] = _mm256_fmadd_ps(xr, w2, a[2]);
                }
                c += 8;
            }
            for (r, a) in acc.iter().enumerate() {
                for (q, &lanes) in a.iter().enumerate() {
                    let mut s = hsum(lanes);
                    for cc in k8..k {
                        s += *x.add(r * k + cc) * *wt.add(q * k + cc);
                    }
                    *out.add(r * n + q) = s;
                }
            }
        }
    }

    /// The sum of the 8 lanes.
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        unsafe {
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)))
        }
    }
}

/// Without x86-64's AVX2 the module declines every product (burn's matmul runs).
#[cfg(not(target_arch = "x86_64"))]
mod simd {
    pub const ROW_MAJOR_COLS: usize = 1;
    pub const TRANSPOSED_COLS: usize = 1;

    pub fn available() -> bool {
        false
    }

    #[allow(clippy::too_many_arguments)]
    pub unsafe fn row_major(
        _: &[f32],
        _: usize,
        _: usize,
        _: &[f32],
        _: usize,
        _: *mut f32,
        _: usize,
        _: usize,
    ) {
        unreachable!("`available()` is false")
    }

    pub use row_major as transposed;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in (−1, 1) that differ per element.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// `x·W` in f64, W given row-major `[k, n]`.
    fn reference(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f64> {
        let mut out = vec![0.0f64; m * n];
        for r in 0..m {
            for kk in 0..k {
                for j in 0..n {
                    out[r * n + j] += f64::from(x[r * k + kk]) * f64::from(w[kk * n + j]);
                }
            }
        }
        out
    }

    fn tensor(v: Vec<f32>, shape: [usize; 2]) -> FlexTensor {
        FlexTensor::from_data(TensorData::new(v, shape))
    }

    fn assert_close(got: FlexTensor, want: &[f64], k: usize, what: &str) {
        let got = got.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(got.len(), want.len(), "{what}");
        // f32 sums of k products of magnitude < 1, in another order than the f64 reference.
        let tol = 1e-6 * k as f64 + 1e-6;
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= tol,
                "{what}: element {i}: {g} vs {w}"
            );
        }
    }

    #[test]
    fn both_layouts_match_a_f64_product_on_tiles_and_tails() {
        if !simd::available() {
            return; // the kernels decline; burn's matmul is tested upstream
        }
        for &m in &[1, 3, 4, 5, 8, 13, MAX_ROWS] {
            for &(k, n) in &[(1, 1), (7, 24), (64, 50), (77, 97), (96, 3 * 24 + 5)] {
                let (x, w) = (values(m * k, 1), values(k * n, 2));
                let want = reference(&x, m, k, &w, n);
                let row_major =
                    small_matmul(&tensor(x.clone(), [m, k]), &tensor(w.clone(), [k, n]));
                let what = format!("row-major m{m} k{k} n{n}");
                assert_close(row_major.expect(&what), &want, k, &what);
                // The same W stored as its transpose [n, k] and viewed back as [k, n].
                let mut wt = vec![0.0f32; k * n];
                for kk in 0..k {
                    for j in 0..n {
                        wt[j * k + kk] = w[kk * n + j];
                    }
                }
                let view = tensor(wt, [n, k]).transpose(0, 1);
                let what = format!("transposed m{m} k{k} n{n}");
                let transposed = small_matmul(&tensor(x, [m, k]), &view);
                assert_close(transposed.expect(&what), &want, k, &what);
            }
        }
    }

    /// Row-major `[rows, cols]` values, or their transpose stored `[cols, rows]`, as an operand.
    fn operand(v: &[f32], rows: usize, cols: usize, transposed: bool) -> Operand {
        match transposed {
            false => Operand(v.as_ptr(), cols as isize, 1),
            true => Operand(v.as_ptr(), 1, rows as isize),
        }
    }

    #[test]
    fn a_product_cut_into_bands_has_the_bits_of_one_call() {
        // Both split directions, the four layout pairs, depths below and above gemm's depth
        // block (512), band edges off the tile height.
        for &(m, k, n) in &[
            (200, 700, 900),
            (900, 300, 200),
            (450, 1100, 450),
            (130, 64, 1000),
        ] {
            let plan = split(m, n, 2).expect("large enough to split");
            for (at, bt) in [(false, false), (false, true), (true, false), (true, true)] {
                let (a, b) = (values(m * k, 7), values(k * n, 8));
                let (lhs, rhs) = (operand(&a, m, k, at), operand(&b, k, n, bt));
                // SAFETY: the operands address `a` and `b`, which outlive the calls.
                let (banded, whole) = unsafe {
                    (
                        product_in_bands([m, k, n], lhs, rhs, Some(plan.clone()), true),
                        product_in_bands([m, k, n], lhs, rhs, None, false),
                    )
                };
                let same = banded
                    .iter()
                    .zip(&whole)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "m{m} k{k} n{n} transposed {at}/{bt}");
            }
        }
        assert!(split(2000, 2000, 1).is_none(), "one thread");
        assert!(split(64, 5000, 2).is_none(), "a side of one tile");
    }

    #[test]
    fn other_shapes_and_layouts_are_left_to_burn() {
        let x = |m: usize| tensor(values(m * 8, 3), [m, 8]);
        let w = tensor(values(8 * 30, 4), [8, 30]);
        assert!(
            small_matmul(&x(MAX_ROWS + 1), &w).is_none(),
            "too many rows"
        );
        // Columns 0..30 of a [8, 60] tensor: row stride 60, neither layout.
        let narrowed = tensor(values(8 * 60, 5), [8, 60]).narrow(1, 0, 30);
        assert!(small_matmul(&x(4), &narrowed).is_none(), "strided W");
        assert!(small_matmul(&x(4), &w).is_some() || !simd::available());
    }
}
