//! What the tests of the built `gsm8k-app` share: the binary, a tiny Llama model with a
//! word-level tokenizer, tiny problems, a short `train` command line and comparisons of runs.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lmrl_runs::read_rows;
use serde_json::{Value, json};
use tempfile::TempDir;

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gsm8k-app"))
}

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("gsm8k-app runs");
    assert!(
        out.status.success(),
        "gsm8k-app failed ({:?}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn run_err(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().expect("gsm8k-app runs");
    assert!(!out.status.success(), "expected a failure");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Words of the 1-shot template, the fixture problems and numbers: the word-level vocabulary
/// of the test tokenizer (the fixture model has 1000 embedding rows and no tokenizer).
pub fn vocabulary() -> Vec<String> {
    let mut v: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let text = "Question: Shawn has five toys. For Christmas, he got two toys each from his mom \
                and dad. How many toys does he have now? Answer: Shawn started with 5 toys. If \
                he got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9. \
                Reference: Tom Ann buys apples pears gives away left total";
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            cur.push(c);
        } else {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            if !c.is_whitespace() {
                words.push(c.to_string());
            }
        }
    }
    for n in 0..200 {
        words.push(n.to_string());
    }
    for w in words {
        if !v.contains(&w) {
            v.push(w);
        }
    }
    let mut i = 0;
    while v.len() < 1000 {
        v.push(format!("w{i}"));
        i += 1;
    }
    v
}

/// llama-tiny with a word-level `tokenizer.json` (1000 entries) in a temporary directory.
pub fn tiny_model(dir: &Path) -> PathBuf {
    let m = dir.join("llama-tiny");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("llama-tiny").join(f), m.join(f)).unwrap();
    }
    let vocab = vocabulary();
    let map: serde_json::Map<String, Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, w)| (w.clone(), json!(i)))
        .collect();
    let special = |id: usize, s: &str| {
        json!({"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
               "normalized": false, "special": true})
    };
    let tok = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": map, "unk_token": "<unk>"}
    });
    std::fs::write(m.join("tokenizer.json"), tok.to_string()).unwrap();
    m
}

/// 20 GSM8K-format problems: "Tom has a apples and buys b more apples. ..." → a + b.
pub fn tiny_data(dir: &Path) -> PathBuf {
    let p = dir.join("problems.jsonl");
    let mut s = String::new();
    for i in 0..20 {
        let (a, b) = (i + 1, (i * 7) % 9 + 1);
        let q = format!(
            "Tom has {a} apples and buys {b} more apples. How many apples does Tom have now?"
        );
        let ans = format!("Tom has {a} + {b} = {} apples.\n#### {}", a + b, a + b);
        s.push_str(&json!({"question": q, "answer": ans}).to_string());
        s.push('\n');
    }
    std::fs::write(&p, s).unwrap();
    p
}

pub struct Tiny {
    pub dir: TempDir,
    pub model: PathBuf,
    pub data: PathBuf,
}

pub fn tiny() -> Tiny {
    let dir = TempDir::new().unwrap();
    let model = tiny_model(dir.path());
    let data = tiny_data(dir.path());
    Tiny { dir, model, data }
}

/// `train` on the tiny fixture, with `extra` flag/value pairs replacing the defaults below
/// (`--model` and `--data` included).
pub fn train_cmd(t: &Tiny, algo: &str, out: &Path, extra: &[(&str, &str)]) -> Command {
    let model = t.model.to_string_lossy().into_owned();
    let data = t.data.to_string_lossy().into_owned();
    let mut flags: Vec<(&str, &str)> = vec![
        ("--model", &model),
        ("--data", &data),
        ("--iterations", "2"),
        ("--max-new-tokens", "4"),
        ("--eval-limit", "2"),
        ("--swap-period", "1"),
        ("--checkpoint-every", "1"),
    ];
    // PPO's flags only where the copies learn with PPO: another learner's flag is refused.
    let learner = match algo {
        "cory" => extra
            .iter()
            .find(|(f, _)| *f == "--cory-learner")
            .map_or("ppo", |(_, v)| *v),
        single => single,
    };
    if learner == "ppo" {
        flags.extend([
            ("--batch-size", "2"),
            ("--mini-batch-size", "1"),
            ("--gradient-accumulation-steps", "2"),
            ("--ppo-epochs", "1"),
        ]);
    }
    for (f, v) in extra {
        match flags.iter_mut().find(|(g, _)| g == f) {
            Some(slot) => slot.1 = v,
            None => flags.push((f, v)),
        }
    }
    let mut c = bin();
    c.arg("train")
        .args(["--algo", algo])
        .arg("--out")
        .arg(out)
        .arg("--cache-dir")
        .arg(t.dir.path().join("cache"));
    for (f, v) in flags {
        c.args([f, v]);
    }
    c
}

pub fn csv_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// Asserts that two runs logged the same metrics: every row, every column but the wall-clock
/// `seconds` (exact resume restores weights, value heads, Adam moments, β, running score
/// moments, minibatch RNG, roles and the data order, so nothing may differ).
pub fn assert_same_metrics(a: &Path, b: &Path, rows: usize) {
    let a = read_rows(&a.join("metrics.csv")).unwrap();
    let b = read_rows(&b.join("metrics.csv")).unwrap();
    assert_eq!(a.len(), rows);
    assert_eq!(b.len(), rows);
    for (x, y) in a.iter().zip(&b) {
        let mut y = y.clone();
        y.seconds = x.seconds;
        assert_eq!(*x, y, "iteration {}, {}", x.iteration, x.agent);
    }
}

/// A run's `eval.csv` without its `seconds` column: what two runs that computed the same
/// share.
pub fn eval_without_seconds(run: &Path) -> Vec<String> {
    let p = run.join("eval.csv");
    if !p.exists() {
        return Vec::new();
    }
    let lines = csv_lines(&p);
    let col = lines[0]
        .split(',')
        .position(|c| c == "seconds")
        .expect("eval.csv has a seconds column");
    lines
        .iter()
        .map(|l| {
            let mut cells: Vec<&str> = l.split(',').collect();
            cells.remove(col);
            cells.join(",")
        })
        .collect()
}

/// Asserts that run `b` (interrupted and resumed, or started again) ended exactly as run `a`
/// that was never interrupted: the same metrics (`rows` rows, all but the wall-clock column),
/// the same samples, the same evaluations and the same final weights.
pub fn assert_same_run(a: &Path, b: &Path, rows: usize, iterations: usize, agents: &[&str]) {
    assert_same_metrics(a, b, rows);
    let samples = |d: &Path| std::fs::read_to_string(d.join("samples.jsonl")).unwrap();
    assert_eq!(samples(a), samples(b), "samples.jsonl differ");
    assert_eq!(
        eval_without_seconds(a),
        eval_without_seconds(b),
        "eval.csv differ"
    );
    let last = format!("checkpoints/iter-{iterations:06}");
    for agent in agents {
        for f in ["model.safetensors", "value_head.safetensors"] {
            let read = |d: &Path| std::fs::read(d.join(&last).join(agent).join(f)).unwrap();
            assert!(read(a) == read(b), "{last}/{agent}/{f} differ");
        }
    }
    assert!(b.join("summary.json").is_file());
}

/// Every hidden entry of `run` and `run/checkpoints` but the lock: what a killed process may
/// leave and the next start must remove.
pub fn leftovers(run: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for d in [run.to_path_buf(), run.join("checkpoints")] {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name != ".lock" {
                v.push(d.join(name).display().to_string());
            }
        }
    }
    v.sort();
    v
}

/// The checkpoint directories of `run` (`iter-NNNNNN`), sorted.
pub fn checkpoints(run: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("iter-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A running `gsm8k-app` whose stderr is collected as it comes.
pub struct Watched {
    pub child: std::process::Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Starts `cmd` with its stderr watched (stdout discarded).
pub fn spawn(cmd: &mut Command) -> Watched {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gsm8k-app starts");
    let mut stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = log.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Watched {
        child,
        log,
        reader: Some(reader),
    }
}

impl Watched {
    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until its stderr holds `needle` (true), it exits or `timeout` passes (false).
    pub fn wait_for(&mut self, needle: &str, timeout: std::time::Duration) -> bool {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < timeout {
            if self.stderr().contains(needle) {
                return true;
            }
            if self.child.try_wait().unwrap().is_some() {
                return self.stderr().contains(needle);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        false
    }

    /// Sends signal `name` (`TERM`, `HUP`, `INT`) with the shell's `kill` (a builtin: no
    /// procps needed, no libc binding).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("sh")
            .args(["-c", &format!("kill -s {name} {}", self.child.id())])
            .status()
            .expect("sh runs")
            .success();
        assert!(ok, "kill -s {name} failed");
    }

    /// Waits for it to exit: its status and all of its stderr.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        let log = self.stderr();
        eprintln!("--- gsm8k-app stderr ---\n{log}");
        (status, log)
    }
}
