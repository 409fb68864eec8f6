//! Forward passes against the reference `transformers` fixtures, cache and save/load
//! invariants, loading errors, value head and LoRA.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::module::Module;
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use lmrl_models::{AutoLm, CausalLm, KvCache, ModelConfig, ModelError, Pretrained, ValueHeadInit};
use lmrl_models::{LmWithValueHead, VALUE_HEAD_FILE, ValueHead};
use lmrl_models::{LoraBranch, LoraConfig, apply_lora, lora_parameter_count, merge_lora};
use lmrl_models::{read_weights, write_safetensors};
use serde_json::Value;

mod common;

const TOL: f32 = 1e-4;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn device() -> Device {
    common::backend_device()
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

/// A fresh empty directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("lmrl-m1-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn ints(v: &Value) -> Vec<Vec<i64>> {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_i64().expect("int"))
                .collect()
        })
        .collect()
}

fn int_tensor(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let (b, s) = (rows.len(), rows[0].len());
    let flat: Vec<i64> = rows.concat();
    Tensor::from_data(TensorData::new(flat, [b, s]), device)
}

fn to_vec3(t: Tensor<3>) -> (Vec<f32>, [usize; 3]) {
    let dims = t.dims();
    (
        t.into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("f32"),
        dims,
    )
}

/// Largest |a - b| over positions where `mask` is 1 (logits `[B, S, V]`, row-major).
fn max_diff_masked(a: &Tensor<3>, b: &Tensor<3>, mask: &[Vec<i64>]) -> f32 {
    let (a, [_, s, v]) = to_vec3(a.clone());
    let (b, _) = to_vec3(b.clone());
    let mut worst = 0.0f32;
    for (r, row) in mask.iter().enumerate() {
        for (p, &m) in row.iter().enumerate() {
            if m == 1 {
                let o = (r * s + p) * v;
                for k in 0..v {
                    worst = worst.max((a[o + k] - b[o + k]).abs());
                }
            }
        }
    }
    worst
}

fn expected_logits(fwd: &Value, device: &Device) -> Tensor<3> {
    let rows = fwd["logits"].as_array().expect("logits");
    let (b, s) = (rows.len(), rows[0].as_array().expect("seq").len());
    let mut flat = Vec::new();
    for r in rows {
        for p in r.as_array().expect("seq") {
            flat.extend(
                p.as_array()
                    .expect("vocab")
                    .iter()
                    .map(|x| x.as_f64().expect("f") as f32),
            );
        }
    }
    let v = flat.len() / (b * s);
    Tensor::from_data(TensorData::new(flat, [b, s, v]), device)
}

/// Runs the fixture's right-padded batch and returns (ours, reference, mask).
fn fixture_forward(model: &AutoLm, name: &str) -> (Tensor<3>, Tensor<3>, Vec<Vec<i64>>) {
    let dev = device();
    let fwd = &expected(name)["forward"];
    let ids = ints(&fwd["input_ids"]);
    let mask = ints(&fwd["attention_mask"]);
    let out = model.forward_simple(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    (out.logits, expected_logits(fwd, &dev), mask)
}

fn check_fixture(name: &str) {
    let model = AutoLm::from_pretrained(&fixture(name), &device()).expect("load fixture");
    check_model(&model, name);
}

/// `model`'s logits on fixture `name`'s batch against transformers'.
fn check_model(model: &AutoLm, name: &str) {
    let (ours, reference, mask) = fixture_forward(model, name);
    let diff = max_diff_masked(&ours, &reference, &mask);
    println!("{name}: max |logit diff| = {diff:e}");
    assert!(diff < TOL, "{name}: max logit difference {diff}");
}

#[test]
fn gpt2_forward_matches_transformers() {
    check_fixture("gpt2-tiny");
}

#[test]
fn llama_gqa_forward_matches_transformers() {
    check_fixture("llama-tiny");
}

/// The Llama-family fixtures of `tests/fixtures/decoders` (its `make_fixture.py` says what
/// each covers): Qwen2 (tied; untied, bf16, sharded), Qwen3, Llama 3 and linear RoPE scaling
/// with biases, Mistral.
const DECODERS: [&str; 6] = [
    "decoders/qwen2-tiny",
    "decoders/qwen2-untied-bf16-sharded",
    "decoders/qwen3-tiny",
    "decoders/llama3-tiny",
    "decoders/llama-linear-bias",
    "decoders/mistral-tiny",
];

/// The decoders that also come as GGUF in llama.cpp's layout (`llama`, `qwen2`, `qwen3`).
const GGUF_DECODERS: [&str; 3] = [
    "decoders/qwen2-tiny",
    "decoders/qwen3-tiny",
    "decoders/llama3-tiny",
];

#[test]
fn decoder_families_forward_match_transformers() {
    for name in DECODERS {
        check_fixture(name);
    }
}

#[test]
fn decoder_families_from_gguf_match_transformers() {
    for name in GGUF_DECODERS {
        let path = fixture(name).join("model.gguf");
        let model = AutoLm::from_pretrained(&path, &device()).expect("load gguf");
        let from_hf = AutoLm::from_pretrained(&fixture(name), &device()).expect("load hf");
        // The same configuration, RoPE scaling recovered from `rope_freqs` included.
        assert_eq!(model.config(), from_hf.config(), "{name}");
        check_model(&model, name);
    }
}

#[test]
fn decoder_families_kv_cache_matches_full_forward() {
    for name in DECODERS {
        check_cache_matches_full(name);
    }
}

#[test]
fn decoder_families_greedy_left_padded_matches_transformers() {
    for name in DECODERS {
        check_greedy_left_padded(name);
    }
}

/// `next_token_logprobs` against the log-softmax of transformers' logits at each next token,
/// taken in f64 on the host, wherever the predicting position and its target are both real
/// tokens; and its input errors.
fn check_next_token_logprobs(name: &str) {
    let dev = device();
    let model = AutoLm::from_pretrained(&fixture(name), &dev).expect("load fixture");
    let fwd = &expected(name)["forward"];
    let (ids, mask) = (ints(&fwd["input_ids"]), ints(&fwd["attention_mask"]));
    let (want, [b, s, v]) = to_vec3(expected_logits(fwd, &dev));
    let got =
        lmrl_models::next_token_logprobs(&model, int_tensor(&ids, &dev), int_tensor(&mask, &dev))
            .expect("valid input");
    assert_eq!(got.dims(), [b, s - 1]);
    let got = got.into_data().try_to_vec::<f32>().expect("f32");
    let mut worst = 0.0f64;
    let mut compared = 0;
    for r in 0..b {
        for p in 0..s - 1 {
            if mask[r][p] != 1 || mask[r][p + 1] != 1 {
                continue;
            }
            let row = &want[(r * s + p) * v..][..v];
            let max = row.iter().fold(f64::MIN, |m, &x| m.max(f64::from(x)));
            let lse = max
                + row
                    .iter()
                    .map(|&x| (f64::from(x) - max).exp())
                    .sum::<f64>()
                    .ln();
            let reference = f64::from(row[ids[r][p + 1] as usize]) - lse;
            worst = worst.max((f64::from(got[r * (s - 1) + p]) - reference).abs());
            compared += 1;
        }
    }
    println!("{name}: {compared} next-token log-probs, max |diff| = {worst:e}");
    assert!(compared > 0, "{name}: no pair of real positions");
    assert!(
        worst < f64::from(TOL),
        "{name}: max log-prob difference {worst}"
    );
    let one = lmrl_models::next_token_logprobs(
        &model,
        int_tensor(&[vec![1]], &dev),
        int_tensor(&[vec![1]], &dev),
    );
    assert!(matches!(one, Err(ModelError::Input(_))), "one position");
    let short_mask = int_tensor(&[vec![1, 1]], &dev);
    let ids2 = int_tensor(&[vec![1, 2, 3]], &dev);
    let mismatch = lmrl_models::next_token_logprobs(&model, ids2, short_mask);
    assert!(matches!(mismatch, Err(ModelError::Input(_))), "mask shape");
}

#[test]
fn next_token_logprobs_match_transformers_logits() {
    check_next_token_logprobs("gpt2-tiny");
    check_next_token_logprobs("llama-tiny");
}

#[test]
fn gpt2_loads_with_and_without_transformer_prefix() {
    let dev = device();
    let dir = temp_dir("noprefix");
    let mut t = read_weights(&fixture("gpt2-tiny")).expect("weights");
    t.strip_prefix("transformer.");
    let mut named: Vec<_> = t.tensors.into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(named.iter().all(|(k, _)| !k.starts_with("transformer.")));
    write_safetensors(&dir.join("model.safetensors"), &named).expect("write");
    std::fs::copy(fixture("gpt2-tiny/config.json"), dir.join("config.json")).expect("copy");
    let a = AutoLm::from_pretrained(&fixture("gpt2-tiny"), &dev).expect("prefixed");
    let b = AutoLm::from_pretrained(&dir, &dev).expect("unprefixed");
    let (la, _, mask) = fixture_forward(&a, "gpt2-tiny");
    let (lb, _, _) = fixture_forward(&b, "gpt2-tiny");
    assert_eq!(max_diff_masked(&la, &lb, &mask), 0.0);
}

/// Feeding the batch one token at a time through the KV cache must give the same logits as
/// one full pass.
fn check_cache_matches_full(name: &str) {
    let dev = device();
    let model = AutoLm::from_pretrained(&fixture(name), &dev).expect("load");
    let (full, _, mask) = fixture_forward(&model, name);
    let ids = ints(&expected(name)["forward"]["input_ids"]);
    let (b, s) = (ids.len(), ids[0].len());
    let mut cache = KvCache::default();
    let mut steps = Vec::new();
    for t in 0..s {
        let col = |m: &[Vec<i64>], r: std::ops::Range<usize>| -> Vec<Vec<i64>> {
            m.iter().map(|row| row[r.clone()].to_vec()).collect()
        };
        let pos = vec![vec![t as i64]; b];
        let out = model.forward(
            int_tensor(&col(&ids, t..t + 1), &dev),
            int_tensor(&pos, &dev),
            int_tensor(&col(&mask, 0..t + 1), &dev),
            Some(&mut cache),
        );
        assert_eq!(cache.len(), t + 1);
        steps.push(out.logits);
    }
    let incremental = Tensor::cat(steps, 1);
    let diff = max_diff_masked(&full, &incremental, &mask);
    println!("{name}: cache vs full max diff {diff:e}");
    assert!(diff < TOL, "{name}: cached logits differ by {diff}");
}

#[test]
fn gpt2_kv_cache_matches_full_forward() {
    check_cache_matches_full("gpt2-tiny");
}

#[test]
fn llama_kv_cache_matches_full_forward() {
    check_cache_matches_full("llama-tiny");
}

/// Greedy decoding of a left-padded batch through the cache, with HF's generation positions
/// (`cumsum(mask) - 1`, pads at 1), reproduces `transformers`' tokens and log-probabilities.
fn check_greedy_left_padded(name: &str) {
    let dev = device();
    let model = AutoLm::from_pretrained(&fixture(name), &dev).expect("load");
    let g = &expected(name)["greedy_left_padded"];
    let mut mask = ints(&g["attention_mask"]);
    let prompt = ints(&g["input_ids"]);
    let want_tokens = ints(&g["new_tokens"]);
    let want_lp: Vec<Vec<f64>> = g["new_token_logprobs"]
        .as_array()
        .expect("lp")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("f"))
                .collect()
        })
        .collect();
    let positions = |mask: &[Vec<i64>], from: usize| -> Vec<Vec<i64>> {
        mask.iter()
            .map(|row| {
                let mut c = 0;
                let all: Vec<i64> = row
                    .iter()
                    .map(|&m| {
                        c += m;
                        if m == 0 { 1 } else { c - 1 }
                    })
                    .collect();
                all[from..].to_vec()
            })
            .collect()
    };
    let mut cache = KvCache::default();
    let mut input = prompt.clone();
    let mut got_tokens = vec![Vec::new(); prompt.len()];
    for step in 0..want_tokens[0].len() {
        let past = cache.len();
        let out = model.forward(
            int_tensor(&input, &dev),
            int_tensor(&positions(&mask, past), &dev),
            int_tensor(&mask, &dev),
            Some(&mut cache),
        );
        let [b, s, v] = out.logits.dims();
        let last = out.logits.narrow(1, s - 1, 1).reshape([b, v]);
        let lp = log_softmax(last, 1)
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        input = Vec::new();
        for r in 0..b {
            let row = &lp[r * v..(r + 1) * v];
            let (arg, best) =
                row.iter().enumerate().fold(
                    (0, f32::MIN),
                    |acc, (i, &x)| if x > acc.1 { (i, x) } else { acc },
                );
            assert_eq!(
                arg as i64, want_tokens[r][step],
                "{name} row {r} step {step}"
            );
            assert!(
                (best as f64 - want_lp[r][step]).abs() < TOL as f64,
                "{name} logprob"
            );
            got_tokens[r].push(arg as i64);
            input.push(vec![arg as i64]);
            mask[r].push(1);
        }
    }
    assert_eq!(got_tokens, want_tokens);
}

#[test]
fn gpt2_greedy_left_padded_matches_transformers() {
    check_greedy_left_padded("gpt2-tiny");
}

#[test]
fn llama_greedy_left_padded_matches_transformers() {
    check_greedy_left_padded("llama-tiny");
}

/// A left-padded row's real positions (with shifted position ids) equal the unpadded row.
#[test]
fn left_padding_does_not_change_real_positions() {
    let dev = device();
    for name in ["gpt2-tiny", "llama-tiny"] {
        let model = AutoLm::from_pretrained(&fixture(name), &dev).expect("load");
        let alone = model.forward_simple(
            int_tensor(&[vec![5, 6, 7]], &dev),
            int_tensor(&[vec![1, 1, 1]], &dev),
        );
        let padded = model.forward(
            int_tensor(&[vec![0, 0, 5, 6, 7]], &dev),
            int_tensor(&[vec![1, 1, 0, 1, 2]], &dev),
            int_tensor(&[vec![0, 0, 1, 1, 1]], &dev),
            None,
        );
        let tail = padded.logits.clone().narrow(1, 2, 3);
        let diff = max_diff_masked(&alone.logits, &tail, &[vec![1, 1, 1]]);
        assert!(diff < TOL, "{name}: left padding changed logits by {diff}");
        let pad_rows = padded.logits.narrow(1, 0, 2);
        let (pad_rows, _) = to_vec3(pad_rows);
        assert!(
            pad_rows.iter().all(|x| x.is_finite()),
            "{name}: fully masked rows gave NaN"
        );
    }
}

fn roundtrip(model: &AutoLm, tag: &str) {
    let dev = device();
    let dir = temp_dir(tag);
    model.save_pretrained(&dir).expect("save");
    let back = AutoLm::from_pretrained(&dir, &dev).expect("reload");
    assert_eq!(back.config(), model.config());
    let ids = vec![vec![3, 1, 4, 1, 5], vec![9, 2, 6, 0, 0]];
    let mask = vec![vec![1, 1, 1, 1, 1], vec![1, 1, 1, 0, 0]];
    let a = model.forward_simple(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    let b = back.forward_simple(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    assert_eq!(max_diff_masked(&a.logits, &b.logits, &mask), 0.0, "{tag}");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
}

#[test]
fn save_pretrained_roundtrip_gives_identical_logits() {
    let dev = device();
    for name in ["gpt2-tiny", "llama-tiny"] {
        roundtrip(
            &AutoLm::from_pretrained(&fixture(name), &dev).expect("load"),
            name,
        );
    }
    // An untied, multi-query Llama initialised at random.
    let mut cfg = match AutoLm::from_pretrained(&fixture("llama-tiny"), &dev)
        .expect("load")
        .config()
    {
        ModelConfig::Llama(c) => c,
        _ => unreachable!(),
    };
    cfg.tie_word_embeddings = false;
    cfg.num_key_value_heads = 1;
    let model = AutoLm::init(&ModelConfig::Llama(cfg), &dev);
    roundtrip(&model, "llama-untied-mqa");
    for name in DECODERS {
        let model = AutoLm::from_pretrained(&fixture(name), &dev).expect("load");
        roundtrip(&model, name.trim_start_matches("decoders/"));
    }
}

/// A multi-query model equals the multi-head model whose K/V projections repeat the single
/// key/value head (HF `repeat_kv` semantics).
#[test]
fn multi_query_attention_equals_repeated_heads() {
    let dev = device();
    let ModelConfig::Llama(mut cfg) = AutoLm::from_pretrained(&fixture("llama-tiny"), &dev)
        .expect("load")
        .config()
    else {
        unreachable!()
    };
    cfg.num_key_value_heads = 1;
    let mqa = AutoLm::init(&ModelConfig::Llama(cfg.clone()), &dev);
    let dir = temp_dir("mqa");
    Pretrained::save_pretrained(&mqa, &dir).expect("save");
    let mut t = read_weights(&dir).expect("read");
    let heads = cfg.num_attention_heads;
    for name in t.tensors.keys().cloned().collect::<Vec<_>>() {
        if name.ends_with("k_proj.weight") || name.ends_with("v_proj.weight") {
            let w = t.tensors.remove(&name).expect("kv");
            let data = w.data.repeat(heads);
            let shape = vec![w.shape[0] * heads, w.shape[1]];
            t.insert(name, lmrl_models::RawTensor::new(shape, data));
        }
    }
    cfg.num_key_value_heads = heads;
    let mha = lmrl_models::causal_lm_from_tensors(&ModelConfig::Llama(cfg), t, &dev).expect("mha");
    let ids = vec![vec![10, 20, 30, 40]];
    let mask = vec![vec![1, 1, 1, 1]];
    let a = mqa.forward_simple(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    let b = mha.forward_simple(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    let diff = max_diff_masked(&a.logits, &b.logits, &mask);
    assert!(diff < 1e-5, "MQA vs repeated MHA differ by {diff}");
}

/// Copies a fixture directory so that it can be damaged.
/// A copy of a fixture's checkpoint files (config and weights, shards included).
fn copy_fixture(name: &str, tag: &str) -> PathBuf {
    let dir = temp_dir(tag);
    for entry in std::fs::read_dir(fixture(name)).expect("fixture dir") {
        let f = entry.expect("entry").file_name();
        let f = f.to_string_lossy();
        if f == "config.json" || f.ends_with(".safetensors") || f.ends_with(".index.json") {
            std::fs::copy(fixture(name).join(&*f), dir.join(&*f)).expect("copy");
        }
    }
    dir
}

fn rewrite_weights(dir: &Path, edit: impl FnOnce(&mut Vec<(String, lmrl_models::RawTensor)>)) {
    let t = read_weights(dir).expect("read");
    let mut named: Vec<_> = t.tensors.into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    edit(&mut named);
    write_safetensors(&dir.join("model.safetensors"), &named).expect("write");
}

#[test]
fn truncated_safetensors_is_a_format_error() {
    let dir = copy_fixture("llama-tiny", "trunc");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
    match AutoLm::from_pretrained(&dir, &device()) {
        Err(ModelError::Format { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected Format error, got {other:?}"),
    }
}

#[test]
fn missing_tensor_is_named() {
    let dir = copy_fixture("gpt2-tiny", "missing");
    rewrite_weights(&dir, |v| {
        v.retain(|(k, _)| k != "transformer.h.1.mlp.c_fc.weight")
    });
    match AutoLm::from_pretrained(&dir, &device()) {
        Err(ModelError::MissingTensor { tensor, path }) => {
            assert_eq!(tensor, "h.1.mlp.c_fc.weight");
            assert!(path.ends_with("model.safetensors"));
        }
        other => panic!("expected MissingTensor, got {other:?}"),
    }
}

#[test]
fn wrong_shape_is_named() {
    let dir = copy_fixture("llama-tiny", "shape");
    rewrite_weights(&dir, |v| {
        for (k, t) in v.iter_mut() {
            if k == "model.layers.0.self_attn.k_proj.weight" {
                // Transposed: [64, 32] instead of [32, 64].
                *t = t.transposed();
            }
        }
    });
    match AutoLm::from_pretrained(&dir, &device()) {
        Err(ModelError::ShapeMismatch {
            tensor,
            found,
            expected,
            ..
        }) => {
            assert_eq!(tensor, "model.layers.0.self_attn.k_proj.weight");
            assert_eq!((found, expected), (vec![64, 32], vec![32, 64]));
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}

#[test]
fn unknown_architecture_and_bad_fields_are_config_errors() {
    let p = Path::new("x/config.json");
    let bert = serde_json::json!({"model_type": "bert", "vocab_size": 10});
    match ModelConfig::from_hf_json(p, &bert) {
        Err(ModelError::Config { field, path, .. }) => {
            assert_eq!(field, "model_type");
            assert_eq!(path, p);
        }
        other => panic!("expected Config error, got {other:?}"),
    }
    let arch_only = serde_json::json!({"architectures": ["T5ForConditionalGeneration"]});
    assert!(matches!(
        ModelConfig::from_hf_json(p, &arch_only),
        Err(ModelError::Config { field, .. }) if field == "model_type"
    ));
    let no_embd =
        serde_json::json!({"model_type": "gpt2", "vocab_size": 10, "n_layer": 1, "n_head": 1});
    assert!(matches!(
        ModelConfig::from_hf_json(p, &no_embd),
        Err(ModelError::Config { field, .. }) if field == "n_embd"
    ));
    let dir = copy_fixture("gpt2-tiny", "arch");
    let cfg = std::fs::read_to_string(dir.join("config.json")).expect("cfg");
    std::fs::write(
        dir.join("config.json"),
        cfg.replace("\"gpt2\"", "\"mamba\""),
    )
    .expect("write");
    assert!(matches!(
        AutoLm::from_pretrained(&dir, &device()),
        Err(ModelError::Config { .. })
    ));
    let empty = temp_dir("empty");
    assert!(matches!(
        AutoLm::from_pretrained(&empty, &device()),
        Err(ModelError::Io { .. })
    ));
}

#[test]
fn config_json_roundtrips() {
    for name in ["gpt2-tiny", "llama-tiny"].into_iter().chain(DECODERS) {
        let c = ModelConfig::from_file(&fixture(name).join("config.json")).expect("parse");
        let again = ModelConfig::from_hf_json(Path::new("mem"), &c.to_hf_json()).expect("reparse");
        assert_eq!(c, again);
    }
    let c = ModelConfig::from_file(&fixture("llama-tiny/config.json")).expect("parse");
    assert_eq!(
        (c.vocab_size(), c.hidden_size(), c.max_positions()),
        (1000, 64, 128)
    );
    assert_eq!(c.eos_token_id(), Some(2));
}

#[test]
fn bad_token_ids_and_long_inputs_are_rejected() {
    let model = AutoLm::from_pretrained(&fixture("gpt2-tiny"), &device()).expect("load");
    assert!(model.validate_ids(&[vec![1, 2, 999]], 0).is_ok());
    match model.validate_ids(&[vec![1, 2], vec![3, 1000]], 0) {
        Err(ModelError::TokenOutOfRange {
            id,
            row,
            pos,
            vocab,
        }) => {
            assert_eq!((id, row, pos, vocab), (1000, 1, 1, 1000))
        }
        other => panic!("expected TokenOutOfRange, got {other:?}"),
    }
    assert!(matches!(
        model.validate_ids(&[vec![0; 65]], 0),
        Err(ModelError::ContextTooLong { len: 65, max: 64 })
    ));
}

#[test]
fn value_head_forward_and_roundtrip() {
    let dev = device();
    let lm = AutoLm::from_pretrained(&fixture("llama-tiny"), &dev).expect("load");
    let model = LmWithValueHead::new(lm, ValueHeadInit::Default, &dev);
    let ids = vec![vec![3, 4, 5], vec![6, 7, 0]];
    let mask = vec![vec![1, 1, 1], vec![1, 1, 0]];
    let (logits, values) = model.forward(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    assert_eq!(logits.dims(), [2, 3, 1000]);
    assert_eq!(values.dims(), [2, 3]);
    // values = hidden · w + b, checked by hand on the host.
    let out = model
        .lm
        .forward_simple(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    let w = model
        .v_head
        .summary
        .weight
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .expect("w");
    let b = model
        .v_head
        .summary
        .bias
        .as_ref()
        .expect("bias")
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .expect("b")[0];
    let (h, _) = to_vec3(out.hidden);
    let v = values.clone().into_data().try_to_vec::<f32>().expect("v");
    for i in 0..6 {
        let dot: f32 = h[i * 64..(i + 1) * 64]
            .iter()
            .zip(&w)
            .map(|(x, y)| x * y)
            .sum();
        assert!((dot + b - v[i]).abs() < 1e-4);
    }
    let dir = temp_dir("vhead");
    model.save_pretrained(&dir).expect("save");
    let back =
        LmWithValueHead::from_pretrained(&dir, true, ValueHeadInit::Default, &dev).expect("load");
    let (_, values2) = back.forward(int_tensor(&ids, &dev), int_tensor(&mask, &dev));
    let v2 = values2.into_data().try_to_vec::<f32>().expect("v2");
    assert_eq!(v, v2);
    // TRL layout: weight [1, hidden].
    let t = lmrl_models::TensorMap::from_safetensors(&dir.join(VALUE_HEAD_FILE)).expect("read");
    assert_eq!(t.tensors["v_head.summary.weight"].shape, vec![1, 64]);
    assert_eq!(t.tensors["v_head.summary.bias"].shape, vec![1]);
    assert!(ValueHead::load(&dir.join(VALUE_HEAD_FILE), 32, &dev).is_err());
}

fn small_batch(dev: &Device) -> (Tensor<2, Int>, Tensor<2, Int>) {
    let ids = vec![vec![11, 12, 13, 14], vec![21, 22, 23, 0]];
    let mask = vec![vec![1, 1, 1, 1], vec![1, 1, 1, 0]];
    (int_tensor(&ids, dev), int_tensor(&mask, dev))
}

#[test]
fn lora_with_zero_b_equals_base_and_merge_equals_adapted() {
    let dev = device();
    let base = AutoLm::from_pretrained(&fixture("llama-tiny"), &dev).expect("load");
    let (ids, mask) = small_batch(&dev);
    let want = base.forward_simple(ids.clone(), mask.clone()).logits;
    let cfg = LoraConfig::attention_and_mlp(4, 8.0);
    let adapted = apply_lora(base, &cfg).expect("lora");
    // 2 layers × (q,k,v,o,gate,up,down) with A [in, 4] and B [4, out].
    let per_layer = 4 * ((64 + 64) + (64 + 32) * 2 + (64 + 64) + (64 + 128) * 2 + (128 + 64));
    assert_eq!(lora_parameter_count(&adapted), 2 * per_layer);
    let got = adapted.forward_simple(ids.clone(), mask.clone()).logits;
    let m = vec![vec![1; 4]; 2];
    assert_eq!(
        max_diff_masked(&want, &got, &m),
        0.0,
        "zero B must leave the model unchanged"
    );

    // Give B non-zero values, as training would, then merge.
    let adapted = randomize_b(adapted, 4);
    let lora_out = adapted.forward_simple(ids.clone(), mask.clone()).logits;
    assert!(
        max_diff_masked(&want, &lora_out, &m) > 1e-3,
        "adapter had no effect"
    );
    let merged = merge_lora(adapted);
    assert_eq!(lora_parameter_count(&merged), 0);
    let merged_out = merged.forward_simple(ids, mask).logits;
    let diff = max_diff_masked(&lora_out, &merged_out, &m);
    assert!(diff < 1e-5, "merged differs from adapted by {diff}");
}

/// Adds N(0, 0.1) noise to every LoRA `B` factor (`[rank, out]`), as training would.
fn randomize_b(model: AutoLm, rank: usize) -> AutoLm {
    struct Noise(usize, usize);
    impl burn::module::ModuleMapper for Noise {
        fn map_float<const D: usize>(
            &mut self,
            param: burn::module::Param<Tensor<D>>,
        ) -> burn::module::Param<Tensor<D>> {
            if D != 2 || param.val().dims()[0] != self.0 {
                return param;
            }
            self.1 += 1;
            param.map(|t| {
                let noise = t.random_like(burn::tensor::Distribution::Normal(0.0, 0.1));
                t + noise
            })
        }
    }
    let mut mapper = Noise(rank, 0);
    let model = model.map(&mut mapper);
    assert_eq!(mapper.1, 14, "one B per adapted projection");
    model
}

#[test]
fn lora_gradients_reach_only_the_adapters() {
    let dev = device().autodiff();
    let base = AutoLm::from_pretrained(&fixture("llama-tiny"), &dev).expect("load");
    let model = apply_lora(base, &LoraConfig::attention(2, 4.0)).expect("lora");
    let (ids, mask) = small_batch(&dev);
    let loss = model.forward_simple(ids, mask).logits.powi_scalar(2).mean();
    let grads = loss.backward();
    let AutoLm::Llama(m) = &model else {
        unreachable!()
    };
    let q = &m.model.layers[0].self_attn.q_proj.weight;
    let adapter = q
        .reparameterization::<LoraBranch>()
        .expect("q_proj adapted");
    assert!(adapter.a.val().grad(&grads).is_some(), "A gets a gradient");
    assert!(adapter.b.val().grad(&grads).is_some(), "B gets a gradient");
    assert!(q.base().grad(&grads).is_none(), "frozen base q_proj");
    let up = &m.model.layers[0].mlp.up_proj.weight;
    assert!(
        up.reparameterization::<LoraBranch>().is_none() && up.val().grad(&grads).is_none(),
        "frozen MLP"
    );
    let emb = &m.model.embed_tokens.weight;
    assert!(emb.val().grad(&grads).is_none(), "frozen embeddings");
}

/// What the decoder families refuse, each error naming its field: an unknown RoPE scaling,
/// an unknown architecture, an odd head width; and a sliding window that bounds the context.
#[test]
fn decoder_config_errors_name_the_field() {
    let p = Path::new("x/config.json");
    let base = || -> Value {
        let text = std::fs::read_to_string(fixture("decoders/qwen2-tiny").join("config.json"))
            .expect("config");
        serde_json::from_str(&text).expect("json")
    };
    let field_of = |v: &Value| match ModelConfig::from_hf_json(p, v) {
        Err(ModelError::Config { field, reason, .. }) => (field, reason),
        other => panic!("expected a config error, got {other:?}"),
    };
    let mut yarn = base();
    yarn["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0});
    let (field, reason) = field_of(&yarn);
    assert_eq!(field, "rope_scaling.rope_type");
    assert!(reason.contains("yarn"), "{reason}");
    let mut v5 = base();
    v5["rope_parameters"] = serde_json::json!({"rope_type": "su", "rope_theta": 1e6});
    assert_eq!(field_of(&v5).0, "rope_parameters.rope_type");
    let mut gemma = base();
    gemma["model_type"] = "gemma".into();
    let (field, reason) = field_of(&gemma);
    assert_eq!(field, "model_type");
    assert!(
        reason.contains("qwen3"),
        "the error lists what is supported: {reason}"
    );
    let mut odd = base();
    odd["model_type"] = "mistral".into();
    odd["head_dim"] = 15.into();
    assert_eq!(field_of(&odd).0, "head_dim");
    let mut window = base();
    window["use_sliding_window"] = true.into();
    window["sliding_window"] = 8.into();
    window["layer_types"] = serde_json::json!(["full_attention", "sliding_attention"]);
    let c = ModelConfig::from_hf_json(p, &window).expect("parse");
    assert_eq!(
        c.max_positions(),
        8,
        "sequences past the window are refused"
    );
    window["layer_types"] = serde_json::json!(["full_attention", "full_attention"]);
    let c = ModelConfig::from_hf_json(p, &window).expect("parse");
    assert_eq!(c.max_positions(), 128, "no layer slides");
}

/// A shard index naming a file that is not there is an error naming that file.
#[test]
fn missing_shard_is_named() {
    let dir = copy_fixture("decoders/qwen2-untied-bf16-sharded", "shard");
    let gone = "model-00003-of-00007.safetensors";
    std::fs::remove_file(dir.join(gone)).expect("remove shard");
    match AutoLm::from_pretrained(&dir, &device()) {
        Err(e) => assert!(e.to_string().contains(gone), "{e}"),
        Ok(_) => panic!("loaded without a shard"),
    }
}

/// LoRA on every projection and the value head work on each decoder family as on Llama: zero
/// `B` leaves the logits unchanged, trained `B` changes them and merges back exactly (biases
/// and q/k norms kept), and the value head reads the family's hidden states.
#[test]
fn lora_and_value_head_work_on_each_decoder_family() {
    let dev = device();
    let (ids, mask) = small_batch(&dev);
    let m = vec![vec![1; 4]; 2];
    for name in DECODERS {
        let base = AutoLm::from_pretrained(&fixture(name), &dev).expect("load");
        let want = base.forward_simple(ids.clone(), mask.clone()).logits;
        let adapted =
            apply_lora(base.clone(), &LoraConfig::attention_and_mlp(4, 8.0)).expect("lora");
        assert!(lora_parameter_count(&adapted) > 0, "{name}: no adapters");
        let got = adapted.forward_simple(ids.clone(), mask.clone()).logits;
        assert_eq!(max_diff_masked(&want, &got, &m), 0.0, "{name}: zero B");
        let adapted = randomize_b(adapted, 4);
        let lora_out = adapted.forward_simple(ids.clone(), mask.clone()).logits;
        assert!(
            max_diff_masked(&want, &lora_out, &m) > 1e-3,
            "{name}: no effect"
        );
        let merged = merge_lora(adapted);
        let merged_out = merged.forward_simple(ids.clone(), mask.clone()).logits;
        assert!(
            max_diff_masked(&lora_out, &merged_out, &m) < 1e-5,
            "{name}: merge"
        );
        roundtrip(
            &merged,
            &format!("{}-merged", name.trim_start_matches("decoders/")),
        );

        let hidden = base.config().hidden_size();
        let model = LmWithValueHead::new(base, ValueHeadInit::Default, &dev);
        let (logits, values) = model.forward(ids.clone(), mask.clone());
        assert_eq!(logits.dims()[2], 1000, "{name}");
        assert_eq!(values.dims(), [2, 4], "{name}");
        assert_eq!(
            model.v_head.summary.weight.val().dims(),
            [hidden, 1],
            "{name}"
        );
    }
}
