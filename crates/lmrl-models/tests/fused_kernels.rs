//! The functions with fused CPU kernels against burn's composite ops (the definition, op by op):
//! `gather_columns` (values and gradients, to the bit), `log_softmax` (values and gradients, on and off the autodiff device, 2-D and 3-D, with masked
//! −∞ entries as top-k filtering leaves them), `gelu_tanh` and the attention softmax (values and
//! gradients), `silu` and `dense`'s matrix product (values and gradients, to the bit); `kl_rows` and `entropy_rows` against their formulas and hand-computed values.
use burn::tensor::activation;
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use lmrl_models::attention::attend;
use lmrl_models::{dense, entropy_rows, gather_columns, gelu_tanh, kl_rows, log_softmax, silu};

fn device() -> Device {
    let d = Device::flex();
    d.seed(7);
    d
}

fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    let a = a.into_data().try_to_vec::<f32>().unwrap();
    let b = b.into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| {
            if x == y {
                0.0 // equal infinities too
            } else {
                (x - y).abs()
            }
        })
        .fold(0.0, f32::max)
}

#[test]
fn values_match_the_composite() {
    let device = device();
    // Logit-like scale (a model's logits span tens of nats); an odd row length.
    let x = Tensor::<2>::random([37, 1003], Distribution::Normal(0.0, 4.0), &device);
    let d = max_abs_diff(log_softmax(x.clone()), activation::log_softmax(x, 1));
    assert!(d < 2e-5, "max |fused − composite| = {d}");

    let x3 = Tensor::<3>::random([3, 5, 257], Distribution::Normal(0.0, 4.0), &device);
    let d = max_abs_diff(log_softmax(x3.clone()), activation::log_softmax(x3, 2));
    assert!(d < 2e-5, "3-D: max |fused − composite| = {d}");
}

#[test]
fn masked_entries_stay_minus_infinity() {
    let device = device();
    let ninf = f32::NEG_INFINITY;
    let x = Tensor::<2>::from_data(
        TensorData::new(vec![1.0, ninf, 3.0, ninf, 0.5, 0.5, 0.5, 0.5], [2, 4]),
        &device,
    );
    let got = log_softmax(x).into_data().try_to_vec::<f32>().unwrap();
    let lse = (1f32.exp() + 3f32.exp()).ln();
    let want = [1.0 - lse, ninf, 3.0 - lse, ninf];
    for (g, w) in got[..4].iter().zip(want) {
        assert!(*g == w || (g - w).abs() < 1e-6, "{g} vs {w}");
    }
    for g in &got[4..] {
        assert!((g - 0.25f32.ln()).abs() < 1e-6, "{g}");
    }
}

#[test]
fn gradients_match_the_composite() {
    let plain = device();
    let ad = plain.clone().autodiff();
    let x0 = Tensor::<2>::random([24, 517], Distribution::Normal(0.0, 3.0), &plain);
    let w = Tensor::<2>::random([24, 517], Distribution::Normal(0.0, 1.0), &plain);
    let grad_of = |fused: bool| {
        let x = Tensor::<2>::from_data(x0.to_data(), &ad).require_grad();
        let y = if fused {
            log_softmax(x.clone())
        } else {
            activation::log_softmax(x.clone(), 1)
        };
        // A loss whose upstream gradient differs per entry, so both terms of the backward count.
        let loss = (y * Tensor::from_data(w.to_data(), &ad)).sum();
        let grads = loss.backward();
        x.grad(&grads).expect("x is tracked")
    };
    let d = max_abs_diff(grad_of(true), grad_of(false));
    // Each row's gradient holds Σ_v g over 517 upstream gradients of scale 1 (|Σ| ≈ 20):
    // f32 rounding of that sum, in a different order, is ~1e-5.
    assert!(d < 1e-4, "max |∂fused − ∂composite| = {d}");
}

/// A gather of one entry per row, as the RL losses take it: the gradient is `onehot − softmax`
/// times the upstream gradient, checked against that closed form.
#[test]
fn gather_gradient_is_onehot_minus_softmax() {
    let plain = device();
    let ad = plain.clone().autodiff();
    let x0 = Tensor::<2>::random([6, 11], Distribution::Normal(0.0, 2.0), &plain);
    let ids = Tensor::<2, burn::tensor::Int>::from_data(
        TensorData::new(vec![0i64, 3, 10, 5, 5, 1], [6, 1]),
        &ad,
    );
    let x = Tensor::<2>::from_data(x0.to_data(), &ad).require_grad();
    let loss = log_softmax(x.clone()).gather(1, ids).sum();
    let grad = x
        .grad(&loss.backward())
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let p = activation::softmax(x0, 1)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let id = [0usize, 3, 10, 5, 5, 1];
    for r in 0..6 {
        for v in 0..11 {
            let want = f32::from(u8::from(v == id[r])) - p[r * 11 + v];
            let got = grad[r * 11 + v];
            assert!(
                (got - want).abs() < 1e-6,
                "row {r} col {v}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn gather_columns_is_burns_gather_to_the_bit_with_gradients() {
    let plain = device();
    let ad = plain.clone().autodiff();
    // A contiguous tensor and a narrowed view of a wider one; repeated columns.
    let wide = Tensor::<2>::random([7, 340], Distribution::Normal(0.0, 2.0), &plain);
    let up = Tensor::<2>::random([7, 1], Distribution::Normal(0.0, 1.0), &ad);
    let ids = Tensor::<2, burn::tensor::Int>::from_data(
        TensorData::new(vec![0i64, 299, 17, 17, 150, 3, 0], [7, 1]),
        &ad,
    );
    for narrowed in [false, true] {
        let run = |ours: bool| {
            let w = Tensor::<2>::from_data(wide.to_data(), &ad).require_grad();
            let x = match narrowed {
                true => w.clone().narrow(1, 20, 300),
                false => w.clone(),
            };
            let y = match ours {
                true => gather_columns(x, ids.clone()),
                false => x.gather(1, ids.clone()),
            };
            let grads = (y.clone() * up.clone()).sum().backward();
            (bits(y.inner()), bits(w.grad(&grads).expect("tracked")))
        };
        let (ours, burns) = (run(true), run(false));
        assert!(ours.0 == burns.0, "narrowed {narrowed}: values differ");
        assert!(ours.1 == burns.1, "narrowed {narrowed}: gradients differ");
    }
}

/// A view (a narrowed, non-contiguous slice) is read at its own offset and strides.
#[test]
fn views_are_read_where_they_are() {
    let device = device();
    let x = Tensor::<2>::random([10, 300], Distribution::Normal(0.0, 3.0), &device);
    let view = x.clone().narrow(0, 3, 4).narrow(1, 17, 200);
    let d = max_abs_diff(log_softmax(view.clone()), activation::log_softmax(view, 1));
    assert!(d < 2e-5, "{d}");
    let t = x.transpose();
    let d = max_abs_diff(log_softmax(t.clone()), activation::log_softmax(t, 1));
    assert!(d < 2e-5, "transposed: {d}");
}

#[test]
fn kl_and_entropy_rows_match_their_formulas() {
    let plain = device();
    for device in [plain.clone(), plain.autodiff()] {
        let a = log_softmax(Tensor::<2>::random(
            [9, 1001],
            Distribution::Normal(0.0, 3.0),
            &device,
        ));
        let b = log_softmax(Tensor::<2>::random(
            [9, 1001],
            Distribution::Normal(0.0, 3.0),
            &device,
        ));
        let p = a.clone().exp();
        let kl_want = (p.clone() * (a.clone() - b.clone()))
            .sum_dim(1)
            .reshape([9]);
        let ent_want = (p * a.clone()).sum_dim(1).neg().reshape([9]);
        let d = max_abs_diff(kl_rows(a.clone(), b), kl_want);
        assert!(d < 1e-5, "kl: {d}");
        let d = max_abs_diff(entropy_rows(a.clone()), ent_want);
        assert!(d < 1e-5, "entropy: {d}");
        // Against itself the KL is 0.
        let d = max_abs_diff(kl_rows(a.clone(), a), Tensor::zeros([9], &device));
        assert!(d < 1e-6, "kl(p, p): {d}");
    }
}

#[test]
fn kl_and_entropy_rows_by_hand() {
    let device = device();
    // p = (1/2, 1/4, 1/4), q = (1/4, 1/4, 1/2): KL = ½ ln 2 − ¼ ln 2 = ¼ ln 2; H(p) = 1.5 ln 2.
    let lp = Tensor::<2>::from_data(
        TensorData::new(vec![0.5f32.ln(), 0.25f32.ln(), 0.25f32.ln()], [1, 3]),
        &device,
    );
    let lq = Tensor::<2>::from_data(
        TensorData::new(vec![0.25f32.ln(), 0.25f32.ln(), 0.5f32.ln()], [1, 3]),
        &device,
    );
    let kl = kl_rows(lp.clone(), lq).into_scalar::<f32>();
    assert!((kl - 0.25 * 2f32.ln()).abs() < 1e-6, "{kl}");
    let h = entropy_rows(lp).into_scalar::<f32>();
    assert!((h - 1.5 * 2f32.ln()).abs() < 1e-6, "{h}");
    // A zero-probability entry adds nothing to either.
    let ninf = f32::NEG_INFINITY;
    let lp = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, ninf], [1, 2]), &device);
    let lq = Tensor::<2>::from_data(TensorData::new(vec![(0.5f32).ln(), ninf], [1, 2]), &device);
    let kl = kl_rows(lp.clone(), lq).into_scalar::<f32>();
    assert!((kl - 2f32.ln()).abs() < 1e-6, "{kl}");
    assert_eq!(entropy_rows(lp).into_scalar::<f32>(), 0.0);
}

/// Value and input gradient of `f` at `x0` (on the autodiff device), with an upstream gradient
/// `w` that differs per entry.
fn value_and_grad<const D: usize>(
    x0: &Tensor<D>,
    w: &Tensor<D>,
    f: impl Fn(Tensor<D>) -> Tensor<D>,
) -> (Tensor<D>, Tensor<D>) {
    let ad = x0.device().autodiff();
    let x = Tensor::<D>::from_data(x0.to_data(), &ad).require_grad();
    let y = f(x.clone());
    let loss = (y.clone() * Tensor::from_data(w.to_data(), &ad)).sum();
    let grad = x.grad(&loss.backward()).expect("x is tracked");
    (y.inner(), grad)
}

#[test]
fn gelu_matches_the_composite_with_gradients() {
    let device = device();
    let x0 = Tensor::<3>::random([4, 9, 3001], Distribution::Normal(0.0, 3.0), &device);
    let w = Tensor::<3>::random([4, 9, 3001], Distribution::Normal(0.0, 1.0), &device);
    // x·σ(2√(2/π)·x·(1 + 0.044715x²)), op by op.
    let composite = |x: Tensor<3>| {
        let c = 2.0 * 0.797_884_560_802_865_4;
        let u = (x.clone() * x.clone())
            .mul_scalar(c * 0.044_715)
            .add_scalar(c)
            * x.clone();
        x * activation::sigmoid(u)
    };
    let (y_f, g_f) = value_and_grad(&x0, &w, gelu_tanh);
    let (y_c, g_c) = value_and_grad(&x0, &w, composite);
    let d = max_abs_diff(y_f, y_c);
    assert!(d < 2e-6, "values: {d}");
    let d = max_abs_diff(g_f, g_c);
    assert!(d < 1e-5, "gradients: {d}");
    // And without autodiff.
    let d = max_abs_diff(gelu_tanh(x0.clone()), composite(x0));
    assert!(d < 2e-6, "no-grad values: {d}");
}

#[test]
fn silu_is_burns_silu_to_the_bit_with_gradients() {
    let device = device();
    let x0 = Tensor::<3>::random([3, 7, 1536], Distribution::Normal(0.0, 4.0), &device);
    // Both branches of the sigmoid, zero, and values where e^±x saturates.
    let edges = [
        0.0, -0.0, 1e-30, -1e-30, 20.0, -20.0, 88.0, -88.0, 104.0, -104.0,
    ];
    let mut x0v = x0.into_data().try_to_vec::<f32>().unwrap();
    x0v[..edges.len()].copy_from_slice(&edges);
    let x0 = Tensor::<3>::from_data(TensorData::new(x0v, [3, 7, 1536]), &device);
    let w = Tensor::<3>::random([3, 7, 1536], Distribution::Normal(0.0, 1.0), &device);
    let (y_f, g_f) = value_and_grad(&x0, &w, silu);
    let (y_c, g_c) = value_and_grad(&x0, &w, activation::silu);
    assert!(bits(y_f) == bits(y_c), "values differ from burn's silu");
    assert!(bits(g_f) == bits(g_c), "gradients differ from burn's silu");
    assert!(
        bits(silu(x0.clone())) == bits(activation::silu(x0)),
        "no-grad values differ"
    );
}

/// The bits of a tensor.
fn bits<const D: usize>(t: Tensor<D>) -> Vec<u32> {
    let v = t.into_data().try_to_vec::<f32>().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn dense_products_are_burns_matmul_to_the_bit_with_gradients() {
    let device = device();
    let ad = device.clone().autodiff();
    // Few rows and many; a row-major weight and a transposed view (the tied vocabulary head,
    // whose gradient is computed in the weight's own layout); sizes above and below the
    // threshold for splitting over threads.
    for (b, s, k, n, transposed) in [
        (2, 3, 24, 40, false),
        (4, 37, 96, 200, false),
        (3, 41, 64, 300, true),
        (1, 5, 8, 12, true),
        // Large enough to be cut into one band per thread, forward and backward.
        (4, 100, 200, 500, true),
        (4, 100, 200, 500, false),
    ] {
        let x0 = Tensor::<3>::random([b, s, k], Distribution::Normal(0.0, 1.0), &device);
        let w0 = match transposed {
            false => Tensor::<2>::random([k, n], Distribution::Normal(0.0, 1.0), &device),
            true => Tensor::<2>::random([n, k], Distribution::Normal(0.0, 1.0), &device),
        };
        let up = Tensor::<3>::random([b, s, n], Distribution::Normal(0.0, 1.0), &device);
        let run = |ours: bool| {
            let x = Tensor::<3>::from_data(x0.to_data(), &ad).require_grad();
            let w = Tensor::<2>::from_data(w0.to_data(), &ad).require_grad();
            let wv = if transposed {
                w.clone().transpose()
            } else {
                w.clone()
            };
            let y = match ours {
                true => dense(x.clone(), wv, None),
                false => x.clone().reshape([b * s, k]).matmul(wv).reshape([b, s, n]),
            };
            let loss = (y.clone() * Tensor::from_data(up.to_data(), &ad)).sum();
            let g = loss.backward();
            let (gx, gw) = (
                x.grad(&g).expect("x tracked"),
                w.grad(&g).expect("w tracked"),
            );
            (bits(y.inner()), bits(gx), bits(gw))
        };
        let case = format!("[{b}, {s}, {k}]·[{k}, {n}], transposed {transposed}");
        let (ours, burns) = (run(true), run(false));
        assert!(ours.0 == burns.0, "{case}: values differ");
        assert!(ours.1 == burns.1, "{case}: x gradients differ");
        assert!(ours.2 == burns.2, "{case}: w gradients differ");
        // Without autodiff (more than 32 rows: the GEMM path, not the decoding kernels).
        if b * s > 32 {
            let wv = if transposed {
                w0.clone().transpose()
            } else {
                w0.clone()
            };
            let ours = dense(x0.clone(), wv.clone(), None);
            let burns = x0.clone().reshape([b * s, k]).matmul(wv).reshape([b, s, n]);
            assert!(bits(ours) == bits(burns), "{case}: no-grad values differ");
        }
    }
}

#[test]
fn attention_softmax_matches_the_composite_with_gradients() {
    let device = device();
    let (b, h, s, d) = (2, 4, 33, 16);
    let q0 = Tensor::<4>::random([b, h, s, d], Distribution::Normal(0.0, 1.0), &device);
    let k = Tensor::<4>::random([b, h, s, d], Distribution::Normal(0.0, 1.0), &device);
    let v = Tensor::<4>::random([b, h, s, d], Distribution::Normal(0.0, 1.0), &device);
    // Causal, with the first key of batch row 1 masked (left padding).
    let mut mask = vec![1i64; b * s];
    mask[s] = 0;
    let mask = Tensor::<2, burn::tensor::Int>::from_data(TensorData::new(mask, [b, s]), &device);
    let bias = lmrl_models::attention::attention_bias(mask, 0, s);
    let w = Tensor::<3>::random([b, s, h * d], Distribution::Normal(0.0, 1.0), &device);
    let composite = |q: Tensor<4>| {
        let ad = q.device();
        let (k, v) = (
            Tensor::from_data(k.to_data(), &ad),
            Tensor::from_data(v.to_data(), &ad),
        );
        let scores = q
            .mul_scalar(1.0 / (d as f64).sqrt())
            .matmul(k.swap_dims(2, 3))
            + Tensor::from_data(bias.to_data(), &ad);
        let ctx = activation::softmax(scores, 3).matmul(v);
        ctx.swap_dims(1, 2).reshape([b, s, h * d])
    };
    let fused = |q: Tensor<4>| {
        let ad = q.device();
        let (k, v) = (
            Tensor::from_data(k.to_data(), &ad),
            Tensor::from_data(v.to_data(), &ad),
        );
        attend(q, k, v, Tensor::from_data(bias.to_data(), &ad))
    };
    let grad_of = |f: &dyn Fn(Tensor<4>) -> Tensor<3>| {
        let ad = device.clone().autodiff();
        let q = Tensor::<4>::from_data(q0.to_data(), &ad).require_grad();
        let y = f(q.clone());
        let loss = (y.clone() * Tensor::from_data(w.to_data(), &ad)).sum();
        (y.inner(), q.grad(&loss.backward()).expect("q is tracked"))
    };
    let (y_f, g_f) = grad_of(&fused);
    let (y_c, g_c) = grad_of(&composite);
    let dv = max_abs_diff(y_f, y_c);
    assert!(dv < 1e-5, "values: {dv}");
    let dg = max_abs_diff(g_f, g_c);
    assert!(dg < 1e-5, "gradients: {dg}");
}

/// `LMRL_PORTABLE_KERNELS=1` (CI runs this file once with it) turns the x86 SIMD kernels off, so
/// every test here then checks the portable code against burn's ops.
#[test]
fn the_portable_switch_is_honoured() {
    let portable = std::env::var("LMRL_PORTABLE_KERNELS").is_ok_and(|v| !v.is_empty() && v != "0");
    assert_eq!(lmrl_models::simd_kernels_allowed(), !portable);
}
