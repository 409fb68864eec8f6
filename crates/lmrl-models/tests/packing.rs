//! Scoring and training forwards computed without their padding ([`lmrl_models::Packing`])
//! against transformers' logits of the same tokens, and against the padded forward with
//! gradients.
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use lmrl_models::{
    AutoLm, LmWithValueHead, QueryResponseBatch, ValueHeadInit, response_hidden_and_values,
    response_logprobs, response_token_logprobs, response_values, score_reference,
};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn expected_forward(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).expect("fixture");
    let v: Value = serde_json::from_str(&text).expect("fixture json");
    v["forward"].clone()
}

fn floats(t: Tensor<2>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32")
}

/// log-softmax of one row of logits, in f64.
fn log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z = row.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m;
    row.iter().map(|x| x - z).collect()
}

/// The fixture's real tokens of each row, split after `split` tokens into a query and a
/// response: rows of 7 and 4 tokens give `[q; y]` sequences of different lengths, so the
/// batch is padded.
fn fixture_pairs(fwd: &Value, split: usize) -> (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<usize>) {
    let (mut q, mut y, mut rows) = (vec![], vec![], vec![]);
    for (r, (ids, mask)) in fwd["input_ids"]
        .as_array()
        .expect("rows")
        .iter()
        .zip(fwd["attention_mask"].as_array().expect("rows"))
        .enumerate()
    {
        let real: Vec<u32> = ids
            .as_array()
            .expect("row")
            .iter()
            .zip(mask.as_array().expect("row"))
            .filter(|(_, m)| m.as_i64() == Some(1))
            .map(|(t, _)| t.as_u64().expect("id") as u32)
            .collect();
        if real.len() > split {
            q.push(real[..split].to_vec());
            y.push(real[split..].to_vec());
            rows.push(r);
        }
    }
    (q, y, rows)
}

/// `log π(y_t | q, y_<t)` of a packed scoring pass against the log-softmax of transformers'
/// logits at the same positions.
fn check_against_transformers(name: &str) {
    let device = Device::flex();
    let model = AutoLm::from_pretrained(&fixture(name), &device).expect("load fixture");
    let fwd = expected_forward(name);
    let (q, y, rows) = fixture_pairs(&fwd, 2);
    assert!(rows.len() >= 2, "two rows of different lengths");
    let batch = QueryResponseBatch::new(&q, &y, 0, &device).expect("batch");
    assert!(
        batch.packing(&device).rows() < batch.batch_size() * batch.seq_len(),
        "the batch has padding to leave out"
    );
    let ours = floats(score_reference(&model, &batch).logprobs);
    let t_max = batch.max_response_len();
    let mut worst = 0.0f64;
    for (k, &r) in rows.iter().enumerate() {
        for t in 0..y[k].len() {
            let pos = q[k].len() + t - 1;
            let logits: Vec<f64> = fwd["logits"][r][pos]
                .as_array()
                .expect("logits")
                .iter()
                .map(|v| v.as_f64().expect("float"))
                .collect();
            let want = log_softmax(&logits)[y[k][t] as usize];
            worst = worst.max((f64::from(ours[k * t_max + t]) - want).abs());
        }
    }
    println!("{name}: max |log-prob diff| = {worst:e}");
    assert!(worst < 1e-4, "{name}: {worst}");
}

#[test]
fn packed_gpt2_scoring_matches_transformers() {
    check_against_transformers("gpt2-tiny");
}

#[test]
fn packed_llama_scoring_matches_transformers() {
    check_against_transformers("llama-tiny");
}

/// The packed forward of the value-head model against the padded one on an autodiff device:
/// log-probs, values and the gradient of their sum on every parameter.
fn check_against_padded(name: &str) {
    let device = Device::flex().autodiff();
    let lm = AutoLm::from_pretrained(&fixture(name), &device).expect("load fixture");
    let model = LmWithValueHead::new(lm, ValueHeadInit::Default, &device);
    let q = vec![vec![11, 12, 13], vec![21], vec![31, 32, 33, 34, 35]];
    let y = vec![vec![41, 42], vec![51, 52, 53, 54, 55, 56], vec![61]];
    let batch = QueryResponseBatch::new(&q, &y, 0, &device).expect("batch");

    let (hidden, values) = response_hidden_and_values(&model, &batch, &device);
    let (lp, _) = response_token_logprobs(&model.lm, hidden, &batch);
    let (h_pad, v_pad) =
        model.hidden_and_values(batch.input_ids.clone(), batch.attention_mask.clone());
    let (lp_pad, _) = response_logprobs(&model.lm, h_pad, &batch);
    let v_pad = response_values(v_pad, &batch);
    for (what, a, b) in [
        ("log-probs", lp.clone(), lp_pad.clone()),
        ("values", values.clone(), v_pad.clone()),
    ] {
        let (a, b) = (floats(a), floats(b));
        let d = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(d < 1e-5, "{name} {what}: {d}");
    }

    let grads = GradientsParams::from_grads((lp.sum() + values.sum()).backward(), &model);
    let grads_pad = GradientsParams::from_grads((lp_pad.sum() + v_pad.sum()).backward(), &model);
    let mut cmp = CompareGrads {
        a: &grads,
        b: &grads_pad,
        compared: 0,
        worst: 0.0,
    };
    model.visit(&mut cmp);
    println!(
        "{name}: {} gradients, max relative difference {:e}",
        cmp.compared, cmp.worst
    );
    assert!(
        cmp.compared > 4,
        "{name}: gradients reached {}",
        cmp.compared
    );
    assert!(
        cmp.worst < 1e-4,
        "{name}: gradient difference {}",
        cmp.worst
    );
}

/// The largest difference between two gradients of each parameter, relative to the larger
/// of 1e-3 and the second one's largest entry.
struct CompareGrads<'a> {
    a: &'a GradientsParams,
    b: &'a GradientsParams,
    compared: usize,
    worst: f32,
}

impl ModuleVisitor for CompareGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let (Some(a), Some(b)) = (self.a.get::<D>(param.id), self.b.get::<D>(param.id)) else {
            return;
        };
        let (a, b): (Vec<f32>, Vec<f32>) = (
            a.into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .expect("f32"),
            b.into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .expect("f32"),
        );
        let scale = b.iter().map(|v| v.abs()).fold(1e-3, f32::max);
        let d = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        self.worst = self.worst.max(d / scale);
        self.compared += 1;
    }
}

#[test]
fn packed_gpt2_training_forward_is_the_padded_one() {
    check_against_padded("gpt2-tiny");
}

#[test]
fn packed_llama_training_forward_is_the_padded_one() {
    check_against_padded("llama-tiny");
}

/// The Llama-family fixtures (Qwen2 with biases, Qwen3 with per-head q/k norms, Llama 3 RoPE
/// scaling, Mistral's head width): the packed scoring forward against transformers' logits,
/// and the packed training forward against the padded one (values and gradients).
#[test]
fn packed_forward_of_each_decoder_family() {
    for name in [
        "decoders/qwen2-tiny",
        "decoders/qwen3-tiny",
        "decoders/llama3-tiny",
        "decoders/llama-linear-bias",
        "decoders/mistral-tiny",
    ] {
        check_against_transformers(name);
        check_against_padded(name);
    }
}
