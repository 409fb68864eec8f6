//! The fused kernels on plain slices: one row (or one chunk of elements) each, written so that
//! the compiler vectorises them (eight independent accumulators, an exponential without a libm
//! call), and compiled twice, for AVX2 + FMA (picked at run time) and for the baseline target.

/// Defines `pub fn $name` running `$generic` compiled for AVX2 + FMA when the CPU has them.
macro_rules! with_avx2 {
    ($(#[$doc:meta])* pub fn $name:ident($($a:ident: $t:ty),*) $(-> $r:ty)? = $generic:ident) => {
        $(#[$doc])*
        pub fn $name($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($a: $t),*) $(-> $r)? {
                    $generic($($a),*)
                }
                if crate::fused::simd_allowed()
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has the features `avx2` is compiled for.
                    return unsafe { avx2($($a),*) };
                }
            }
            $generic($($a),*)
        }
    };
}

with_avx2! {
    /// `out = x − max(x) − ln Σ exp(x − max(x))` over one row.
    pub fn log_softmax(x: &[f32], out: &mut [f32]) = log_softmax_generic
}

with_avx2! {
    /// `dx = g − exp(y)·Σ g` over one row, for `y` the output of [`log_softmax`] and `g` the
    /// gradient at it.
    pub fn log_softmax_backward(y: &[f32], g: &[f32], dx: &mut [f32]) = log_softmax_backward_generic
}

with_avx2! {
    /// `out = exp(x − max(x)) / Σ exp(x − max(x))` over one row.
    pub fn softmax(x: &[f32], out: &mut [f32]) = softmax_generic
}

with_avx2! {
    /// `dx = p·(g − Σ p·g)` over one row, for `p` the output of [`softmax`].
    pub fn softmax_backward(p: &[f32], g: &[f32], dx: &mut [f32]) = softmax_backward_generic
}

with_avx2! {
    /// `Σ exp(a)·(a − b)` over one row.
    pub fn kl(a: &[f32], b: &[f32]) -> f32 = kl_generic
}

with_avx2! {
    /// `Σ exp(a)·a` over one row.
    pub fn expected(a: &[f32]) -> f32 = expected_generic
}

with_avx2! {
    /// `out = x·σ(2√(2/π)·x·(1 + 0.044715x²))`, GPT-2's `gelu_new`, element by element.
    pub fn gelu_tanh(x: &[f32], out: &mut [f32]) = gelu_tanh_generic
}

with_avx2! {
    /// `dx = g·d/dx[x·σ(u(x))] = g·(σ(u) + x·σ(u)(1 − σ(u))·u'(x))`, element by element.
    pub fn gelu_tanh_backward(x: &[f32], g: &[f32], dx: &mut [f32]) = gelu_tanh_backward_generic
}

/// `out = x·σ(x)` (SiLU), element by element, with the exponential and the operation order
/// of burn's `silu` on flex (`x · sigmoid(x)`, libm's `exp`), so the result is the same to the
/// bit; only the pass is one and multi-threaded. Not vectorised: libm's `exp` is a call.
pub fn silu(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * libm_sigmoid(v);
    }
}

/// `dx = g·σ(x) + g·x·σ(x)(1 − σ(x))`: the two gradients burn's autodiff gives `x` through
/// `x · sigmoid(x)` (the product's, then the sigmoid's backward `g·s·(1 − s)` applied to the
/// product's gradient `g·x`), in its order, summed as its gradient accumulation sums them.
pub fn silu_backward(x: &[f32], g: &[f32], dx: &mut [f32]) {
    for ((d, &v), &gv) in dx.iter_mut().zip(x).zip(g) {
        let s = libm_sigmoid(v);
        *d = gv * s + gv * v * s * (1.0 - s);
    }
}

/// burn-flex's `sigmoid` for f32, term for term: `1/(1 + e^−x)` for `x ≥ 0`, `e^x/(1 + e^x)`
/// below, so that neither form overflows.
#[inline(always)]
fn libm_sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

const LANES: usize = 8;

#[inline(always)]
fn log_softmax_generic(x: &[f32], out: &mut [f32]) {
    let max = row_max(x);
    if !max.is_finite() {
        // A row of −∞ (or one holding +∞/NaN) has no finite normaliser; the composite's
        // arithmetic gives NaN or −∞ there, and so does this.
        let lse = max + x.iter().map(|&v| (v - max).exp()).sum::<f32>().ln();
        out.iter_mut().zip(x).for_each(|(o, &v)| *o = v - lse);
        return;
    }
    let sum = lane_fold(x, 0.0, |a, v| a + exp(v - max), |a, b| a + b);
    let shift = max + sum.ln();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v - shift;
    }
}

#[inline(always)]
fn log_softmax_backward_generic(y: &[f32], g: &[f32], dx: &mut [f32]) {
    let gsum = lane_fold(g, 0.0, |a, v| a + v, |a, b| a + b);
    for ((d, &yv), &gv) in dx.iter_mut().zip(y).zip(g) {
        *d = gv - exp(yv) * gsum;
    }
}

#[inline(always)]
fn softmax_generic(x: &[f32], out: &mut [f32]) {
    let max = row_max(x);
    if !max.is_finite() {
        let sum: f32 = x.iter().map(|&v| (v - max).exp()).sum();
        out.iter_mut()
            .zip(x)
            .for_each(|(o, &v)| *o = (v - max).exp() / sum);
        return;
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = exp(v - max);
    }
    let inv = 1.0 / lane_fold(out, 0.0, |a, v| a + v, |a, b| a + b);
    out.iter_mut().for_each(|o| *o *= inv);
}

#[inline(always)]
fn softmax_backward_generic(p: &[f32], g: &[f32], dx: &mut [f32]) {
    let dot = dot(p, g);
    for ((d, &pv), &gv) in dx.iter_mut().zip(p).zip(g) {
        *d = pv * (gv - dot);
    }
}

#[inline(always)]
fn kl_generic(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for k in 0..LANES {
            acc[k] += term(ca[k], ca[k] - cb[k]);
        }
    }
    let done = a.len() / LANES * LANES;
    let tail: f32 = a[done..]
        .iter()
        .zip(&b[done..])
        .map(|(&x, &y)| term(x, x - y))
        .sum();
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn expected_generic(a: &[f32]) -> f32 {
    lane_fold(a, 0.0, |acc, v| acc + term(v, v), |x, y| x + y)
}

/// `2·√(2/π)` and the cubic coefficient of `gelu_new`.
const GELU_C: f32 = 2.0 * 0.797_884_6;
const GELU_A: f32 = 0.044_715;

#[inline(always)]
fn gelu_tanh_generic(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        let u = GELU_C * v * (1.0 + GELU_A * v * v);
        *o = v * sigmoid(u);
    }
}

#[inline(always)]
fn gelu_tanh_backward_generic(x: &[f32], g: &[f32], dx: &mut [f32]) {
    for ((d, &v), &gv) in dx.iter_mut().zip(x).zip(g) {
        let u = GELU_C * v * (1.0 + GELU_A * v * v);
        let s = sigmoid(u);
        let du = GELU_C * (1.0 + 3.0 * GELU_A * v * v);
        *d = gv * (s + v * s * (1.0 - s) * du);
    }
}

/// `1 / (1 + exp(−u))`, saturating to 0 and 1.
#[inline(always)]
fn sigmoid(u: f32) -> f32 {
    1.0 / (1.0 + exp(-u.max(-87.0)))
}

#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    lane_fold(x, f32::NEG_INFINITY, |a, v| a.max(v), f32::max)
}

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for k in 0..LANES {
            acc[k] += ca[k] * cb[k];
        }
    }
    let done = a.len() / LANES * LANES;
    let tail: f32 = a[done..].iter().zip(&b[done..]).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// `exp(a)·w`, taken as 0 where `exp(a)` is 0 (a masked entry of log-probability −∞, whose
/// `w` may be ±∞ or NaN: the zero-probability term of an expectation).
#[inline(always)]
fn term(a: f32, w: f32) -> f32 {
    let p = exp(a);
    if p == 0.0 { 0.0 } else { p * w }
}

/// A fold over `x` in [`LANES`] independent accumulators (which the compiler keeps in one
/// vector register), combined with `combine` at the end.
#[inline(always)]
fn lane_fold(
    x: &[f32],
    init: f32,
    step: impl Fn(f32, f32) -> f32,
    combine: impl Fn(f32, f32) -> f32,
) -> f32 {
    let mut acc = [init; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            acc[k] = step(acc[k], c[k]);
        }
    }
    let mut total = tail.iter().fold(init, |a, &v| step(a, v));
    for a in acc {
        total = combine(total, a);
    }
    total
}

/// `exp(x)` with a relative error under 2e-7 for `x ≤ 88` (beyond, the value of 88); 0 below
/// −87.3 (where f32's normal range ends). Range reduction `x = n·ln 2 + r`, |r| ≤ ln 2 / 2,
/// then the degree-6 polynomial of the Cephes library for `exp(r)`, scaled by `2^n` through the
/// exponent bits. Branch-free, so it vectorises.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n·LN2_HI is exact for the n that occur.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2²³ rounds to an integer, which then sits in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.3, 88.0);
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    let bits = (t.to_bits().wrapping_sub(ROUND.to_bits()) as i32 + 127) << 23;
    let scaled = er * f32::from_bits(bits as u32);
    if x < -87.3 { 0.0 } else { scaled }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_within_2e_7_relative() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_37;
        }
        assert!(worst < 2e-7, "largest relative error {worst:e}");
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    /// An odd row length, so the tails of the eight-lane loops run too.
    fn row() -> Vec<f32> {
        (0..1003)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect()
    }

    fn grad() -> Vec<f32> {
        (0..1003).map(|i| ((i % 13) as f32 - 6.0) / 3.0).collect()
    }

    #[test]
    fn log_softmax_and_softmax_rows_match_the_definitions() {
        let (x, g) = (row(), grad());
        let max = f64::from(x.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        let z: f64 = x.iter().map(|&v| (f64::from(v) - max).exp()).sum();
        let lse = max + z.ln();
        let p: Vec<f64> = x.iter().map(|&v| (f64::from(v) - lse).exp()).collect();
        let gsum: f64 = g.iter().map(|&v| f64::from(v)).sum();
        let pg: f64 = p.iter().zip(&g).map(|(p, &g)| p * f64::from(g)).sum();

        let mut ls = vec![0.0; x.len()];
        log_softmax(&x, &mut ls);
        let mut dls = vec![0.0; x.len()];
        log_softmax_backward(&ls, &g, &mut dls);
        let mut sm = vec![0.0; x.len()];
        softmax(&x, &mut sm);
        let mut dsm = vec![0.0; x.len()];
        softmax_backward(&sm, &g, &mut dsm);
        for i in 0..x.len() {
            let (xi, gi) = (f64::from(x[i]), f64::from(g[i]));
            assert!((f64::from(ls[i]) - (xi - lse)).abs() < 1e-5);
            assert!((f64::from(dls[i]) - (gi - p[i] * gsum)).abs() < 1e-5);
            assert!((f64::from(sm[i]) - p[i]).abs() < 1e-7);
            assert!((f64::from(dsm[i]) - p[i] * (gi - pg)).abs() < 1e-6);
        }
    }

    #[test]
    fn gelu_and_its_derivative_match_the_tanh_form() {
        let (x, g) = (row(), grad());
        let mut y = vec![0.0; x.len()];
        gelu_tanh(&x, &mut y);
        let mut dx = vec![0.0; x.len()];
        gelu_tanh_backward(&x, &g, &mut dx);
        let gelu = |v: f64| {
            0.5 * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
        };
        for i in 0..x.len() {
            let v = f64::from(x[i]);
            assert!((f64::from(y[i]) - gelu(v)).abs() < 2e-6, "gelu({v})");
            // A central difference of the f64 reference.
            let h = 1e-5;
            let slope = (gelu(v + h) - gelu(v - h)) / (2.0 * h);
            let want = f64::from(g[i]) * slope;
            assert!(
                (f64::from(dx[i]) - want).abs() < 1e-5,
                "gelu'({v}): {} vs {want}",
                dx[i]
            );
        }
    }
}
