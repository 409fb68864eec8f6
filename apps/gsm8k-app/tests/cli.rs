//! The built `gsm8k-app` binary: the `check` contract on adversarial lines (expected values
//! worked out by hand from the checker's documented rules), `eval` and short `train` runs of
//! PPO and CORY on the tiny Llama fixture, resume, LoRA, and failures on bad input.
mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use lmrl_runs::read_rows;
use serde_json::{Value, json};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------
// check

#[test]
fn check_extracts_and_compares_adversarial_answers() {
    let dir = TempDir::new().unwrap();
    // (response, answer, expected extracted, expected correct), each worked out by hand.
    let cases: &[(&str, &str, Option<&str>, bool)] = &[
        // Thousands separator in the response, none in the truth.
        (
            "The total is 1,234 apples.",
            "Add them.\n#### 1234",
            Some("1234"),
            true,
        ),
        // Dollar sign and trailing fractional zero: $5.50 = 5.5.
        ("She pays $5.50 in total.", "#### 5.5", Some("5.5"), true),
        // A negative answer.
        (
            "The temperature drops to -3 degrees.",
            "#### -3",
            Some("-3"),
            true,
        ),
        // A fraction equals the decimal truth exactly: 3/4 = 0.75.
        ("Each gets 3/4 of a pie.", "#### 0.75", Some("3/4"), true),
        // No number at all.
        ("I don't know.", "#### 4", None, false),
        // An invented follow-up question: its "2" must not count; 9 is the answer.
        (
            "5 + 4 = 9.\nQuestion: Tom has 2 apples. How many?\nAnswer: 2",
            "#### 9",
            Some("9"),
            true,
        ),
        // The last number is the answer, even when it is wrong.
        (
            "He had 10 and gave away 3, so 7 remain",
            "#### 8",
            Some("7"),
            false,
        ),
        // "$1,000.00" = 1000; the truth written with a comma after ####.
        (
            "It costs $1,000.00",
            "The answer is below.\n#### 1,000",
            Some("1000"),
            true,
        ),
        // "3-4" is a range/subtraction (no sign glued to a digit), "-1" after a space is negative.
        ("The difference is 3-4 = -1", "#### -1", Some("-1"), true),
        // The response opens with an invented question: nothing is left before the cut.
        ("Question: how many? 5", "#### 5", None, false),
        // "5.0" is 5; the sentence's final period is punctuation.
        ("Half of 10 is 5.0.", "#### 5", Some("5"), true),
    ];
    let input = dir.path().join("in.jsonl");
    // Blank lines (one empty, one of spaces) in the middle and at the end: the output keeps
    // them, so that output line i answers input line i.
    let mut lines: Vec<String> = cases
        .iter()
        .map(|(r, a, _, _)| json!({"response": r, "answer": a}).to_string())
        .collect();
    lines.insert(1, String::new());
    lines.insert(3, "   ".into());
    lines.push(String::new());
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("out.jsonl");
    run_ok(
        bin()
            .arg("check")
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out),
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let out_lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        out_lines.len(),
        lines.len(),
        "one output line per input line:\n{text}"
    );
    let mut got = Vec::new();
    for (i, (o, l)) in out_lines.iter().zip(&lines).enumerate() {
        assert_eq!(
            o.is_empty(),
            l.trim().is_empty(),
            "line {}: {o:?} for {l:?}",
            i + 1
        );
        if !o.is_empty() {
            got.push(serde_json::from_str::<serde_json::Value>(o).unwrap());
        }
    }
    assert_eq!(got.len(), cases.len());
    for (g, (r, _, extracted, correct)) in got.iter().zip(cases) {
        assert_eq!(g["extracted"], json!(extracted), "extracted for {r:?}");
        assert_eq!(g["correct"], json!(correct), "correct for {r:?}");
    }
}

#[test]
fn check_fails_naming_the_bad_line_and_writes_nothing() {
    let dir = TempDir::new().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"response\": \"9\", \"answer\": \"#### 9\"}\n{\"response\": \"9\", \"answer\": \n",
    )
    .unwrap();
    let out = dir.path().join("out.jsonl");
    let (code, err) = run_err(
        bin()
            .arg("check")
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out),
    );
    assert_ne!(code, 0);
    assert!(err.contains("line 2"), "{err}");
    assert!(!out.exists(), "no partial output");

    std::fs::write(&input, "{\"response\": \"9\"}\n").unwrap();
    let (_, err) = run_err(
        bin()
            .arg("check")
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out),
    );
    assert!(err.contains("line 1") && err.contains("answer"), "{err}");

    std::fs::write(&input, "{\"response\": \"9\", \"answer\": \"#### none\"}\n").unwrap();
    let (_, err) = run_err(
        bin()
            .arg("check")
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out),
    );
    assert!(err.contains("line 1"), "{err}");
}

// ---------------------------------------------------------------------------------------
// tiny model + data

fn assert_checkpoint(run: &Path, iters: usize, agents: &[&str]) {
    let ck = run.join(format!("checkpoints/iter-{iters:06}"));
    assert!(ck.join("state.toml").is_file(), "{}", ck.display());
    for a in agents {
        for f in [
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "value_head.safetensors",
        ] {
            assert!(ck.join(a).join(f).is_file(), "{a}/{f}");
        }
    }
}

#[test]
fn ppo_trains_two_iterations_and_evaluates_before_and_after() {
    let t = tiny();
    let out = t.dir.path().join("ppo");
    let o = run_ok(&mut train_cmd(&t, "ppo", &out, &[]));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("| before | base | GSM8K | dev |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| after | policy | GSM8K | dev |"),
        "{stdout}"
    );

    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(
        cfg.contains("algo = \"ppo\"")
            && cfg.contains("learning_rate = 0.000002")
            && cfg.contains("skip_equal_scores = true"),
        "{cfg}"
    );
    let m = csv_lines(&out.join("metrics.csv"));
    assert_eq!(m.len(), 1 + 2, "header + one row per iteration");
    assert!(m[1].starts_with("0,policy,policy,"));
    let s = read_jsonl(&out.join("samples.jsonl"));
    assert_eq!(s.len(), 4, "2 iterations × batch 2");
    for x in &s {
        let r = x["reward"].as_f64().unwrap();
        assert!(r == 0.0 || r == 1.0);
        assert!(x["truth"].is_string() && x.get("extracted").is_some());
    }
    let e = csv_lines(&out.join("eval.csv"));
    assert_eq!(e.len(), 3);
    assert!(e[1].starts_with("before,base,GSM8K,dev,2,1,0,"), "{}", e[1]);
    assert!(
        e[2].starts_with("after,policy,GSM8K,dev,2,1,0,"),
        "{}",
        e[2]
    );
    assert!(out.join("eval.md").is_file());
    assert!(out.join("task_reward.png").is_file() && out.join("kl.svg").is_file());
    assert!(out.join("summary.json").is_file());
    assert_checkpoint(&out, 2, &["policy"]);

    // The finished run's checkpoint evaluates standalone with the run's own split; its dev
    // split is what training evaluated, and each evaluation left its per-question file.
    for f in ["before-base", "after-policy"] {
        let q = read_jsonl(&out.join("eval-questions").join(format!("{f}.jsonl")));
        assert_eq!(q.len(), 2, "{f}");
    }
    let csv = t.dir.path().join("run-eval.csv");
    let o = run_ok(
        bin()
            .arg("eval")
            .arg("--model")
            .arg(&out)
            .args([
                "--split",
                "dev",
                "--limit",
                "2",
                "--batch-size",
                "2",
                "--csv",
            ])
            .arg(&csv)
            .arg("--cache-dir")
            .arg(t.dir.path().join("cache")),
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("| eval | policy | GSM8K | dev | 2 |"));
    let standalone = csv_lines(&csv);
    // Greedy decoding on the same questions: same pass@1 as the "after" row of the run.
    let pass = |l: &str| l.split(',').nth(7).unwrap().to_string();
    assert_eq!(pass(&standalone[1]), pass(&e[2]));

    // Resuming a finished run to a larger total continues from its checkpoint.
    run_ok(
        bin()
            .arg("--resume")
            .arg(&out)
            .args(["--iterations", "3", "--cache-dir"])
            .arg(t.dir.path().join("cache")),
    );
    let m = csv_lines(&out.join("metrics.csv"));
    assert_eq!(m.len(), 1 + 3);
    assert!(m[3].starts_with("2,policy,"));
    let e = csv_lines(&out.join("eval.csv"));
    assert_eq!(e.len(), 3, "one before row kept, one after row");
    assert_checkpoint(&out, 3, &["policy"]);
    assert!(
        out.join("checkpoints/iter-000003/policy/optimizer.bpk")
            .is_file()
    );
    // The resumed run is exactly the run that never stopped.
    let full = t.dir.path().join("ppo-full");
    run_ok(&mut train_cmd(&t, "ppo", &full, &[("--iterations", "3")]));
    assert_same_metrics(&full, &out, 3);
    let samples = |d: &Path| std::fs::read_to_string(d.join("samples.jsonl")).unwrap();
    assert_eq!(samples(&full), samples(&out));
}

#[test]
fn cory_resume_is_exact() {
    let t = tiny();
    // Role exchange every 2 iterations: the exchange after iteration 2 needs the restored
    // iteration counter, the one before the stop needs the restored roles.
    let flags = [
        ("--iterations", "4"),
        ("--swap-period", "2"),
        ("--eval-limit", "0"),
        ("--checkpoint-every", "3"),
    ];
    let full = t.dir.path().join("full");
    run_ok(&mut train_cmd(&t, "cory", &full, &flags));
    let part = t.dir.path().join("part");
    let mut flags_part = flags;
    flags_part[0].1 = "3";
    run_ok(&mut train_cmd(&t, "cory", &part, &flags_part));
    let state = std::fs::read_to_string(part.join("checkpoints/iter-000003/state.toml")).unwrap();
    assert!(state.contains("name = \"llm2\""), "{state}");
    run_ok(
        bin()
            .arg("--resume")
            .arg(&part)
            .args(["--iterations", "4", "--cache-dir"])
            .arg(t.dir.path().join("cache")),
    );
    assert_same_metrics(&full, &part, 8);
    let m = csv_lines(&part.join("metrics.csv"));
    assert!(m[7].starts_with("3,llm1,observer,"), "{}", m[7]);
    assert!(m[8].starts_with("3,llm2,pioneer,"), "{}", m[8]);
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
}

#[test]
fn cory_trains_two_iterations_with_a_role_exchange() {
    let t = tiny();
    let out = t.dir.path().join("cory");
    run_ok(&mut train_cmd(&t, "cory", &out, &[]));
    let m = csv_lines(&out.join("metrics.csv"));
    assert_eq!(m.len(), 1 + 4, "header + two agents × two iterations");
    // Swap period 1: llm1 is pioneer in iteration 0 and observer in iteration 1.
    assert!(m[1].starts_with("0,llm1,pioneer,"), "{}", m[1]);
    assert!(m[2].starts_with("0,llm2,observer,"), "{}", m[2]);
    assert!(m[3].starts_with("1,llm1,observer,"), "{}", m[3]);
    assert!(m[4].starts_with("1,llm2,pioneer,"), "{}", m[4]);
    let s = read_jsonl(&out.join("samples.jsonl"));
    assert_eq!(s.len(), 8);
    let obs: Vec<&Value> = s.iter().filter(|x| x["role"] == "observer").collect();
    assert_eq!(obs.len(), 4);
    // The observer's prompt holds the pioneer's answer as its reference; the pioneer's not.
    let prompt = |x: &Value| x["prompt"].as_str().unwrap().to_string();
    assert!(obs.iter().all(|x| prompt(x).contains("\nReference: ")));
    assert!(
        s.iter()
            .filter(|x| x["role"] == "pioneer")
            .all(|x| !prompt(x).contains("\nReference: "))
    );
    let e = csv_lines(&out.join("eval.csv"));
    assert_eq!(e.len(), 4);
    assert!(e[1].starts_with("before,base,"));
    assert!(e[2].starts_with("after,llm1,") && e[3].starts_with("after,llm2,"));
    assert_checkpoint(&out, 2, &["llm1", "llm2"]);
    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(
        cfg.contains("learning_rate = 0.000002") && cfg.contains("skip_equal_scores = true"),
        "gsm8k-app's CORY learning rate: {cfg}"
    );
}

#[test]
fn lora_run_trains_adapters_and_saves_merged_weights() {
    let t = tiny();
    let out = t.dir.path().join("lora");
    let mut c = train_cmd(
        &t,
        "ppo",
        &out,
        &[
            ("--lora-rank", "2"),
            ("--eval-limit", "0"),
            ("--lr", "0.01"),
            // The tiny model answers nothing right: train on its all-zero rewards anyway, with
            // TRL's random value head (a zero one would make every advantage 0 here).
            ("--skip-equal-scores", "false"),
            ("--value-head-init", "default"),
        ],
    );
    run_ok(&mut c);
    assert_checkpoint(&out, 2, &["policy"]);
    assert!(
        !out.join("eval.csv").exists(),
        "--eval-limit 0 disables evaluation"
    );
    // Base frozen, adapters trained: the merged checkpoint keeps the embeddings and norms of
    // the fixture bit for bit, while the adapted projections moved.
    let base = std::fs::read(fixture("llama-tiny").join("model.safetensors")).unwrap();
    let tuned =
        std::fs::read(out.join("checkpoints/iter-000002/policy/model.safetensors")).unwrap();
    let base = safetensors::SafeTensors::deserialize(&base).unwrap();
    let tuned = safetensors::SafeTensors::deserialize(&tuned).unwrap();
    let bytes = |t: &safetensors::SafeTensors, n: &str| t.tensor(n).unwrap().data().to_vec();
    for frozen in [
        "model.embed_tokens.weight",
        "model.norm.weight",
        "model.layers.0.input_layernorm.weight",
    ] {
        assert_eq!(
            bytes(&base, frozen),
            bytes(&tuned, frozen),
            "{frozen} must not change"
        );
    }
    let moved = ["q_proj", "k_proj", "v_proj", "o_proj"]
        .iter()
        .chain(&["gate_proj", "up_proj", "down_proj"])
        .filter(|p| {
            let n = if ["gate_proj", "up_proj", "down_proj"].contains(p) {
                format!("model.layers.1.mlp.{p}.weight")
            } else {
                format!("model.layers.1.self_attn.{p}.weight")
            };
            bytes(&base, &n) != bytes(&tuned, &n)
        })
        .count();
    assert!(moved > 0, "some adapted projection must have moved");
    // Resume is exact for LoRA too: the adapters come back from PEFT's files beside the
    // merged weights.
    let adapter = out.join("checkpoints/iter-000002/policy/adapter");
    for f in ["adapter_config.json", "adapter_model.safetensors"] {
        assert!(adapter.join(f).is_file(), "{f}");
    }
    let peft: serde_json::Value =
        serde_json::from_slice(&std::fs::read(adapter.join("adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(
        (peft["peft_type"].as_str(), peft["r"].as_u64()),
        (Some("LORA"), Some(2))
    );
    let part = t.dir.path().join("lora-part");
    let mut c = train_cmd(
        &t,
        "ppo",
        &part,
        &[
            ("--lora-rank", "2"),
            ("--eval-limit", "0"),
            ("--lr", "0.01"),
            ("--skip-equal-scores", "false"),
            ("--value-head-init", "default"),
            ("--iterations", "1"),
        ],
    );
    run_ok(&mut c);
    run_ok(
        bin()
            .arg("--resume")
            .arg(&part)
            .args(["--iterations", "2", "--cache-dir"])
            .arg(t.dir.path().join("cache")),
    );
    assert_same_metrics(&out, &part, 2);
    let resumed =
        std::fs::read(part.join("checkpoints/iter-000002/policy/model.safetensors")).unwrap();
    let resumed = safetensors::SafeTensors::deserialize(&resumed).unwrap();
    for n in [
        "model.embed_tokens.weight",
        "model.layers.1.self_attn.q_proj.weight",
    ] {
        assert_eq!(bytes(&tuned, n), bytes(&resumed, n), "{n} after resume");
    }
    // The merged checkpoint is a plain model: it loads and evaluates.
    run_ok(
        bin()
            .arg("eval")
            .arg("--model")
            .arg(out.join("checkpoints/iter-000002/policy"))
            .arg("--data")
            .arg(&t.data)
            .args(["--split", "dev", "--limit", "1", "--max-new-tokens", "3"]),
    );
}

#[test]
fn eval_reports_pass_at_k_on_the_held_out_split() {
    let t = tiny();
    let jsonl = t.dir.path().join("eval.jsonl");
    let o = run_ok(
        bin()
            .arg("eval")
            .arg("--model")
            .arg(&t.model)
            .arg("--data")
            .arg(&t.data)
            .args([
                "--dev-size",
                "0",
                "--k",
                "3",
                "--temperature",
                "1",
                "--limit",
                "3",
                "--max-new-tokens",
                "4",
            ])
            .arg("--out")
            .arg(&jsonl),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("| pass@1 | pass@k |"), "{stdout}");
    assert!(
        stdout.contains("| eval |") && stdout.contains("| GSM8K | test | 3 | 3 |"),
        "{stdout}"
    );
    let rows = read_jsonl(&jsonl);
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r["responses"].as_array().unwrap().len(), 3);
        let c = r["correct"].as_u64().unwrap();
        assert!(c <= 3);
    }
    // 20 problems, test fraction 0.2: the split by problem identity holds out 5 of them; the
    // first 2 of those (file order) are the dev split, the other 3 the test split.
    let held_out = |split: &str, dev_size: &str| -> Vec<String> {
        let jsonl = t.dir.path().join(format!("held-{split}-{dev_size}.jsonl"));
        let o = run_ok(
            bin()
                .arg("eval")
                .arg("--model")
                .arg(&t.model)
                .arg("--data")
                .arg(&t.data)
                .args(["--split", split, "--dev-size", dev_size])
                .args(["--max-new-tokens", "2", "--out"])
                .arg(&jsonl),
        );
        let stdout = String::from_utf8_lossy(&o.stdout).to_string();
        let n = read_jsonl(&jsonl).len();
        assert!(
            stdout.contains(&format!("| {split} | {n} | 1 |")),
            "{stdout}"
        );
        read_jsonl(&jsonl)
            .iter()
            .map(|r| r["question"].as_str().unwrap().to_string())
            .collect()
    };
    let all_held = held_out("test", "0");
    assert_eq!(all_held.len(), 5);
    let dev = held_out("dev", "2");
    let test = held_out("test", "2");
    assert_eq!(dev, all_held[..2]);
    assert_eq!(test, all_held[2..]);
}

/// `eval --data FILE --split all` evaluates every question of any GSM8K-format file; the
/// split is by problem identity, so train and test never share a question (duplicates
/// included), and an evaluation of a run leaves out every question that run trained on.
#[test]
fn eval_on_any_file_never_counts_training_questions() {
    let t = tiny();
    let questions = |split: &str, data: &Path, model: &Path| -> Vec<String> {
        let jsonl = t.dir.path().join(format!("q-{split}.jsonl"));
        run_ok(
            bin()
                .arg("eval")
                .arg("--model")
                .arg(model)
                .arg("--data")
                .arg(data)
                .args(["--split", split, "--dev-size", "4", "--max-new-tokens", "1"])
                .arg("--out")
                .arg(&jsonl)
                .arg("--cache-dir")
                .arg(t.dir.path().join("cache")),
        );
        read_jsonl(&jsonl)
            .iter()
            .map(|r| r["question"].as_str().unwrap().to_string())
            .collect()
    };
    // A file with every problem twice (the second copy with other spacing and case).
    let dup = t.dir.path().join("dup.jsonl");
    let mut text = std::fs::read_to_string(&t.data).unwrap();
    for line in std::fs::read_to_string(&t.data).unwrap().lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let q = v["question"]
            .as_str()
            .unwrap()
            .replace(' ', "  ")
            .to_uppercase();
        v["question"] = json!(q);
        text.push_str(&v.to_string());
        text.push('\n');
    }
    std::fs::write(&dup, text).unwrap();
    let all = questions("all", &dup, &t.model);
    let train = questions("train", &dup, &t.model);
    let test = questions("test", &dup, &t.model);
    let dev = questions("dev", &dup, &t.model);
    assert_eq!(all.len(), 40);
    assert_eq!(train.len() + dev.len() + test.len(), 40);
    assert_eq!(
        dev.len() + test.len(),
        10,
        "5 problems held out, each with its duplicate"
    );
    let norm = |q: &str| {
        q.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    // Dev is cut by identity too: 4 distinct problems with their duplicates, the fifth's pair
    // in test.
    assert_eq!((dev.len(), test.len()), (8, 2));
    for q in &test {
        assert!(
            dev.iter().all(|x| norm(x) != norm(q)),
            "{q} is in dev and test"
        );
    }
    let test: Vec<String> = dev.into_iter().chain(test).collect();
    for q in &test {
        assert!(
            train.iter().all(|x| norm(x) != norm(q)),
            "{q} is in both splits"
        );
    }
    // A trained run: evaluating it on the whole file leaves out its 15 training problems (and
    // their duplicates), whatever split is asked for.
    let out = t.dir.path().join("run");
    run_ok(&mut train_cmd(
        &t,
        "ppo",
        &out,
        &[("--iterations", "1"), ("--eval-limit", "0")],
    ));
    let csv = t.dir.path().join("all.csv");
    let o = run_ok(
        bin()
            .arg("eval")
            .arg("--model")
            .arg(&out)
            .arg("--data")
            .arg(&dup)
            .args(["--split", "all", "--max-new-tokens", "1", "--csv"])
            .arg(&csv)
            .arg("--cache-dir")
            .arg(t.dir.path().join("cache")),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("30 of the 40 questions were in the run's training split"),
        "{err}"
    );
    let row = csv_lines(&csv);
    assert!(row[0].ends_with(",excluded_training"), "{}", row[0]);
    assert!(
        row[1].starts_with("eval,policy,GSM8K,all,10,"),
        "{}",
        row[1]
    );
    assert!(row[1].ends_with(",30"), "{}", row[1]);
    let from_run = questions("all", &dup, &out);
    assert_eq!(from_run.len(), 10);
    for q in &from_run {
        assert!(
            test.iter().any(|x| norm(x) == norm(q)),
            "{q} was trained on"
        );
    }
}

/// Group-learner flags of a tiny run: 2 prompts × 2 samples per step, one Adam step.
const GROUP: [(&str, &str); 4] = [
    ("--num-generations", "2"),
    ("--prompts-per-step", "2"),
    ("--mini-batch-size", "2"),
    ("--gradient-accumulation-steps", "2"),
];

fn group_flags(algo: &str, extra: &[(&'static str, &'static str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = GROUP
        .iter()
        .map(|(f, x)| (format!("--{algo}-{}", &f[2..]), x.to_string()))
        .collect();
    v.extend(extra.iter().map(|(f, x)| (f.to_string(), x.to_string())));
    v
}

fn group_cmd(
    t: &Tiny,
    algo: &str,
    learner: &str,
    out: &Path,
    extra: &[(String, String)],
) -> Command {
    let mut e: Vec<(&str, &str)> = extra
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    if algo == "cory" {
        e.push(("--cory-learner", learner));
    }
    train_cmd(t, algo, out, &e)
}

#[test]
fn grpo_and_rloo_train_without_a_critic_and_resume_exactly() {
    let t = tiny();
    for algo in ["grpo", "rloo"] {
        let full = t.dir.path().join(format!("{algo}-full"));
        let mut flags = group_flags(
            algo,
            &[
                ("--iterations", "3"),
                // One group per drawn prompt (GRPO's default oversamples).
                ("--oversample", "1"),
            ],
        );
        if algo == "grpo" {
            // The reference term on (TRL's default β is 0); RLOO has its own.
            flags.push(("--grpo-beta".into(), "0.04".into()));
        }
        let o = run_ok(&mut group_cmd(&t, algo, algo, &full, &flags));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("| after | policy | GSM8K | dev |"),
            "{stdout}"
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("zero-std") && err.contains(" len "), "{err}");
        let cfg = std::fs::read_to_string(full.join("config.toml")).unwrap();
        assert!(cfg.contains(&format!("algo = \"{algo}\"")), "{cfg}");
        assert!(cfg.contains("[grpo]") && cfg.contains("[rloo]"), "{cfg}");
        let rows = read_rows(&full.join("metrics.csv")).unwrap();
        assert_eq!(rows.len(), 3);
        for r in &rows {
            assert_eq!(r.agent, "policy");
            assert!(
                r.frac_reward_zero_std
                    .is_some_and(|z| (0.0..=1.0).contains(&z))
            );
            assert!(r.reward_std.is_some());
            assert!(r.response_len > 0.0 && r.kl.is_finite());
        }
        // Samples: 2 prompts × 2 generations per iteration, each prompt twice in a row.
        let s = read_jsonl(&full.join("samples.jsonl"));
        assert_eq!(s.len(), 3 * 4);
        assert_eq!(s[0]["question"], s[1]["question"]);
        assert_eq!(s[2]["question"], s[3]["question"]);
        let ck = full.join("checkpoints/iter-000003/policy");
        for f in [
            "model.safetensors",
            "optimizer.bpk",
            "trainer_state.toml",
            "tokenizer.json",
        ] {
            assert!(ck.join(f).is_file(), "{f}");
        }
        assert!(!ck.join("value_head.safetensors").exists(), "no critic");
        let part = t.dir.path().join(format!("{algo}-part"));
        let mut flags = group_flags(
            algo,
            &[
                ("--iterations", "2"),
                // One group per drawn prompt (GRPO's default oversamples).
                ("--oversample", "1"),
            ],
        );
        if algo == "grpo" {
            // The reference term on (TRL's default β is 0); RLOO has its own.
            flags.push(("--grpo-beta".into(), "0.04".into()));
        }
        run_ok(&mut group_cmd(&t, algo, algo, &part, &flags));
        run_ok(
            bin()
                .arg("--resume")
                .arg(&part)
                .args(["--iterations", "3", "--cache-dir"])
                .arg(t.dir.path().join("cache")),
        );
        assert_same_metrics(&full, &part, 3);
        let samples = |d: &Path| std::fs::read_to_string(d.join("samples.jsonl")).unwrap();
        assert_eq!(samples(&full), samples(&part));
        // The run evaluates standalone (its agent is `policy`).
        run_ok(
            bin()
                .arg("eval")
                .arg("--model")
                .arg(&full)
                .args(["--split", "dev", "--limit", "1", "--max-new-tokens", "2"])
                .arg("--cache-dir")
                .arg(t.dir.path().join("cache")),
        );
    }
}

#[test]
fn oversampling_trains_on_the_groups_whose_rewards_differ() {
    let t = tiny();
    let out = t.dir.path().join("os");
    let flags = group_flags(
        "grpo",
        &[
            ("--iterations", "2"),
            ("--oversample", "2"),
            ("--eval-limit", "0"),
        ],
    );
    run_ok(&mut group_cmd(&t, "grpo", "grpo", &out, &flags));
    // 2 iterations × (2 × 2 prompts drawn) × 2 samples, of which 2 prompts' groups trained.
    let s = read_jsonl(&out.join("samples.jsonl"));
    assert_eq!(s.len(), 2 * 4 * 2);
    for it in s.chunks(8) {
        let groups: Vec<(bool, bool)> = it
            .chunks(2)
            .map(|g| {
                assert_eq!(g[0]["question"], g[1]["question"]);
                assert_eq!(g[0]["trained"], g[1]["trained"]);
                let trained = g[0]["trained"].as_bool().expect("a `trained` flag");
                (trained, g[0]["reward"] != g[1]["reward"])
            })
            .collect();
        assert_eq!(groups.iter().filter(|(t, _)| *t).count(), 2, "{groups:?}");
        // An untrained group whose rewards differ means every trained group's differ.
        if groups.iter().any(|&(t, d)| !t && d) {
            assert!(groups.iter().all(|&(t, d)| !t || d), "{groups:?}");
        }
    }
    let rows = read_rows(&out.join("metrics.csv")).unwrap();
    for r in &rows {
        // The share of the 4 drawn groups, not of the 2 trained.
        let z = r.frac_reward_zero_std.expect("zero-std share");
        assert!((z * 4.0 - (z * 4.0).round()).abs() < 1e-9, "{z}");
    }
    // Under CORY with GRPO learners every drawn question is answered by both copies (each
    // trains on the groups its own rewards tell apart: unit-tested in lmrl-rl).
    let cory = t.dir.path().join("os-cory");
    let flags = group_flags(
        "grpo",
        &[
            ("--iterations", "1"),
            ("--oversample", "2"),
            ("--eval-limit", "0"),
        ],
    );
    run_ok(&mut group_cmd(&t, "cory", "grpo", &cory, &flags));
    let s = read_jsonl(&cory.join("samples.jsonl"));
    assert_eq!(
        s.len(),
        2 * 4 * 2,
        "4 questions × G 2, pioneer and observer"
    );
    // Oversampling selects groups: a PPO run, or CORY over PPO learners, is refused.
    for algo in ["ppo", "cory"] {
        let (code, err) = run_err(&mut train_cmd(
            &t,
            algo,
            &t.dir.path().join("x"),
            &[("--oversample", "2")],
        ));
        assert_eq!(code, 2);
        assert!(err.contains("oversample"), "{algo}: {err}");
    }
}

#[test]
fn cory_runs_over_grpo_and_resumes_exactly() {
    let t = tiny();
    let flags = group_flags(
        "grpo",
        &[
            ("--iterations", "3"),
            ("--swap-period", "2"),
            ("--eval-limit", "0"),
        ],
    );
    let full = t.dir.path().join("cg-full");
    run_ok(&mut group_cmd(&t, "cory", "grpo", &full, &flags));
    let cfg = std::fs::read_to_string(full.join("config.toml")).unwrap();
    assert!(cfg.contains("cory_learner = \"grpo\""), "{cfg}");
    let m = csv_lines(&full.join("metrics.csv"));
    assert_eq!(m.len(), 1 + 6);
    assert!(m[1].starts_with("0,llm1,pioneer,"), "{}", m[1]);
    assert!(m[2].starts_with("0,llm2,observer,"), "{}", m[2]);
    assert!(m[5].starts_with("2,llm1,observer,"), "{}", m[5]);
    // Each iteration: 2 prompts × G = 2 pioneer samples and 4 observer answers, one per
    // pioneer sample.
    let s = read_jsonl(&full.join("samples.jsonl"));
    assert_eq!(s.len(), 3 * 8);
    let obs: Vec<&Value> = s
        .iter()
        .filter(|x| x["iteration"] == 0 && x["role"] == "observer")
        .collect();
    let pio: Vec<&Value> = s
        .iter()
        .filter(|x| x["iteration"] == 0 && x["role"] == "pioneer")
        .collect();
    assert_eq!((obs.len(), pio.len()), (4, 4));
    for (o, p) in obs.iter().zip(&pio) {
        assert_eq!(o["question"], p["question"]);
    }
    let ck = full.join("checkpoints/iter-000003");
    assert!(ck.join("cory_state.toml").is_file());
    assert!(!ck.join("llm1/value_head.safetensors").exists());
    let part = t.dir.path().join("cg-part");
    let flags = group_flags(
        "grpo",
        &[
            ("--iterations", "2"),
            ("--swap-period", "2"),
            ("--eval-limit", "0"),
        ],
    );
    run_ok(&mut group_cmd(&t, "cory", "grpo", &part, &flags));
    run_ok(
        bin()
            .arg("--resume")
            .arg(&part)
            .args(["--iterations", "3", "--cache-dir"])
            .arg(t.dir.path().join("cache")),
    );
    assert_same_metrics(&full, &part, 6);
    // A CORY learner setting on a run that is not CORY is refused.
    let (code, err) = run_err(
        train_cmd(&t, "ppo", &t.dir.path().join("x"), &[]).args(["--cory-learner", "grpo"]),
    );
    assert_eq!(code, 2);
    assert!(err.contains("cory_learner"), "{err}");
}

#[test]
fn bad_flags_and_settings_fail_with_a_message() {
    let t = tiny();
    let (code, err) = run_err(bin().args(["--algo", "sac"]));
    assert_eq!(code, 2);
    assert!(err.contains("sac"), "{err}");
    let out = t.dir.path().join("bad");
    let (code, err) = run_err(&mut train_cmd(&t, "ppo", &out, &[("--batch-size", "0")]));
    assert_eq!(code, 2);
    assert!(err.contains("batch_size"), "{err}");
    let (_, err) = run_err(&mut train_cmd(
        &t,
        "ppo",
        &out,
        &[("--mini-batch-size", "3")],
    ));
    assert!(err.contains("mini_batch_size"), "{err}");
    // PPO's learning rate on a GRPO run would change nothing: refused, naming GRPO's flag.
    let (code, err) = run_err(&mut train_cmd(
        &t,
        "grpo",
        &out,
        &[("--learning-rate", "1e-5")],
    ));
    assert_eq!(code, 2);
    assert!(
        err.contains("ppo.learning_rate") && err.contains("--grpo-learning-rate"),
        "{err}"
    );
    assert!(
        !out.join("config.toml").exists(),
        "refused before the run starts"
    );
    let (code, err) = run_err(bin().arg("eval").arg("--model").arg(&t.model).args([
        "--k",
        "4",
        "--temperature",
        "0",
    ]));
    assert_ne!(code, 0);
    assert!(err.contains("greedy"), "{err}");
    let (code, err) = run_err(bin().args(["check", "--out", "x.jsonl"]));
    assert_eq!(code, 2);
    assert!(err.contains("--input"), "{err}");
    // --resume refuses settings that would change the run.
    let (code, err) = run_err(bin().args(["--resume", "somewhere", "--lr", "0.1"]));
    assert_eq!(code, 2);
    assert!(err.contains("--learning-rate"), "{err}");
    // A missing model path is named.
    let (_, err) = run_err(
        bin()
            .args(["eval", "--model", "/nonexistent/model", "--data"])
            .arg(&t.data)
            .arg("--cache-dir")
            .arg(t.dir.path().join("cache")),
    );
    assert!(err.contains("/nonexistent/model"), "{err}");
}

/// `compare` pairs two per-question files by question: hand-computed McNemar on 2 vs 6
/// discordant questions is 2·(1 + 8 + 28)/256; files with other questions are refused.
#[test]
fn compare_pairs_per_question_files() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, solved: &dyn Fn(usize) -> bool, n: usize| {
        let p = dir.path().join(name);
        let text: String = (0..n)
            .map(|i| {
                json!({"question": format!("Question {i}?"), "truth": "1", "responses": ["x"],
                       "extracted": [null], "correct": usize::from(solved(i))})
                .to_string()
                    + "\n"
            })
            .collect();
        std::fs::write(&p, text).unwrap();
        p
    };
    let a = write("a.jsonl", &|i| i < 4, 10);
    let b = write("b.jsonl", &|i| i >= 2, 10);
    let json = dir.path().join("cmp.json");
    let o = run_ok(
        bin()
            .args(["compare", "--a"])
            .arg(&a)
            .arg("--b")
            .arg(&b)
            .arg("--json")
            .arg(&json),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("| 0.400 | 0.800 | +0.400 |") && stdout.contains("| 2 / 6 | 0.2891 |"),
        "{stdout}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!((v["seeds"][0]["mcnemar_p"].as_f64().unwrap() - 74.0 / 256.0).abs() < 1e-12);
    let short = write("short.jsonl", &|_| true, 9);
    let (code, err) = run_err(
        bin()
            .args(["compare", "--a"])
            .arg(&a)
            .arg("--b")
            .arg(&short),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("short.jsonl") && err.contains("same 9 questions"),
        "{err}"
    );
}

/// A file with `template` fields (what `scripts/gsm_symbolic.py` writes) is read and reported as
/// GSM-Symbolic without `--data-format`.
#[test]
fn gsm_symbolic_files_are_recognised() {
    let t = tiny();
    let file = t.dir.path().join("gsms.jsonl");
    let text: String = std::fs::read_to_string(&t.data)
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["template"] = json!(i % 3);
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(&file, text).unwrap();
    let o = run_ok(
        bin()
            .args(["eval", "--model"])
            .arg(&t.model)
            .arg("--data")
            .arg(&file)
            .args(["--split", "all", "--limit", "2", "--max-new-tokens", "1"]),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("| GSM-Symbolic | all | 2 |"), "{stdout}");
}
