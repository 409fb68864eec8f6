//! Every flag of every `lm-app` subcommand that takes a value, at the edges of the integer
//! types: a clean refusal (exit 1 or 2), never a panic. See `tests/probe/int_flags.rs`.
#[path = "../../../tests/probe/int_flags.rs"]
mod int_flags;

use std::path::Path;

use int_flags::{MISSING, PAST_I64, assert_integer_flags, probe_app};

#[test]
fn every_flag_at_the_integer_edges_is_refused_cleanly() {
    let bin = Path::new(env!("CARGO_BIN_EXE_lm-app"));
    let (names, outcomes) = probe_app(bin, false, 25, &|sub| match sub {
        Some("logits") => vec![("model", MISSING), ("input", MISSING), ("out", "o.json")],
        Some("generate") => vec![("model", MISSING), ("prompt", "hi")],
        Some("convert") => vec![("model", MISSING), ("out", "converted")],
        _ => vec![("model", MISSING)],
    });
    assert_eq!(names, ["logits", "generate", "bench", "convert"]);
    let flags = [
        (Some("generate"), "max-new-tokens"),
        (Some("generate"), "top-k"),
        (Some("generate"), "seed"),
        (Some("generate"), "eos-token-id"),
        (Some("bench"), "batch"),
        (Some("bench"), "new-tokens"),
        (Some("bench"), "prompt-len"),
        (Some("bench"), "train-len"),
    ];
    assert_integer_flags(&outcomes, &flags, &PAST_I64);
}

fn tiny_llama() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llama-tiny")
}

fn lm_app(args: &[&str]) -> (Option<i32>, String, std::time::Duration) {
    let start = std::time::Instant::now();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lm-app"))
        .args(args)
        .output()
        .expect("lm-app runs");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code(), err, start.elapsed())
}

/// Sizes that parse but no model can hold are refused by checked arithmetic (the prompt length
/// plus `max_new_tokens` used to wrap and panic with "capacity overflow").
#[test]
fn sizes_past_the_context_are_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    std::fs::write(
        &input,
        r#"{"input_ids": [[1, 2, 3]], "attention_mask": [[1, 1, 1]]}"#,
    )
    .unwrap();
    let model = tiny_llama();
    let model = model.to_str().unwrap();
    let out = dir.path().join("out.json");
    for n in ["9223372036854775807", "9223372036854775806"] {
        let (code, err, _) = lm_app(&[
            "generate",
            "--model",
            model,
            "--input",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--max-new-tokens",
            n,
        ]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("context") && !err.contains("panicked"),
            "{err}"
        );
        assert!(!out.exists());
    }
    let bench = |flag: &str, v: &str| {
        lm_app(&[
            "bench",
            "--skip-gpt2",
            "--model",
            model,
            "--reps",
            "1",
            flag,
            v,
        ])
    };
    for (flag, v, says) in [
        ("--train-len", "0", "--train-len"),
        ("--train-len", "1", "--train-len"),
        ("--train-len", "9223372036854775807", "--train-len"),
        ("--batch", "0", "--batch"),
        ("--batch", "9223372036854775807", "--batch"),
        ("--new-tokens", "9223372036854775807", "context"),
        ("--prompt-len", "9223372036854775807", "context"),
        ("--prompt-len", "0", "--prompt-len"),
    ] {
        let (code, err, _) = bench(flag, v);
        assert_eq!(code, Some(1), "{flag} {v}: {err}");
        assert!(
            err.contains(says) && !err.contains("panicked"),
            "{flag} {v}: {err}"
        );
    }
}

/// `bench --model` is loaded and checked before anything is timed: a file that is not a model
/// is refused at once, not after the GPT-2 benchmark (≈ 50 s on two cores).
#[test]
fn bench_refuses_a_bad_model_before_benchmarking() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("random.gguf");
    std::fs::write(
        &bad,
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let (code, err, took) = lm_app(&["bench", "--model", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("random.gguf"), "{err}");
    assert!(took.as_secs() < 10, "refused after {took:?}");
}
