//! The built `lm-app` binary against the golden fixtures, and its failures on bad input.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lm-app"))
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn expected(name: &str) -> Value {
    let p = fixture(name).join("expected.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lm-app-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write(path: &Path, v: &Value) {
    std::fs::write(path, v.to_string()).unwrap();
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("lm-app runs");
    assert!(
        out.status.success(),
        "lm-app failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn f64s(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().flat_map(f64s).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap()],
        other => panic!("not a number: {other}"),
    }
}

fn check_logits(name: &str) {
    let e = &expected(name)["forward"];
    let input = tmp(&format!("{name}-logits-in.json"));
    let out = tmp(&format!("{name}-logits-out.json"));
    write(
        &input,
        &json!({"input_ids": e["input_ids"], "attention_mask": e["attention_mask"]}),
    );
    run(bin()
        .args(["logits", "--model"])
        .arg(fixture(name))
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(&out));
    let got = read(&out)["logits"].clone();
    let want = &e["logits"];
    let mask = e["attention_mask"].as_array().unwrap();
    for (b, m) in mask.iter().enumerate() {
        for (s, m) in m.as_array().unwrap().iter().enumerate() {
            if m.as_i64() != Some(1) {
                continue; // padded positions are not compared (fixture note)
            }
            let g = f64s(&got[b][s]);
            let w = f64s(&want[b][s]);
            assert_eq!(g.len(), w.len());
            for (x, y) in g.iter().zip(&w) {
                assert!((x - y).abs() < 1e-4, "{name} [{b}][{s}]: {x} vs {y}");
            }
        }
    }
}

#[test]
fn logits_match_fixtures() {
    check_logits("gpt2-tiny");
    check_logits("llama-tiny");
}

fn check_greedy(name: &str) {
    let e = &expected(name)["greedy_left_padded"];
    let input = tmp(&format!("{name}-gen-in.json"));
    let out = tmp(&format!("{name}-gen-out.json"));
    write(
        &input,
        &json!({"input_ids": e["input_ids"], "attention_mask": e["attention_mask"]}),
    );
    let n = e["max_new_tokens"].to_string();
    run(bin()
        .args(["generate", "--greedy", "--max-new-tokens", &n, "--model"])
        .arg(fixture(name))
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(&out));
    let got = read(&out);
    assert_eq!(got["new_tokens"], e["new_tokens"], "{name}");
    let g = f64s(&got["new_token_logprobs"]);
    let w = f64s(&e["new_token_logprobs"]);
    assert_eq!(g.len(), w.len());
    for (x, y) in g.iter().zip(&w) {
        assert!((x - y).abs() < 1e-4, "{name}: {x} vs {y}");
    }
}

#[test]
fn greedy_generation_matches_fixtures() {
    check_greedy("gpt2-tiny");
    check_greedy("llama-tiny");
}

/// Rows that stop at EOS are padded to max-new-tokens with the pad id and log-prob 0.
#[test]
fn stopped_rows_are_padded() {
    let e = &expected("llama-tiny")["greedy_left_padded"];
    let input = tmp("stop-in.json");
    let out = tmp("stop-out.json");
    write(
        &input,
        &json!({"input_ids": e["input_ids"], "attention_mask": e["attention_mask"]}),
    );
    let eos = e["new_tokens"][0][0].to_string(); // row 0's first greedy token
    run(bin()
        .args(["generate", "--greedy", "--max-new-tokens", "6"])
        .args(["--eos-token-id", &eos, "--pad-token-id", "0", "--model"])
        .arg(fixture("llama-tiny"))
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(&out));
    let got = read(&out);
    let eos: i64 = eos.parse().unwrap();
    assert_eq!(got["new_tokens"][0], json!([eos, 0, 0, 0, 0, 0]));
    let lp = f64s(&got["new_token_logprobs"][0]);
    assert!(lp[0] < 0.0 && lp[1..].iter().all(|&x| x == 0.0));
}

#[test]
fn distilbert_logits_match_fixture() {
    let dir = fixture("distilbert-tiny");
    let e = expected("distilbert-tiny");
    let f = &e["forward"];
    let (ids, mask, want) = (&f["input_ids"], &f["attention_mask"], &f["logits"]);
    let input = tmp("distilbert-in.json");
    let out = tmp("distilbert-out.json");
    write(&input, &json!({"input_ids": ids, "attention_mask": mask}));
    run(bin()
        .args(["logits", "--model"])
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(&out));
    let g = f64s(&read(&out)["logits"]);
    let w = f64s(want);
    assert_eq!(g.len(), w.len());
    for (x, y) in g.iter().zip(&w) {
        assert!((x - y).abs() < 1e-4, "{x} vs {y}");
    }
}

fn fails_with(cmd: &mut Command, needle: &str) {
    let out = cmd.output().expect("lm-app runs");
    assert!(!out.status.success(), "expected failure");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
}

#[test]
fn bad_inputs_fail_with_a_message() {
    let input = tmp("bad-ids.json");
    write(
        &input,
        &json!({"input_ids": [[1, 2, 1000]], "attention_mask": [[1, 1, 1]]}),
    );
    let out = tmp("bad-out.json");
    fails_with(
        bin()
            .args(["logits", "--model"])
            .arg(fixture("gpt2-tiny"))
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out),
        "input_ids[0][2] = 1000",
    );
    fails_with(
        bin()
            .args(["generate", "--greedy", "--model"])
            .arg(fixture("gpt2-tiny"))
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out),
        "1000",
    );
    let missing = tmp("does-not-exist.json");
    fails_with(
        bin()
            .args(["logits", "--model"])
            .arg(fixture("gpt2-tiny"))
            .arg("--input")
            .arg(&missing)
            .arg("--out")
            .arg(&out),
        "does-not-exist.json",
    );
    fails_with(
        bin()
            .args(["logits", "--model"])
            .arg(tmp("no-such-model"))
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out),
        "no-such-model",
    );
    let ragged = tmp("ragged.json");
    write(
        &ragged,
        &json!({"input_ids": [[1, 2], [3]], "attention_mask": [[1, 1], [1]]}),
    );
    fails_with(
        bin()
            .args(["logits", "--model"])
            .arg(fixture("gpt2-tiny"))
            .arg("--input")
            .arg(&ragged)
            .arg("--out")
            .arg(&out),
        "row 1",
    );
}

/// A copy of the fixture `name` in a fresh directory `tag`.
fn fixture_copy(name: &str, tag: &str) -> PathBuf {
    let dir = tmp(tag);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    dir
}

/// Overwrites every value of the F32 tensors of `dir/model.safetensors` whose name ends with
/// `suffix` with NaN.
fn poison(dir: &Path, suffix: &str) {
    let p = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut hit = 0;
    for (name, t) in header.as_object().unwrap() {
        if name.ends_with(suffix) && t["dtype"] == "F32" {
            let (a, b) = (
                t["data_offsets"][0].as_u64().unwrap() as usize,
                t["data_offsets"][1].as_u64().unwrap() as usize,
            );
            for c in bytes[8 + n + a..8 + n + b].chunks_mut(4) {
                c.copy_from_slice(&f32::NAN.to_le_bytes());
            }
            hit += 1;
        }
    }
    assert!(hit > 0, "no tensor ends with {suffix}");
    std::fs::write(&p, bytes).unwrap();
}

/// Weights holding NaN give an error naming the model, not `null` logits with exit 0.
#[test]
fn nan_weights_are_an_error_naming_the_model() {
    let model = fixture_copy("gpt2-tiny", "nan-gpt2");
    poison(&model, "ln_f.weight");
    let input = tmp("nan-in.json");
    write(
        &input,
        &json!({"input_ids": [[1, 2, 3]], "attention_mask": [[1, 1, 1]]}),
    );
    let out = tmp("nan-out.json");
    let _ = std::fs::remove_file(&out);
    let o = bin()
        .args(["logits", "--model"])
        .arg(&model)
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&model.display().to_string()) && err.contains("non-finite"),
        "{err}"
    );
    assert!(!out.exists(), "no result file for a failed run");
    let o = bin()
        .args(["generate", "--greedy", "--max-new-tokens", "2", "--model"])
        .arg(&model)
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(&model.display().to_string()), "{err}");
    assert!(!out.exists());
}

/// `generate --prompt` refuses a tokenizer that can produce ids past the model's embedding
/// table (as the training apps do), naming both sizes.
#[test]
fn generate_refuses_a_tokenizer_larger_than_the_vocabulary() {
    let model = fixture_copy("gpt2-tiny", "big-tokenizer");
    let vocab: serde_json::Map<String, Value> = (0..1200)
        .map(|i| {
            (
                if i == 0 {
                    "<unk>".to_string()
                } else {
                    format!("w{i}")
                },
                json!(i),
            )
        })
        .collect();
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    write(&model.join("tokenizer.json"), &tok);
    let o = bin()
        .args(["generate", "--greedy", "--prompt", "w1 w1199", "--model"])
        .arg(&model)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("1200") && err.contains("1000"), "{err}");
}

/// An output that cannot be written is named as a write, with the system's reason once.
#[test]
fn a_failed_write_says_write_and_gives_the_reason_once() {
    let input = tmp("ro-in.json");
    write(
        &input,
        &json!({"input_ids": [[1, 2, 3]], "attention_mask": [[1, 1, 1]]}),
    );
    // A path under a regular file cannot be created, by anyone (root included).
    let blocker = tmp("a-file");
    std::fs::write(&blocker, "x").unwrap();
    let out = blocker.join("out.json");
    let o = bin()
        .args(["logits", "--model"])
        .arg(fixture("gpt2-tiny"))
        .arg("--input")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(!err.contains("read"), "{err}");
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}
