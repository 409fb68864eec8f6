use burn::tensor::activation::{gelu_approximate, softmax};
use burn::tensor::{Device, Distribution, Int, Tensor};
use burn::module::Module;
use lmrl_models::{CausalLm, KvCache, ModelConfig};
use std::time::Instant;

fn t<F: FnMut()>(name: &str, reps: usize, mut f: F) -> f64 {
    f();
    let s = Instant::now();
    for _ in 0..reps { f(); }
    let ms = s.elapsed().as_secs_f64() * 1e3 / reps as f64;
    println!("{name:50} {ms:9.3} ms");
    ms
}
fn r<const D: usize>(s: [usize; D], d: &Device) -> Tensor<D> { Tensor::random(s, Distribution::Normal(0.0, 1.0), d) }
fn sync<const D: usize>(x: Tensor<D>) { let _ = x.into_data(); }

fn gpt2() -> ModelConfig {
    let v = serde_json::json!({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "n_inner": null, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
        "bos_token_id": 50256, "eos_token_id": 50256});
    ModelConfig::from_hf_json(std::path::Path::new("x"), &v).unwrap()
}

#[test]
#[ignore]
fn ops() {
    let d = Device::flex();
    let w = r([768, 2304], &d); let x = r([8, 768], &d);
    t("mm 8x768x2304", 20, || sync(x.clone().matmul(w.clone())));
    let w2 = r([768, 3072], &d);
    t("mm 8x768x3072", 20, || sync(x.clone().matmul(w2.clone())));
    let w3 = r([3072, 768], &d); let x3 = r([8, 3072], &d);
    t("mm 8x3072x768", 20, || sync(x3.clone().matmul(w3.clone())));
    let wte = r([50257, 768], &d);
    t("mm 8x768 x wte^T view", 5, || sync(x.clone().matmul(wte.clone().transpose())));
    let xb = r([128, 768], &d);
    t("mm 128x768 x wte^T view", 3, || sync(xb.clone().matmul(wte.clone().transpose())));
    let xc = r([512, 768], &d);
    t("mm 512x768 x wte^T view", 2, || sync(xc.clone().matmul(wte.clone().transpose())));
    let wc = wte.clone().transpose().reshape([768, 50257]) ;
    let wc = Tensor::<2>::from_data(wc.into_data(), &d);
    t("mm 512x768 x wte^T contiguous", 2, || sync(xc.clone().matmul(wc.clone())));
    t("mm 512x768x3072", 5, || sync(xc.clone().matmul(w2.clone())));
    let h = r([8, 64, 3072], &d);
    t("gelu_approximate 8x64x3072", 5, || sync(gelu_approximate(h.clone())));
    t("tanh 8x64x3072", 5, || sync(h.clone().tanh()));
    t("powi 3 8x64x3072", 5, || sync(h.clone().powi_scalar(3)));
    t("powf 3 8x64x3072", 5, || sync(h.clone().powf_scalar(3.0)));
    t("x*x*x 8x64x3072", 5, || sync(h.clone() * h.clone() * h.clone()));
    let lg = r([504, 50257], &d);
    t("log_softmax 504xV", 3, || sync(burn::tensor::activation::log_softmax(lg.clone(), 1)));
    let ln = burn::nn::LayerNormConfig::new(768).init(&d);
    let hh = r([8, 64, 768], &d);
    t("layernorm 8x64x768", 10, || sync(ln.forward(hh.clone())));
    let sc = r([8, 12, 64, 64], &d);
    t("softmax 8x12x64x64", 10, || sync(softmax(sc.clone(), 3)));
    let q = r([8, 12, 64, 64], &d);
    t("attn mm q k^T 8x12x64x64 (contig)", 10, || sync(q.clone().matmul(q.clone().swap_dims(2,3))));
}

#[test]
#[ignore]
fn model_phases() {
    let d = Device::flex();
    let m = CausalLm::init(&gpt2(), &d);
    let ids = Tensor::<2, Int>::random([8, 16], Distribution::Uniform(0.0, 50000.0), &d);
    let pos = Tensor::<1, Int>::arange(0..16, &d).reshape([1, 16]).expand([8, 16]);
    let mask = Tensor::<2, Int>::ones([8, 16], &d);
    t("prefill 8x16", 3, || { let mut c = KvCache::new(12); sync(m.forward(ids.clone(), pos.clone(), mask.clone(), Some(&mut c)).logits) });
    let mut c = KvCache::new(12);
    let _ = m.forward(ids.clone(), pos.clone(), mask.clone(), Some(&mut c));
    let sid = Tensor::<2, Int>::zeros([8, 1], &d);
    let spos = Tensor::<2, Int>::full([8, 1], 16, &d);
    let smask = Tensor::<2, Int>::ones([8, 17], &d);
    t("decode step", 5, || { let mut cc = c.clone(); sync(m.forward(sid.clone(), spos.clone(), smask.clone(), Some(&mut cc)).logits) });
    t("valid() of model", 3, || { let v = m.valid(); std::hint::black_box(v); });
}

fn phase(name: &str) {
    let d = Device::flex();
    let ad = d.clone().autodiff();
    let m = CausalLm::init(&gpt2(), &ad);
    let mi = m.valid();
    match name {
        "fwd" => {
            let ids = Tensor::<2, Int>::random([8, 64], Distribution::Uniform(0.0, 50000.0), &d);
            let mask = Tensor::<2, Int>::ones([8, 64], &d);
            tmin("fwd no-grad 8x64", 4, || sync(mi.forward_simple(ids.clone(), mask.clone()).logits));
        }
        "decode" => {
            let ids = Tensor::<2, Int>::random([8, 16], Distribution::Uniform(0.0, 50000.0), &d);
            let pos = Tensor::<1, Int>::arange(0..16, &d).reshape([1, 16]).expand([8, 16]);
            let mask = Tensor::<2, Int>::ones([8, 16], &d);
            let mut c = KvCache::new(12);
            let _ = mi.forward(ids.clone(), pos.clone(), mask.clone(), Some(&mut c));
            let sid = Tensor::<2, Int>::zeros([8, 1], &d);
            let spos = Tensor::<2, Int>::full([8, 1], 16, &d);
            let smask = Tensor::<2, Int>::ones([8, 17], &d);
            tmin("decode step", 20, || { let mut cc = c.clone(); sync(mi.forward(sid.clone(), spos.clone(), smask.clone(), Some(&mut cc)).logits) });
        }
        "fwdbwd" => {
            let ids = Tensor::<2, Int>::random([8, 64], Distribution::Uniform(0.0, 50000.0), &ad);
            let mask = Tensor::<2, Int>::ones([8, 64], &ad);
            t("fwd+bwd 8x64", 2, || {
                let logits = m.forward_simple(ids.clone(), mask.clone()).logits;
                let pred = logits.narrow(1, 0, 63).reshape([504, 50257]);
                let tg = ids.clone().narrow(1, 1, 63).reshape([504, 1]);
                let loss = burn::tensor::activation::log_softmax(pred, 1).gather(1, tg).mean().neg();
                let g = loss.backward(); drop(g);
            });
        }
        _ => {}
    }
}
#[test] #[ignore] fn p_fwd() { phase("fwd") }
#[test] #[ignore] fn p_decode() { phase("decode") }
#[test] #[ignore] fn p_fwdbwd() { phase("fwdbwd") }
#[test]
#[ignore]
fn mm_shapes() {
    let d = Device::flex();
    for (k, n) in [(768usize, 2304usize), (768, 768), (768, 3072), (3072, 768)] {
        let w = r([k, n], &d);
        let x2 = r([8, k], &d);
        let x3 = r([8, 1, k], &d);
        t(&format!("2d [8,{k}]x[{k},{n}]"), 20, || sync(x2.clone().matmul(w.clone())));
        t(&format!("3d [8,1,{k}]x[1,{k},{n}]"), 20, || sync(x3.clone().matmul(w.clone().unsqueeze::<3>())));
        let wt = Tensor::<2>::from_data(w.clone().transpose().into_data(), &d); // [n,k] contiguous
        t(&format!("2d [8,{k}]x[{n},{k}]^T view"), 20, || sync(x2.clone().matmul(wt.clone().transpose())));
        let x1 = r([1, k], &d);
        t(&format!("2d [1,{k}]x[{k},{n}]"), 20, || sync(x1.clone().matmul(w.clone())));
    }
    let wte = r([50257, 768], &d);
    let x3 = r([8, 1, 768], &d);
    let x2 = r([8, 768], &d);
    t("head 2d [8,768] x wte^T", 5, || sync(x2.clone().matmul(wte.clone().transpose())));
    t("head 3d [8,1,768] x wte^T", 5, || sync(x3.clone().matmul(wte.clone().transpose().unsqueeze::<3>())));
    let wc = Tensor::<2>::from_data(wte.clone().transpose().into_data(), &d);
    t("head 2d [8,768] x wteT contiguous", 5, || sync(x2.clone().matmul(wc.clone())));
    t("head 3d [8,1,768] x wteT contiguous", 5, || sync(x3.clone().matmul(wc.clone().unsqueeze::<3>())));
}
fn chunked(x: Tensor<2>, w: Tensor<2>, chunk: usize) -> Tensor<2> {
    let n = w.dims()[1];
    let parts: Vec<Tensor<2>> = (0..n).step_by(chunk).map(|s| x.clone().matmul(w.clone().narrow(1, s, chunk.min(n - s)))).collect();
    Tensor::cat(parts, 1)
}
#[test]
#[ignore]
fn mm_chunked() {
    let d = Device::flex();
    for (k, n, c) in [(768usize, 2304usize, 768usize), (768, 3072, 1024), (3072, 768, 256), (768, 2304, 1152)] {
        let w = r([k, n], &d);
        let x2 = r([8, k], &d);
        t(&format!("2d [8,{k}]x[{k},{n}]"), 20, || sync(x2.clone().matmul(w.clone())));
        t(&format!("chunked {c} [8,{k}]x[{k},{n}]"), 20, || sync(chunked(x2.clone(), w.clone(), c)));
    }
    let wte = r([50257, 768], &d);
    let x2 = r([8, 768], &d);
    t("head 2d [8,768] x wte^T", 5, || sync(x2.clone().matmul(wte.clone().transpose())));
    t("head chunked 1024 view", 5, || sync(chunked(x2.clone(), wte.clone().transpose(), 1024)));
    let wc = Tensor::<2>::from_data(wte.clone().transpose().into_data(), &d);
    t("head chunked 1024 contiguous", 5, || sync(chunked(x2.clone(), wc.clone(), 1024)));
    let x128 = r([128, 768], &d);
    t("head 128 view", 3, || sync(x128.clone().matmul(wte.clone().transpose())));
    t("head 128 contiguous", 3, || sync(x128.clone().matmul(wc.clone())));
    let x512 = r([512, 768], &d);
    let w = r([768, 3072], &d);
    t("512x768x3072", 5, || sync(x512.clone().matmul(w.clone())));
}
fn tmin<F: FnMut()>(name: &str, reps: usize, mut f: F) -> f64 {
    f();
    let mut best = f64::MAX; let mut tot = 0.0;
    for _ in 0..reps { let s = Instant::now(); f(); let e = s.elapsed().as_secs_f64()*1e3; best = best.min(e); tot += e; }
    println!("{name:50} min {best:9.3} ms  mean {:9.3}", tot / reps as f64);
    best
}
fn gelu_sig<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    const C: f64 = 2.0 * 0.7978845608028654;
    let t = (x.clone() * x.clone()).mul_scalar(C * 0.044715).add_scalar(C) * x.clone();
    x * burn::tensor::activation::sigmoid(t)
}
#[test]
#[ignore]
fn careful() {
    let d = Device::flex();
    let h = r([8, 64, 3072], &d);
    let a = gelu_approximate(h.clone()).into_data().to_vec::<f32>().unwrap();
    let b = gelu_sig(h.clone()).into_data().to_vec::<f32>().unwrap();
    let md = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    println!("gelu max abs diff {md:e}");
    tmin("gelu_approximate 8x64x3072", 10, || sync(gelu_approximate(h.clone())));
    tmin("gelu_sig 8x64x3072", 10, || sync(gelu_sig(h.clone())));
    tmin("sigmoid 8x64x3072", 10, || sync(burn::tensor::activation::sigmoid(h.clone())));
    for (k, n, c) in [(768usize, 2304usize, 768usize), (768, 3072, 1024), (3072, 768, 256), (768, 768, 768)] {
        let w = r([k, n], &d);
        let x2 = r([8, k], &d);
        tmin(&format!("2d [8,{k}]x[{k},{n}]"), 30, || sync(x2.clone().matmul(w.clone())));
        tmin(&format!("chunked {c} [8,{k}]x[{k},{n}]"), 30, || sync(chunked(x2.clone(), w.clone(), c)));
    }
    let wte = r([50257, 768], &d);
    let x2 = r([8, 768], &d);
    tmin("head 2d [8,768] x wte^T", 10, || sync(x2.clone().matmul(wte.clone().transpose())));
    tmin("head chunked 1024 view", 10, || sync(chunked(x2.clone(), wte.clone().transpose(), 1024)));
}
fn chunked2(x: Tensor<2>, w: Tensor<2>, chunk: usize) -> Tensor<2> {
    let n = w.dims()[1];
    let starts: Vec<usize> = (0..n).step_by(chunk).collect();
    let half = starts.len().div_ceil(2);
    let run = |ss: &[usize]| -> Vec<Tensor<2>> { ss.iter().map(|&s| x.clone().matmul(w.clone().narrow(1, s, chunk.min(n - s)))).collect() };
    let (a, b) = std::thread::scope(|sc| {
        let h = sc.spawn(|| run(&starts[half..]));
        let a = run(&starts[..half]);
        (a, h.join().unwrap())
    });
    Tensor::cat(a.into_iter().chain(b).collect(), 1)
}
#[test]
#[ignore]
fn careful2() {
    let d = Device::flex();
    for (k, n, c) in [(768usize, 2304usize, 768usize), (768, 3072, 768), (3072, 768, 192)] {
        let w = r([k, n], &d);
        let x2 = r([8, k], &d);
        tmin(&format!("2d [8,{k}]x[{k},{n}]"), 30, || sync(x2.clone().matmul(w.clone())));
        tmin(&format!("chunked {c}"), 30, || sync(chunked(x2.clone(), w.clone(), c)));
        tmin(&format!("chunked2 {c}"), 30, || sync(chunked2(x2.clone(), w.clone(), c)));
    }
    let wte = r([50257, 768], &d);
    let x2 = r([8, 768], &d);
    tmin("head 2d [8,768] x wte^T", 10, || sync(x2.clone().matmul(wte.clone().transpose())));
    for c in [512, 768, 1024] {
    tmin(&format!("head chunked {c} view"), 10, || sync(chunked(x2.clone(), wte.clone().transpose(), c)));
    tmin(&format!("head chunked2 {c} view"), 10, || sync(chunked2(x2.clone(), wte.clone().transpose(), c)));
    }
}
#[test]
#[ignore]
fn decode_parts() {
    let d = Device::flex();
    let m = CausalLm::init(&gpt2(), &d);
    let CausalLm::Gpt2(g) = &m else { panic!() };
    let ids = Tensor::<2, Int>::random([8, 16], Distribution::Uniform(0.0, 50000.0), &d);
    let pos = Tensor::<1, Int>::arange(0..16, &d).reshape([1, 16]).expand([8, 16]);
    let mask = Tensor::<2, Int>::ones([8, 16], &d);
    let mut c = KvCache::new(12);
    let _ = m.forward(ids.clone(), pos.clone(), mask.clone(), Some(&mut c));
    let sid = Tensor::<2, Int>::zeros([8, 1], &d);
    let spos = Tensor::<2, Int>::full([8, 1], 16, &d);
    let smask = Tensor::<2, Int>::ones([8, 17], &d);
    tmin("decode step", 15, || { let mut cc = c.clone(); sync(m.forward(sid.clone(), spos.clone(), smask.clone(), Some(&mut cc)).logits) });
    let x = r([8, 1, 768], &d);
    tmin("12 layers linears only", 15, || { for b in &g.h { let y = lmrl_models::model::apply_linear(&b.attn.c_attn, x.clone()); sync(y); let y = lmrl_models::model::apply_linear(&b.attn.c_proj, x.clone()); sync(y); let y = lmrl_models::model::apply_linear(&b.mlp.c_fc, x.clone()); sync(y.clone()); sync(lmrl_models::model::apply_linear(&b.mlp.c_proj, y)); } });
    tmin("head", 15, || sync(lmrl_models::model::dense(x.clone(), g.wte.weight.val().transpose(), None)));
    let bias = lmrl_models::attention::attention_bias(smask.clone(), 16, 1);
    tmin("12 blocks no cache", 15, || { let mut y = x.clone(); for (i, b) in g.h.iter().enumerate() { y = b.forward(y, bias.clone().narrow(3, 0, 1), i, None); } sync(y) });
    tmin("12 blocks with cache", 15, || { let mut cc = c.clone(); let mut y = x.clone(); for (i, b) in g.h.iter().enumerate() { y = b.forward(y, bias.clone(), i, Some(&mut cc)); } sync(y) });
    tmin("embed", 15, || sync(g.wte.forward(sid.clone()) + g.wpe.forward(spos.clone())));
}
