//! End-to-end tests of the `imdb-app` binary on the tiny Llama fixture (vocab 1000) with a
//! word-level tokenizer made here to match it, a handful of reviews, and the real IMDB textcat
//! reward (fetched through the `lmrl_data` asset cache when it is not cached yet).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lmrl_runs::{MetricRow, read_rows};

const BIN: &str = env!("CARGO_BIN_EXE_imdb-app");

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

const WORDS: &[&str] = &[
    "the",
    "a",
    "movie",
    "film",
    "was",
    "is",
    "and",
    "but",
    "great",
    "good",
    "bad",
    "awful",
    "wonderful",
    "boring",
    "loved",
    "hated",
    "story",
    "acting",
    "plot",
    "i",
    "it",
    "this",
    "really",
    "very",
    "not",
    "fun",
    "terrible",
    "excellent",
    "beautiful",
    "dull",
    "funny",
    "actors",
    "ending",
    "music",
    "scenes",
    "of",
    "to",
    "in",
    "with",
    "best",
    "worst",
    "ever",
];

/// A copy of `tests/fixtures/llama-tiny` with a 1000-entry word-level `tokenizer.json`
/// (ids 0–2 = `<unk>`, `<s>`, `</s>` as the fixture's config says) next to it.
fn tiny_model(dir: &Path, vocab: usize) -> PathBuf {
    let m = dir.join(format!("llama-tiny-{vocab}"));
    std::fs::create_dir_all(&m).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixtures().join("llama-tiny").join(f), m.join(f)).unwrap();
    }
    let mut v = serde_json::Map::new();
    for (i, t) in ["<unk>", "<s>", "</s>"].iter().enumerate() {
        v.insert(t.to_string(), i.into());
    }
    for (i, w) in WORDS.iter().enumerate() {
        v.insert(w.to_string(), (i + 3).into());
    }
    for i in v.len()..vocab {
        v.insert(format!("w{i}"), i.into());
    }
    let tok = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [
            {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "vocab": v, "unk_token": "<unk>"}
    });
    std::fs::write(m.join("tokenizer.json"), tok.to_string()).unwrap();
    std::fs::write(
        m.join("tokenizer_config.json"),
        r#"{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}"#,
    )
    .unwrap();
    m
}

/// 24 reviews of > 100 characters made of vocabulary words.
fn reviews(dir: &Path) -> PathBuf {
    let p = dir.join("reviews.csv");
    let mut s = String::from("text,label\n");
    for i in 0..24 {
        let (a, b) = if i % 2 == 0 {
            ("great", "loved")
        } else {
            ("awful", "hated")
        };
        let w = WORDS[i % WORDS.len()];
        s.push_str(&format!(
            "\"{w} the movie was {a} and i {b} the acting but the plot was {a} and the music was very {a} in this film\",{}\n",
            i % 2
        ));
    }
    std::fs::write(&p, s).unwrap();
    p
}

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    model: PathBuf,
    data: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let model = tiny_model(&root, 1000);
    let data = reviews(&root);
    Setup {
        _tmp: tmp,
        root,
        model,
        data,
    }
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(BIN).args(args).output().unwrap();
    eprintln!(
        "imdb-app {}\n--- stderr ---\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The flags of `[ppo]` that `train_args` gives; a run whose copies learn with GRPO or RLOO
/// refuses them.
const PPO_FLAGS: [&str; 4] = ["--batch-size", "--mini-batch-size", "--ppo-epochs", "--lr"];

/// `args` without the `[ppo]` flags (and their values) of `train_args`.
fn without_ppo_flags<T: AsRef<str> + Clone>(args: &[T]) -> Vec<T> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if PPO_FLAGS.contains(&args[i].as_ref()) {
            i += 2;
        } else {
            out.push(args[i].clone());
            i += 1;
        }
    }
    out
}

fn train_args<'a>(s: &'a Setup, algo: &'a str, out: &'a str, iterations: &'a str) -> Vec<&'a str> {
    let args = vec![
        "--algo",
        algo,
        "--model",
        s.model.to_str().unwrap(),
        "--data",
        s.data.to_str().unwrap(),
        "--reward",
        "textcat",
        "--batch-size",
        "4",
        "--mini-batch-size",
        "2",
        "--ppo-epochs",
        "2",
        "--lr",
        "1e-3",
        "--iterations",
        iterations,
        "--response-tokens-min",
        "2",
        "--response-tokens-max",
        "4",
        "--swap-period",
        "1",
        "--checkpoint-every",
        "1",
        "--seed",
        "7",
        "--heldout-reviews",
        "4",
        "--eval-samples",
        "2",
        "--out",
        out,
    ];
    match algo {
        "grpo" | "rloo" => without_ppo_flags(&args),
        _ => args,
    }
}

fn agents(rows: &[MetricRow]) -> Vec<(usize, String, String)> {
    rows.iter()
        .map(|r| (r.iteration, r.agent.clone(), r.role.clone()))
        .collect()
}

#[test]
fn ppo_run_writes_every_output() {
    let s = setup();
    let out = s.root.join("ppo");
    // A repetition penalty below 1 favours tokens already present, so the responses repeat
    // words and the repetition column has something to measure.
    let mut args = train_args(&s, "ppo", out.to_str().unwrap(), "3");
    args.extend(["--repetition-penalty", "0.05"]);
    let o = run(&args);
    assert!(o.status.success());
    for f in [
        "config.toml",
        "metrics.csv",
        "samples.jsonl",
        "summary.json",
        "task_reward.png",
        "kl.png",
        "combined_reward.png",
        "reward_vs_kl.png",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(
        cfg.contains("algo = \"ppo\"") && cfg.contains("score_norm = false"),
        "{cfg}"
    );
    let rows = read_rows(&out.join("metrics.csv")).unwrap();
    assert_eq!(
        agents(&rows),
        (0..3)
            .map(|i| (i, "policy".into(), "policy".into()))
            .collect::<Vec<_>>()
    );
    assert!(
        rows.iter()
            .all(|r| r.task_reward.is_finite() && r.kl.is_finite())
    );
    // The first rollout is the reference policy itself. Its first minibatch is scored by the
    // training forward (kept for that minibatch's loss), the reference by the no-grad one:
    // the same function, whose kernels round differently for a handful of rows.
    assert!(
        rows[0].kl.abs() < 1e-5,
        "the first rollout is the reference policy itself: KL {}",
        rows[0].kl
    );
    let ck = out.join("checkpoints/iter-000003/policy");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "value_head.safetensors",
    ] {
        assert!(ck.join(f).is_file(), "checkpoint file {f} missing");
    }
    // Only the newest `keep_checkpoints` (2) are kept.
    assert!(!out.join("checkpoints/iter-000001").exists());
    let samples = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    assert_eq!(samples.lines().count(), 3 * 4);
    // The repetition column is the mean of 1 − distinct/total words over the logged responses.
    let mut words_by_it: Vec<Vec<(usize, usize)>> = vec![Vec::new(); 3];
    for l in samples.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let w: Vec<&str> = v["response"].as_str().unwrap().split_whitespace().collect();
        let distinct: std::collections::BTreeSet<&str> = w.iter().copied().collect();
        if !w.is_empty() {
            words_by_it[v["iteration"].as_u64().unwrap() as usize].push((distinct.len(), w.len()));
        }
    }
    for (r, words) in rows.iter().zip(&words_by_it) {
        let per: Vec<f64> = words
            .iter()
            .map(|&(d, n)| 1.0 - d as f64 / n as f64)
            .collect();
        let expected = per.iter().sum::<f64>() / per.len().max(1) as f64;
        assert!(
            (r.repetition - expected).abs() < 1e-12,
            "{} vs {expected}",
            r.repetition
        );
    }

    // The trained checkpoint generates text.
    let o = run(&[
        "generate",
        "--model",
        out.to_str().unwrap(),
        "--prompt",
        "the movie was",
        "--max-new-tokens",
        "3",
        "--greedy",
    ]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("the movie was"), "{text}");

    // A finished run refuses to be overwritten.
    let o = run(&train_args(&s, "ppo", out.to_str().unwrap(), "3"));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--resume"));
}

#[test]
fn cory_run_names_copies_across_role_exchanges() {
    let s = setup();
    let out = s.root.join("cory");
    let o = run(&train_args(&s, "cory", out.to_str().unwrap(), "3"));
    assert!(o.status.success());
    let rows = read_rows(&out.join("metrics.csv")).unwrap();
    // swap period 1: llm1 is pioneer, observer, pioneer.
    let want: Vec<(usize, String, String)> = vec![
        (0, "llm1".into(), "pioneer".into()),
        (0, "llm2".into(), "observer".into()),
        (1, "llm1".into(), "observer".into()),
        (1, "llm2".into(), "pioneer".into()),
        (2, "llm1".into(), "pioneer".into()),
        (2, "llm2".into(), "observer".into()),
    ];
    assert_eq!(agents(&rows), want);
    let ck = out.join("checkpoints/iter-000003");
    assert!(ck.join("llm1/model.safetensors").is_file());
    assert!(ck.join("llm2/value_head.safetensors").is_file());
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(ck.join("state.toml")).unwrap()).unwrap();
    assert_eq!(state["completed_iterations"].as_integer(), Some(3));
    // After 3 swaps of period 1, llm2 is the pioneer (first entry).
    assert_eq!(state["agents"][0]["name"].as_str(), Some("llm2"));
}

fn eval_rows(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The held-out openings never appear as a training prompt; the base model is evaluated before
/// training (the plots' reference level) and every copy after it, each copy's gain being its
/// paired difference to the base; `eval` on the finished run reproduces those rows from the
/// saved checkpoint, and evaluates one model on a plain-text file of openings.
#[test]
fn heldout_openings_are_never_trained_on_and_eval_reproduces_the_run() {
    let s = setup();
    let out = s.root.join("cory-heldout");
    let o = run(&train_args(&s, "cory", out.to_str().unwrap(), "2"));
    assert!(o.status.success());
    let held: Vec<String> = std::fs::read_to_string(out.join("heldout.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(held.len() >= 4, "{held:?}");
    let samples = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    for l in samples.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["role"] == "pioneer" {
            let p = v["prompt"].as_str().unwrap();
            assert!(
                !held.iter().any(|h| h == p),
                "trained on held-out opening {p:?}"
            );
        }
    }
    let rows = eval_rows(&out.join("eval.json"));
    let names: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["stage"].as_str().unwrap(), r["agent"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [("before", "base"), ("after", "llm1"), ("after", "llm2")]
    );
    let base = rows[0]["reward"].as_f64().unwrap();
    for r in &rows[1..] {
        let gain = r["gain"].as_f64().unwrap();
        let diff = r["reward"].as_f64().unwrap() - base;
        assert!(
            (gain - diff).abs() < 1e-9,
            "paired gain {gain} vs difference {diff}"
        );
        assert_eq!(r["openings"].as_u64(), Some(held.len() as u64));
        assert_eq!(r["per_opening"].as_array().unwrap().len(), held.len());
    }
    let levels: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("levels.json")).unwrap()).unwrap();
    assert_eq!(levels[0]["value"].as_f64(), Some(base));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["evaluation"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        std::fs::read_to_string(out.join("eval-samples.jsonl"))
            .unwrap()
            .lines()
            .count(),
        3 * 2 * held.len()
    );

    // The same seed, samples and length outside the loop: the same rows.
    let o = run(&[
        "eval",
        "--model",
        out.to_str().unwrap(),
        "--samples",
        "2",
        "--seed",
        "7",
    ]);
    assert!(o.status.success());
    let again = eval_rows(&out.join("eval-heldout/eval.json"));
    assert_eq!(again.len(), 3);
    for (a, b) in again.iter().zip(&rows) {
        assert_eq!(a["agent"], b["agent"]);
        assert_eq!(a["per_opening"], b["per_opening"], "{}", a["agent"]);
    }
    assert!(String::from_utf8_lossy(&o.stdout).contains("gain over base"));

    // One model on a plain-text file of openings, compared with a given base.
    let prompts = s.root.join("openings.txt");
    std::fs::write(&prompts, "the movie was\n\nthe acting\n").unwrap();
    let one = out.join("checkpoints/iter-000002/llm2");
    let dest = s.root.join("one-eval");
    let o = run(&[
        "eval",
        "--model",
        one.to_str().unwrap(),
        "--base",
        s.model.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "--samples",
        "3",
        "--out",
        dest.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let r = eval_rows(&dest.join("eval.json"));
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[1]["openings"].as_u64(), r[1]["samples"].as_u64()),
        (Some(2), Some(3))
    );
    // Without a run, the openings must be given.
    let o = run(&["eval", "--model", one.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--prompts"));
}

#[test]
fn resume_continues_where_the_run_stopped() {
    let s = setup();
    let full = s.root.join("full");
    let part = s.root.join("part");
    assert!(
        run(&train_args(&s, "cory", full.to_str().unwrap(), "4"))
            .status
            .success()
    );
    assert!(
        run(&train_args(&s, "cory", part.to_str().unwrap(), "2"))
            .status
            .success()
    );
    let o = run(&["--resume", part.to_str().unwrap(), "--iterations", "4"]);
    assert!(o.status.success());
    let a = read_rows(&full.join("metrics.csv")).unwrap();
    let b = read_rows(&part.join("metrics.csv")).unwrap();
    assert_eq!(agents(&a), agents(&b));
    // Exact resume: weights, value heads, Adam moments, β, running score moments, minibatch
    // order and roles are all restored, so every row of every iteration — before and after the
    // checkpoint — is identical (timings aside).
    assert_eq!(a.len(), 8);
    for (x, y) in a.iter().zip(&b) {
        let mut y = y.clone();
        y.seconds = x.seconds;
        assert_eq!(*x, y, "iteration {}, {}", x.iteration, x.agent);
    }
    // The samples of the resumed iterations are the same texts too.
    let samples = |d: &Path| std::fs::read_to_string(d.join("samples.jsonl")).unwrap();
    assert_eq!(samples(&full), samples(&part));
    let ck = part.join("checkpoints/iter-000004");
    for f in [
        "llm1/model.safetensors",
        "llm1/optimizer.bpk",
        "llm2/trainer_state.toml",
        "cory_state.toml",
        "state.toml",
    ] {
        assert!(ck.join(f).is_file(), "{f} missing");
    }
    // --resume accepts no setting that would change the run.
    let o = run(&["--resume", part.to_str().unwrap(), "--lr", "0.1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--learning-rate"));
}

#[test]
fn bad_settings_exit_non_zero_with_a_message() {
    let s = setup();
    let out = s.root.join("bad");
    let out = out.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--batch-size", "4", "--mini-batch-size", "8"],
            "mini_batch_size",
        ),
        (&["--algo", "cory", "--swap-period", "0"], "swap_period"),
        (&["--no-such-flag"], "--no-such-flag"),
        (&["--algo", "sarsa"], "sarsa"),
        (&["--adap-kl-ctrl", "maybe"], "--adap-kl-ctrl"),
        // `=`: clap takes a separate `-1` for a flag.
        (&["--learning-rate=-1"], "ppo.learning_rate"),
    ];
    for (args, needle) in cases {
        let mut a = args.to_vec();
        a.extend(["--out", out]);
        let o = run(&a);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert!(!Path::new(out).join("metrics.csv").exists());
}

#[test]
fn model_and_tokenizer_that_do_not_match_are_rejected() {
    let s = setup();
    let bad = tiny_model(&s.root.join("big"), 1200);
    let out = s.root.join("mismatch");
    let mut a = train_args(&s, "ppo", out.to_str().unwrap(), "1");
    a[3] = bad.to_str().unwrap();
    let o = run(&a);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("1200") && err.contains("1000"), "{err}");
    assert!(
        !out.exists(),
        "--out created for a run that could not start"
    );
}

#[test]
fn score_matches_spacy_given_its_tokens() {
    let s = setup();
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("textcat-imdb/expected.json")).unwrap(),
    )
    .unwrap();
    let cases = expected["cases"].as_array().unwrap();
    let input = s.root.join("in.jsonl");
    let output = s.root.join("out.jsonl");
    let mut text = String::new();
    for c in cases {
        let line = serde_json::json!({"text": c["text"], "tokens": c["tokens"]});
        text.push_str(&format!("{line}\n"));
    }
    std::fs::write(&input, text).unwrap();
    let o = run(&[
        "score",
        "--reward",
        "textcat",
        "--input",
        input.to_str().unwrap(),
        "--out",
        output.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let got: Vec<serde_json::Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), cases.len());
    let mut checked = 0;
    for (g, c) in got.iter().zip(cases) {
        let (p, want) = (g["p_pos"].as_f64().unwrap(), c["p_pos"].as_f64().unwrap());
        if c["tokens"].as_array().is_some_and(|t| t.is_empty()) {
            // spaCy gives P(POS) = 0 for an empty document; the port deliberately gives the
            // bias-only prior (lmrl-rewards docs), so only check that it is a probability.
            assert!(p > 0.0 && p < 1.0);
            continue;
        }
        checked += 1;
        assert!((p - want).abs() < 1e-5, "{}: {p} vs {want}", c["text"]);
        // score is the POS−NEG logit, so sigmoid(score) = P(POS).
        let score = g["score"].as_f64().unwrap();
        assert!(
            (1.0 / (1.0 + (-score).exp()) - want).abs() < 1e-5,
            "score {score}"
        );
    }
    assert!(checked >= 3, "only {checked} non-empty cases");
}

#[test]
fn ppo_resume_is_exact() {
    let s = setup();
    let full = s.root.join("ppo-full");
    let part = s.root.join("ppo-part");
    assert!(
        run(&train_args(&s, "ppo", full.to_str().unwrap(), "3"))
            .status
            .success()
    );
    assert!(
        run(&train_args(&s, "ppo", part.to_str().unwrap(), "1"))
            .status
            .success()
    );
    assert!(
        run(&["--resume", part.to_str().unwrap(), "--iterations", "3"])
            .status
            .success()
    );
    let a = read_rows(&full.join("metrics.csv")).unwrap();
    let b = read_rows(&part.join("metrics.csv")).unwrap();
    assert_eq!(a.len(), 3);
    assert_eq!(agents(&a), agents(&b));
    for (x, y) in a.iter().zip(&b) {
        let mut y = y.clone();
        y.seconds = x.seconds;
        assert_eq!(*x, y, "iteration {}", x.iteration);
    }
    assert!(
        part.join("checkpoints/iter-000003/policy/optimizer.bpk")
            .is_file()
    );
}

// ---------------------------------------------------------------------------------------
// Data parallel: the same global batch split over ranks gives the same run.

/// Largest |a − b| over the numeric columns of two metrics logs (timings aside), checking
/// that they hold the same rows.
fn metrics_diff(a: &Path, b: &Path) -> f64 {
    let (a, b) = (read_rows(a).unwrap(), read_rows(b).unwrap());
    assert_eq!(agents(&a), agents(&b));
    let cols = |r: &MetricRow| {
        [
            r.task_reward,
            r.kl,
            r.beta,
            r.combined_reward,
            r.policy_loss,
            r.value_loss,
            r.entropy,
            r.approxkl,
            r.clipfrac,
            r.response_len,
            r.pioneer_task_reward,
            r.pioneer_kl,
            r.repetition,
            r.reward_std.unwrap_or(f64::NAN),
        ]
    };
    a.iter()
        .zip(&b)
        .flat_map(|(x, y)| cols(x).into_iter().zip(cols(y)))
        // A column missing from both rows (NaN) is equal; missing from one is not.
        .map(|(x, y)| {
            if x.is_nan() && y.is_nan() {
                0.0
            } else if x.is_nan() || y.is_nan() {
                f64::INFINITY
            } else {
                (x - y).abs()
            }
        })
        .fold(0.0, f64::max)
}

/// Largest |a − b| over every weight of two checkpointed copies (`model.safetensors` and,
/// for PPO, `value_head.safetensors`).
fn weights_diff(a: &Path, b: &Path) -> f64 {
    let mut worst = 0.0f64;
    for file in ["model.safetensors", "value_head.safetensors"] {
        if file != "model.safetensors" && !a.join(file).exists() {
            continue;
        }
        let x = lmrl_models::TensorMap::from_safetensors(&a.join(file)).unwrap();
        let y = lmrl_models::TensorMap::from_safetensors(&b.join(file)).unwrap();
        assert_eq!(x.tensors.len(), y.tensors.len());
        for (name, t) in &x.tensors {
            let u = &y.tensors[name];
            assert_eq!(t.shape, u.shape, "{name}");
            for (p, q) in t.data.iter().zip(&u.data) {
                worst = worst.max(f64::from((p - q).abs()));
            }
        }
    }
    worst
}

/// The metrics and weights of a run of `ranks` against the one-process run `one`, printed
/// (the measured numbers quoted in docs/distributed.md) and checked within 1e-4.
fn assert_same_run(one: &Path, ranks: &Path, copies: &[&str], what: &str) {
    let m = metrics_diff(&one.join("metrics.csv"), &ranks.join("metrics.csv"));
    let mut w = 0.0f64;
    for c in copies {
        let ck = |d: &Path| d.join("checkpoints/iter-000003").join(c);
        w = w.max(weights_diff(&ck(one), &ck(ranks)));
    }
    eprintln!("{what}: max |Δ metrics| = {m:.3e}, max |Δ weights| = {w:.3e}");
    assert!(m <= 1e-4, "{what}: metrics differ by {m}");
    assert!(w <= 1e-4, "{what}: weights differ by {w}");
    let samples = |d: &Path| std::fs::read_to_string(d.join("samples.jsonl")).unwrap();
    assert_eq!(samples(one).lines().count(), samples(ranks).lines().count());
}

/// Tiny runs with a batch of 8 in minibatches of 4, so that each rank holds part of every
/// minibatch, and generation chunks of 4 that line up with the ranks' shares.
fn parallel_args<'a>(s: &'a Setup, algo: &'a str, out: &'a str) -> Vec<&'a str> {
    let mut a = train_args(s, algo, out, "3");
    for (flag, value) in [
        ("--batch-size", "8"),
        ("--mini-batch-size", "4"),
        ("--swap-period", "2"),
        ("--checkpoint-every", "3"),
    ] {
        // A group learner's run has no `[ppo]` flags to change.
        if let Some(i) = a.iter().position(|x| *x == flag) {
            a[i + 1] = value;
        }
    }
    a.extend(["--generation-batch-size", "4"]);
    if let Some(p) = ["grpo", "rloo"].into_iter().find(|p| *p == algo) {
        // 4 prompts × 2 samples, 2 Adam steps of 2 micro-batches of 2 completions each; a
        // KL term and two passes, so the no-grad pre-pass and off-policy ratios are reduced too;
        // a learning rate at which the weights move visibly in 3 iterations.
        for (flag, value) in [
            ("num-generations", "2"),
            ("prompts-per-step", "4"),
            ("mini-batch-size", "2"),
            ("gradient-accumulation-steps", "2"),
            ("beta", "0.04"),
            ("num-iterations", "2"),
            ("learning-rate", "1e-3"),
        ] {
            a.push(format!("--{p}-{flag}").leak());
            a.push(value);
        }
    }
    a
}

#[test]
fn two_ranks_in_one_process_train_as_one() {
    let s = setup();
    for (algo, copies) in [("ppo", &["policy"][..]), ("cory", &["llm1", "llm2"][..])] {
        let one = s.root.join(format!("{algo}-1"));
        let two = s.root.join(format!("{algo}-2"));
        let o = run(&parallel_args(&s, algo, one.to_str().unwrap()));
        assert!(o.status.success());
        let mut a = parallel_args(&s, algo, two.to_str().unwrap());
        a.extend(["--device", "cpu,cpu"]);
        let o = run(&a);
        assert!(o.status.success());
        assert_same_run(&one, &two, copies, &format!("{algo}, 2 threads vs 1"));
        // Rank 0 alone wrote the run.
        assert!(two.join("summary.json").is_file());
    }
    // The group learners: whole groups per rank, micro-batches split across them.
    for algo in ["grpo", "rloo"] {
        let one = s.root.join(format!("{algo}-1"));
        let two = s.root.join(format!("{algo}-2"));
        let o = run(&parallel_args(&s, algo, one.to_str().unwrap()));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut a = parallel_args(&s, algo, two.to_str().unwrap());
        a.extend(["--device", "cpu,cpu"]);
        let o = run(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_same_run(&one, &two, &["policy"], &format!("{algo}, 2 threads vs 1"));
    }
}

/// CORY with llm2 (and its copy of the reference) moved to a device of its own,
/// `--llm2-device`, trains exactly as with both copies on the run's device — fresh and resumed
/// — and the flag is refused where it has no meaning. On this CPU both devices are the same
/// one, so this checks the moves (llm2's weights, value head and reference copied to fresh
/// leaves there), not a second device's kernels.
#[test]
fn llm2_on_its_own_device_trains_as_on_one() {
    let s = setup();
    let one = s.root.join("cory-one");
    assert!(
        run(&parallel_args(&s, "cory", one.to_str().unwrap()))
            .status
            .success()
    );
    let apart = s.root.join("cory-apart");
    let mut a = parallel_args(&s, "cory", apart.to_str().unwrap());
    a.extend(["--llm2-device", "cpu"]);
    let o = run(&a);
    assert!(o.status.success());
    let exact = |d: &Path, what: &str| {
        let m = metrics_diff(&one.join("metrics.csv"), &d.join("metrics.csv"));
        assert_eq!(m, 0.0, "{what}: metrics differ by {m}");
        for c in ["llm1", "llm2"] {
            let ck = |r: &Path| r.join("checkpoints/iter-000003").join(c);
            let w = weights_diff(&ck(&one), &ck(d));
            assert_eq!(w, 0.0, "{what}: {c}'s weights differ by {w}");
        }
    };
    exact(&apart, "--llm2-device cpu");

    // Resumed with llm2 on its own device after a run that had it there.
    let part = s.root.join("cory-apart-part");
    let mut a = parallel_args(&s, "cory", part.to_str().unwrap());
    for (flag, value) in [("--iterations", "2"), ("--checkpoint-every", "1")] {
        // A group learner's run has no `[ppo]` flags to change.
        if let Some(i) = a.iter().position(|x| *x == flag) {
            a[i + 1] = value;
        }
    }
    a.extend(["--llm2-device", "cpu"]);
    assert!(run(&a).status.success());
    let p = part.to_str().unwrap();
    let o = run(&["--resume", p, "--iterations", "3", "--llm2-device", "cpu"]);
    assert!(o.status.success());
    exact(&part, "resumed with --llm2-device cpu");

    for (flags, expected) in [
        (
            [("--algo", "ppo"), ("--llm2-device", "cpu")],
            "places CORY's second copy, and this run trains ppo",
        ),
        (
            [("--device", "cpu,cpu"), ("--llm2-device", "cpu")],
            "this run has 2 data-parallel ranks",
        ),
        (
            [("--algo", "cory"), ("--llm2-device", "cpu,cpu")],
            "takes one device, not a list",
        ),
        (
            [("--algo", "cory"), ("--llm2-device", "gpu:0")],
            "expected `cpu`, `cuda:N` or `wgpu:N`",
        ),
    ] {
        let out = s.root.join("refused");
        let mut a = parallel_args(&s, "cory", out.to_str().unwrap());
        for (flag, value) in flags {
            match a.iter().position(|x| *x == flag) {
                Some(i) => a[i + 1] = value,
                None => a.extend([flag, value]),
            }
        }
        let o = run(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(expected),
            "{flags:?}: {err}"
        );
        assert!(
            !out.exists(),
            "{flags:?}: a refused run created {}",
            out.display()
        );
    }
}

/// `mpirun -np 2` of imdb-app built with `--features mpi` against one process (and a resume
/// under MPI): `scripts/check-mpi.sh` runs it.
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs imdb-app built with --features mpi, and mpirun (scripts/check-mpi.sh)"
)]
fn two_mpi_ranks_train_as_one() {
    let app = BIN;
    let s = setup();
    for (algo, copies) in [
        ("ppo", &["policy"][..]),
        ("cory", &["llm1", "llm2"][..]),
        ("grpo", &["policy"][..]),
    ] {
        let one = s.root.join(format!("{algo}-1"));
        let two = s.root.join(format!("{algo}-mpi"));
        let o = Command::new(app)
            .args(parallel_args(&s, algo, one.to_str().unwrap()))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = mpirun(2)
            .arg(app)
            .args(parallel_args(&s, algo, two.to_str().unwrap()))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_same_run(&one, &two, copies, &format!("{algo}, mpirun -np 2 vs 1"));
    }

    // Resume under MPI: 2 iterations, then 1 more, as the uninterrupted run.
    let part = s.root.join("ppo-mpi-part");
    let mut a = parallel_args(&s, "ppo", part.to_str().unwrap());
    let i = a.iter().position(|x| *x == "--iterations").unwrap();
    a[i + 1] = "2";
    let i = a.iter().position(|x| *x == "--checkpoint-every").unwrap();
    a[i + 1] = "1";
    let o = mpirun(2).arg(app).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = mpirun(2)
        .arg(app)
        .args(["--resume", part.to_str().unwrap(), "--iterations", "3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_same_run(
        &s.root.join("ppo-1"),
        &part,
        &["policy"],
        "ppo, mpirun -np 2 resumed vs 1",
    );
}

/// A rank killed from outside (SIGKILL, as the OOM killer or a failed node would) stops the
/// whole MPI job with an error, and the run's newest checkpoint is intact: the run resumes from
/// it in one process.
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs imdb-app built with --features mpi, and mpirun (scripts/check-mpi.sh)"
)]
fn a_killed_mpi_rank_stops_the_job_and_the_run_resumes() {
    let s = setup();
    let dir = s.root.join("killed");
    let mut a = parallel_args(&s, "ppo", dir.to_str().unwrap());
    for (flag, value) in [("--iterations", "400"), ("--checkpoint-every", "1")] {
        // A group learner's run has no `[ppo]` flags to change.
        if let Some(i) = a.iter().position(|x| *x == flag) {
            a[i + 1] = value;
        }
    }
    let mut job = mpirun(2)
        .arg(BIN)
        .args(&a)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Rank 1 is the imdb-app process whose environment says so and whose arguments name `dir`.
    let rank1 = || -> Option<u32> {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
            (has(&cmd, dir.to_str()?.as_bytes())
                && has(&cmd, b"imdb-app")
                && has(&env, b"OMPI_COMM_WORLD_RANK=1\0"))
            .then_some(pid)
        })
    };
    let t0 = std::time::Instant::now();
    while !dir.join("checkpoints/iter-000002").is_dir() {
        assert!(
            t0.elapsed().as_secs() < 120,
            "no second checkpoint after 2 min"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = rank1().expect("rank 1 is running");
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(st) = job.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed().as_secs() < 60,
            "the job still runs 60 s after rank 1 died"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut err).unwrap();
    eprintln!("{err}");
    assert!(!status.success(), "{err}");
    let rows = read_rows(&dir.join("metrics.csv")).unwrap();
    let done = rows.len();
    assert!((2..400).contains(&done), "{done} iterations logged");
    // Resumed in one process from what the job left.
    let more = (done + 1).to_string();
    let o = run(&["--resume", dir.to_str().unwrap(), "--iterations", &more]);
    assert!(o.status.success());
    let rows = read_rows(&dir.join("metrics.csv")).unwrap();
    assert_eq!(rows.len(), done + 1);
    assert!(
        dir.join(format!("checkpoints/iter-{:06}", done + 1))
            .is_dir()
    );
}

fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["-np", &n.to_string(), "--oversubscribe"])
        // Containers: no ptrace-based single copy; CI runs as root.
        .args(["--mca", "btl_vader_single_copy_mechanism", "none"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

/// `--algo grpo` and `--algo rloo` train one critic-free policy on 2 prompts × 2 samples per
/// iteration; `--algo cory --cory-learner rloo` runs CORY's two copies on RLOO.
#[test]
fn group_learners_alone_and_under_cory() {
    let s = setup();
    let group = |algo: &str| -> Vec<String> {
        [
            "num-generations",
            "prompts-per-step",
            "mini-batch-size",
            "gradient-accumulation-steps",
        ]
        .iter()
        .zip(["2", "2", "2", "2"])
        .flat_map(|(f, v)| [format!("--{algo}-{f}"), v.to_string()])
        .collect()
    };
    for algo in ["grpo", "rloo"] {
        let out = s.root.join(algo);
        let mut args: Vec<String> = train_args(&s, algo, out.to_str().unwrap(), "2")
            .into_iter()
            .map(String::from)
            .collect();
        args.extend(group(algo));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&a);
        assert!(o.status.success(), "{algo}");
        let rows = read_rows(&out.join("metrics.csv")).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.frac_reward_zero_std.is_some()));
        let samples = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
        assert_eq!(samples.lines().count(), 2 * 4, "2 prompts × 2 samples");
        let ck = out.join("checkpoints/iter-000002/policy");
        assert!(ck.join("model.safetensors").is_file());
        assert!(!ck.join("value_head.safetensors").exists());
    }
    let out = s.root.join("cory-rloo");
    let mut args: Vec<String> =
        without_ppo_flags(&train_args(&s, "cory", out.to_str().unwrap(), "2"))
            .into_iter()
            .map(String::from)
            .collect();
    args.extend(group("rloo"));
    args.extend(["--cory-learner".to_string(), "rloo".to_string()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(run(&a).status.success());
    let rows = read_rows(&out.join("metrics.csv")).unwrap();
    assert_eq!(rows.len(), 4);
    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(cfg.contains("cory_learner = \"rloo\""), "{cfg}");
}

/// A stray quote in the review CSV costs only its own row, which is named with its line; with
/// `--skip-bad-rows false` the run stops there with an error naming the file and line.
#[test]
fn a_bad_review_row_is_named_and_can_stop_the_run() {
    let s = setup();
    let text = std::fs::read_to_string(&s.data).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    // Line 5 of the file (the 4th review): a quote opens a field and never closes on its line.
    lines[4] = "\"the movie was great and i loved it,1".into();
    let bad = s.root.join("bad.csv");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let out = s.root.join("skip");
    let mut args = train_args(&s, "ppo", out.to_str().unwrap(), "1");
    let i = args.iter().position(|a| *a == "--data").unwrap();
    args[i + 1] = bad.to_str().unwrap();
    let o = run(&args);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.csv:5"), "{err}");
    assert!(err.contains("1 unreadable rows skipped"), "{err}");
    let out = s.root.join("strict");
    let mut args = train_args(&s, "ppo", out.to_str().unwrap(), "1");
    args[i + 1] = bad.to_str().unwrap();
    args.extend(["--skip-bad-rows", "false"]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.csv:5"), "{err}");
    assert!(!out.exists(), "a run that cannot start creates no --out");
}
