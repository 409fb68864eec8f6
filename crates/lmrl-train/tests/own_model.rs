//! A model, reward and task of one's own (the `own_model_app` example) through the loop: the run
//! files are written, the model learns the task, and a run stopped halfway and resumed ends with
//! the rows of an uninterrupted one.
use std::path::Path;
use std::process::ExitCode;

#[path = "../examples/own_model_app.rs"]
mod own_model_app;

/// The model's initial weights come from the device's generator, which the loop seeds from the
/// run's seed and which is one per process: runs in concurrent tests would interleave draws.
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(args: &[&str]) -> ExitCode {
    let _one = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut all = vec!["own_model_app"];
    all.extend_from_slice(args);
    own_model_app::run(all, &lmrl_train::StopToken::new()).expect("the app runs")
}

fn succeeded(code: ExitCode) -> bool {
    format!("{code:?}") == format!("{:?}", ExitCode::SUCCESS)
}

/// metrics.csv without its wall-clock column, which no two runs share.
fn rows(dir: &Path) -> Vec<Vec<String>> {
    let mut r = csv::Reader::from_path(dir.join("metrics.csv")).expect("metrics.csv");
    let headers = r.headers().expect("a header").clone();
    let keep: Vec<usize> = (0..headers.len())
        .filter(|&i| &headers[i] != "seconds")
        .collect();
    r.records()
        .map(|rec| {
            let rec = rec.expect("a row");
            keep.iter().map(|&i| rec[i].to_string()).collect()
        })
        .collect()
}

fn column(rows: &[Vec<String>], headers: &[&str], name: &str) -> Vec<f64> {
    let i = headers.iter().position(|h| *h == name).expect("the column");
    rows.iter()
        .map(|r| r[i].parse().expect("a number"))
        .collect()
}

#[test]
fn own_model_trains_through_the_loop_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = tmp.path().join("whole");
    let half = tmp.path().join("half");
    let w = whole.to_str().unwrap();
    let h = half.to_str().unwrap();
    let flags = ["--algo", "ppo", "--iterations"];
    assert!(succeeded(run(&[&flags[..], &["40", "--out", w]].concat())));
    for f in [
        "config.toml",
        "metrics.csv",
        "samples.jsonl",
        "summary.json",
    ] {
        assert!(whole.join(f).is_file(), "{f} missing");
    }
    let last = whole.join("checkpoints/iter-000040/policy");
    assert!(last.join("model.bpk").is_file(), "{}", last.display());

    assert!(succeeded(run(&[&flags[..], &["20", "--out", h]].concat())));
    assert!(succeeded(run(&["--resume", h, "--iterations", "40"])));
    let (a, b) = (rows(&whole), rows(&half));
    assert_eq!(a.len(), 40);
    assert_eq!(a, b, "a resumed run must continue with the same numbers");

    // The reward is the mean tone in the asked direction, 0 in expectation for a random model.
    let mut r = csv::Reader::from_path(whole.join("metrics.csv")).unwrap();
    let headers: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let headers: Vec<&str> = headers
        .iter()
        .map(String::as_str)
        .filter(|h| *h != "seconds")
        .collect();
    let reward = column(&a, &headers, "task_reward");
    let first: f64 = reward[..4].iter().sum::<f64>() / 4.0;
    let last: f64 = reward[36..].iter().sum::<f64>() / 4.0;
    assert!(last > first + 0.3, "reward {first:.3} -> {last:.3}");
}

#[test]
fn cory_on_the_own_model_writes_both_copies() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cory");
    let o = out.to_str().unwrap();
    assert!(succeeded(run(&[
        "--algo",
        "cory",
        "--iterations",
        "2",
        "--out",
        o
    ])));
    let ckpt = out.join("checkpoints/iter-000002");
    for copy in ["llm1", "llm2"] {
        assert!(ckpt.join(copy).join("model.bpk").is_file(), "{copy}");
        assert!(ckpt.join(copy).join("tokenizer.json").is_file(), "{copy}");
    }
}

#[test]
fn a_model_the_app_cannot_build_is_refused_before_a_run_directory_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("none");
    let e = own_model_app::run(
        [
            "own_model_app",
            "--model",
            "gpt2",
            "--out",
            out.to_str().unwrap(),
        ],
        &lmrl_train::StopToken::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("run.model"), "{e}");
    assert!(!out.exists());
}

#[test]
fn a_run_names_the_code_that_made_it_and_its_config_reruns_it() {
    use lmrl_train::{Provenance, read_provenance, this_commit};
    let tmp = tempfile::tempdir().unwrap();
    let (first, again) = (tmp.path().join("first"), tmp.path().join("again"));
    let config = first.join("config.toml");
    let iters = ["--iterations", "3", "--out"];
    assert!(succeeded(run(&[
        &["--algo", "ppo", "--seed", "7"][..],
        &iters,
        &[first.to_str().unwrap()]
    ]
    .concat())));
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.starts_with(&format!(
            "lmrl_version = \"{}\"\ncommit = \"{}\"\n",
            env!("CARGO_PKG_VERSION"),
            this_commit()
        )),
        "{text}"
    );
    assert_eq!(
        read_provenance(&config).unwrap(),
        Some(Provenance::this_build())
    );

    // The committed file alone reruns the run: the keys are not taken for settings.
    let c = config.to_str().unwrap();
    assert!(succeeded(run(&[
        &["--config", c][..],
        &iters,
        &[again.to_str().unwrap()]
    ]
    .concat())));
    assert_eq!(rows(&first), rows(&again));

    // Other code continuing a run is recorded, once, after the code that started it.
    let elsewhere = text.replace(this_commit(), "0000000elsewhere");
    std::fs::write(&config, elsewhere).unwrap();
    for n in ["4", "5"] {
        assert!(succeeded(run(&[
            "--resume",
            first.to_str().unwrap(),
            "--iterations",
            n
        ])));
    }
    let p = read_provenance(&config).unwrap().unwrap();
    assert_eq!(p.commit, "0000000elsewhere");
    assert_eq!(p.resumed_by, [this_commit()]);
}
