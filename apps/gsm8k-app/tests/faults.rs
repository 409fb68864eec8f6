//! Fault injection against the built `gsm8k-app` on the tiny Llama fixture: runs killed with
//! SIGKILL at random moments (checkpoint saves included) and resumed, a second run into a busy
//! run directory, SIGTERM / SIGHUP / a second signal, runs that stopped before their first
//! checkpoint, an unusable newest checkpoint, and inputs so wrong that no run may start.
//! Every interrupted run must end exactly as the same run never interrupted: metrics, samples,
//! evaluations and final weights, with no temporaries left behind.
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const MINUTE: Duration = Duration::from_secs(60);

/// A small deterministic generator of kill times (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The progress line the loop prints when iteration `k` (from 1) of `total` is done, just
/// before its checkpoint (if one is due) is written.
fn done_line(k: usize, total: usize) -> String {
    format!("it {k:>3}/{total} |")
}

fn resume_cmd(t: &Tiny, out: &Path, iterations: usize) -> std::process::Command {
    let mut c = bin();
    c.arg("--resume")
        .arg(out)
        .args(["--iterations", &iterations.to_string(), "--cache-dir"])
        .arg(t.dir.path().join("cache"));
    c
}

/// What continues the run in `out` after a kill: `--resume` when the run got as far as
/// writing its settings, otherwise the same command line again (nothing of the run is on
/// disk).
fn continue_cmd(
    t: &Tiny,
    algo: &str,
    out: &Path,
    flags: &[(&str, &str)],
    iterations: usize,
) -> std::process::Command {
    if out.join("config.toml").is_file() {
        resume_cmd(t, out, iterations)
    } else {
        train_cmd(t, algo, out, flags)
    }
}

fn continue_run(t: &Tiny, algo: &str, out: &Path, flags: &[(&str, &str)], iterations: usize) {
    run_ok(&mut continue_cmd(t, algo, out, flags, iterations));
}

/// Kills `child` with SIGKILL after `d`, or lets it be when it ends before.
fn kill_after(child: &mut Watched, d: Duration) {
    let deadline = Instant::now() + d;
    while Instant::now() < deadline && child.child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(2));
    }
    child.child.kill().unwrap();
}

/// Runs killed with SIGKILL at random moments, then continued: the result is the
/// uninterrupted run's, and nothing a killed save left (`.tmp-…`, `.old-…`, `.del-…`,
/// atomic-write temporaries) survives. Odd seeds kill up to 40 ms after an iteration's
/// progress line, that is while its checkpoint is being written; even seeds anywhere in the
/// run, from loading the model to the final evaluation. Seeds divisible by 3 kill the
/// continuation too, at a random moment, before continuing once more.
fn kill_and_resume(algo: &str, agents: &[&str], seeds: &[u64]) {
    let t = tiny();
    const TOTAL: usize = 4;
    let flags = [
        ("--iterations", "4"),
        ("--checkpoint-every", "1"),
        ("--keep-checkpoints", "2"),
    ];
    let rows = TOTAL * agents.len();
    let full = t.dir.path().join("full");
    let t0 = Instant::now();
    run_ok(&mut train_cmd(&t, algo, &full, &flags));
    let whole = t0.elapsed();
    let (mut mid_save, mut finished) = (0, 0);
    for &seed in seeds {
        let mut rng = Rng::new(seed);
        let out = t.dir.path().join(format!("killed-{seed}"));
        let mut child = spawn(&mut train_cmd(&t, algo, &out, &flags));
        let at = if seed % 2 == 1 {
            let k = 1 + (rng.unit() * TOTAL as f64) as usize;
            assert!(child.wait_for(&done_line(k, TOTAL), MINUTE));
            let d = Duration::from_secs_f64(rng.unit() * 0.04);
            kill_after(&mut child, d);
            format!("{d:.3?} after iteration {k}")
        } else {
            let d = whole.mul_f64(rng.unit());
            kill_after(&mut child, d);
            format!("{d:.3?} after the start")
        };
        let (status, _) = child.finish();
        let found = leftovers(&out);
        eprintln!(
            "seed {seed}: killed {at} ({status}); checkpoints {:?}; temporaries {found:?}",
            checkpoints(&out)
        );
        mid_save += usize::from(found.iter().any(|f| f.contains("/checkpoints/.tmp-")));
        finished += usize::from(status.success());
        if seed % 3 == 0 {
            let mut again = spawn(&mut continue_cmd(&t, algo, &out, &flags, TOTAL));
            // A continuation has less to do than the whole run.
            let d = whole.mul_f64(0.5 * rng.unit());
            kill_after(&mut again, d);
            let (status, _) = again.finish();
            eprintln!(
                "seed {seed}: continuation killed {d:.3?} after its start ({status}); \
                 checkpoints {:?}; temporaries {:?}",
                checkpoints(&out),
                leftovers(&out)
            );
        }
        continue_run(&t, algo, &out, &flags, TOTAL);
        assert_eq!(leftovers(&out), Vec::<String>::new(), "seed {seed}");
        assert_eq!(
            checkpoints(&out),
            ["iter-000003", "iter-000004"],
            "seed {seed}: --keep-checkpoints 2"
        );
        assert_same_run(&full, &out, rows, TOTAL, agents);
    }
    eprintln!(
        "{algo}: {} kills; {mid_save} in the middle of a checkpoint save, {finished} after the \
         run had finished",
        seeds.len()
    );
}

#[test]
fn ppo_killed_at_random_moments_resumes_exactly() {
    kill_and_resume("ppo", &["policy"], &(1..=12).collect::<Vec<_>>());
}

#[test]
fn cory_killed_at_random_moments_resumes_exactly() {
    kill_and_resume("cory", &["llm1", "llm2"], &(13..=16).collect::<Vec<_>>());
}

/// A second run into a directory that a running run holds is refused before it loads
/// anything, naming the directory and the holder, and changes nothing; the first run is not
/// disturbed. Once the holder is gone (here: killed), its lock is free again.
#[test]
fn a_second_run_into_a_busy_directory_is_refused() {
    let t = tiny();
    let flags = [("--iterations", "8"), ("--checkpoint-every", "4")];
    let out = t.dir.path().join("busy");
    let mut first = spawn(&mut train_cmd(&t, "ppo", &out, &flags));
    assert!(first.wait_for(&done_line(1, 8), MINUTE));
    let config = std::fs::read(out.join("config.toml")).unwrap();
    let pid = first.child.id().to_string();
    for mut second in [train_cmd(&t, "ppo", &out, &flags), resume_cmd(&t, &out, 8)] {
        let (code, err) = run_err(&mut second);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(&format!("{} is in use by another run", out.display())),
            "{err}"
        );
        assert!(err.contains(&format!("process {pid}")), "{err}");
        assert!(
            first.child.try_wait().unwrap().is_none(),
            "the first run ended before the second was refused; make it longer"
        );
    }
    assert_eq!(std::fs::read(out.join("config.toml")).unwrap(), config);
    let (status, _) = first.finish();
    assert!(status.success());
    assert_eq!(read_rows_len(&out), 8);
    assert!(out.join("summary.json").is_file());

    // A dead holder's lock does not block: kill a run, then continue it.
    let out = t.dir.path().join("dead-holder");
    let mut holder = spawn(&mut train_cmd(&t, "ppo", &out, &flags));
    assert!(holder.wait_for(&done_line(1, 8), MINUTE));
    holder.child.kill().unwrap();
    holder.finish();
    run_ok(&mut resume_cmd(&t, &out, 8));
    assert_same_run(&t.dir.path().join("busy"), &out, 8, 8, &["policy"]);
}

fn read_rows_len(run: &Path) -> usize {
    lmrl_runs::read_rows(&run.join("metrics.csv"))
        .unwrap()
        .len()
}

/// The iteration a stopped run reports in "stopped after iteration N;".
fn stopped_after(stderr: &str) -> usize {
    let tail = stderr
        .split("stopped after iteration ")
        .nth(1)
        .unwrap_or_else(|| panic!("no stop message in:\n{stderr}"));
    tail.split(';').next().unwrap().trim().parse().unwrap()
}

/// SIGTERM (what Slurm, Kubernetes, systemd, `docker stop` and `timeout` send) and SIGHUP
/// stop the run after the current iteration with a checkpoint and exit status 130; `--resume`
/// then continues exactly. A second signal exits at once, and the run still resumes exactly
/// from its last complete checkpoint.
#[test]
fn sigterm_and_sighup_stop_with_a_checkpoint_and_resume_exactly() {
    let t = tiny();
    const TOTAL: usize = 4;
    // The only scheduled checkpoint is the last: any earlier one is the signal's.
    let flags = [("--iterations", "4"), ("--checkpoint-every", "4")];
    let full = t.dir.path().join("full");
    run_ok(&mut train_cmd(&t, "ppo", &full, &flags));
    for sig in ["TERM", "HUP"] {
        let out = t.dir.path().join(format!("sig{sig}"));
        let mut child = spawn(&mut train_cmd(&t, "ppo", &out, &flags));
        assert!(child.wait_for(&done_line(1, TOTAL), MINUTE));
        child.signal(sig);
        let (status, err) = child.finish();
        assert_eq!(status.code(), Some(130), "SIG{sig}: {err}");
        assert!(
            err.contains("stop signal: finishing this iteration"),
            "{err}"
        );
        let k = stopped_after(&err);
        assert!((1..TOTAL).contains(&k), "SIG{sig}: stopped after {k}");
        assert!(
            err.contains(&format!("--resume {}", out.display())),
            "{err}"
        );
        assert_eq!(checkpoints(&out), [format!("iter-{k:06}")], "SIG{sig}");
        assert_eq!(read_rows_len(&out), k);
        assert!(!out.join("summary.json").exists());
        run_ok(&mut resume_cmd(&t, &out, TOTAL));
        assert_same_run(&full, &out, TOTAL, TOTAL, &["policy"]);
        assert_eq!(leftovers(&out), Vec::<String>::new());
    }
    // A signal before the first iteration (while the base model is evaluated): the run
    // stops without training, or — when the signal comes a moment too late for that — after
    // the first iteration; either way it continues exactly.
    let out = t.dir.path().join("early");
    let mut child = spawn(&mut train_cmd(&t, "ppo", &out, &flags));
    assert!(child.wait_for("training questions", MINUTE));
    child.signal("TERM");
    let (status, err) = child.finish();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("stopped before iteration 1; nothing was trained")
            || err.contains("stopped after iteration"),
        "{err}"
    );
    assert!(
        err.contains(&format!("--resume {}", out.display())),
        "{err}"
    );
    run_ok(&mut resume_cmd(&t, &out, TOTAL));
    assert_same_run(&full, &out, TOTAL, TOTAL, &["policy"]);

    // Two SIGTERMs in a row: the second ends the run at once, wherever it is.
    let out = t.dir.path().join("twice");
    let mut child = spawn(&mut train_cmd(&t, "ppo", &out, &flags));
    assert!(child.wait_for(&done_line(1, TOTAL), MINUTE));
    child.signal("TERM");
    assert!(child.wait_for("stop signal", MINUTE));
    child.signal("TERM");
    let (status, err) = child.finish();
    assert_eq!(status.code(), Some(130), "{err}");
    if !err.contains("stopped after iteration") {
        assert!(err.contains("second stop signal: exiting now"), "{err}");
    }
    continue_run(&t, "ppo", &out, &flags, TOTAL);
    assert_same_run(&full, &out, TOTAL, TOTAL, &["policy"]);
    assert_eq!(leftovers(&out), Vec::<String>::new());
}

/// A stop signal that arrives while a checkpoint is being written stops the run right after
/// that save: the checkpoint holds every iteration done, none is started and lost (the stop
/// flag used to be read only before the save, so the run went on for one more iteration).
#[test]
fn a_signal_during_a_save_stops_right_after_it() {
    let t = tiny();
    const TOTAL: usize = 4;
    let flags = [("--iterations", "4"), ("--checkpoint-every", "1")];
    let full = t.dir.path().join("full");
    run_ok(&mut train_cmd(&t, "ppo", &full, &flags));
    let mut caught = 0;
    for attempt in 0..4 {
        let out = t.dir.path().join(format!("save{attempt}"));
        let mut child = spawn(&mut train_cmd(&t, "ppo", &out, &flags));
        assert!(child.wait_for(&done_line(2, TOTAL), MINUTE));
        // The save of iteration 2 is under way while its temporary directory exists.
        let t0 = Instant::now();
        let in_save = loop {
            let names: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            if names.iter().any(|n| n.starts_with(".tmp-iter-000002")) {
                break true;
            }
            if names.iter().any(|n| n == "iter-000002") || t0.elapsed() > MINUTE {
                break false; // the save finished between two looks
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        if in_save {
            child.signal("TERM");
        }
        let (status, err) = child.finish();
        if !in_save {
            continue;
        }
        caught += 1;
        assert_eq!(status.code(), Some(130), "{err}");
        assert_eq!(stopped_after(&err), 2, "{err}");
        assert_eq!(
            checkpoints(&out).last().map(String::as_str),
            Some("iter-000002")
        );
        assert_eq!(read_rows_len(&out), 2);
        run_ok(&mut resume_cmd(&t, &out, TOTAL));
        assert_same_run(&full, &out, TOTAL, TOTAL, &["policy"]);
        assert_eq!(leftovers(&out), Vec::<String>::new());
        break;
    }
    assert_eq!(caught, 1, "no try caught a save in progress");
}

/// A torn last line of `metrics.csv` (a kill in the middle of an append) is repaired by any
/// resume, also one with nothing left to train (`--iterations` equal to or below the run's):
/// it used to fail there, and only a resume with more iterations repaired it.
#[test]
fn a_torn_metrics_line_of_a_finished_run_is_repaired_whatever_the_iterations() {
    let t = tiny();
    let flags = [("--iterations", "2"), ("--checkpoint-every", "1")];
    let out = t.dir.path().join("done");
    run_ok(&mut train_cmd(&t, "ppo", &out, &flags));
    let metrics = out.join("metrics.csv");
    let whole = std::fs::read_to_string(&metrics).unwrap();
    assert!(whole.ends_with('\n'));
    for iterations in [2, 1] {
        let mut torn = whole.clone();
        torn.push_str("1,policy,pioneer,0.12"); // cut short: no line break
        std::fs::write(&metrics, &torn).unwrap();
        let o = run_ok(&mut resume_cmd(&t, &out, iterations));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("nothing to do"), "{err}");
        assert_eq!(std::fs::read_to_string(&metrics).unwrap(), whole);
    }
}

/// A run killed before its first checkpoint is not stranded: the same `--out` starts it
/// again in place, and so does `--resume`, each saying so, and both end as the run never
/// interrupted (the evaluation before training included: no duplicate rows). `--resume` of a
/// directory that holds no run says what to do instead.
#[test]
fn a_run_stopped_before_its_first_checkpoint_starts_again_in_place() {
    let t = tiny();
    const TOTAL: usize = 3;
    let flags = [("--iterations", "3"), ("--checkpoint-every", "3")];
    let full = t.dir.path().join("full");
    run_ok(&mut train_cmd(&t, "ppo", &full, &flags));
    let kill_early = |out: &Path| {
        let mut child = spawn(&mut train_cmd(&t, "ppo", out, &flags));
        assert!(child.wait_for(&done_line(1, TOTAL), MINUTE));
        child.child.kill().unwrap();
        child.finish();
        assert!(checkpoints(out).is_empty());
        assert!(out.join("config.toml").is_file() && out.join("metrics.csv").is_file());
    };

    let out = t.dir.path().join("again-out");
    kill_early(&out);
    let o = run_ok(&mut train_cmd(&t, "ppo", &out, &flags));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("holds a run that stopped before its first checkpoint: starting it again"),
        "{err}"
    );
    assert_same_run(&full, &out, TOTAL, TOTAL, &["policy"]);

    let out = t.dir.path().join("again-resume");
    kill_early(&out);
    let o = run_ok(&mut resume_cmd(&t, &out, TOTAL));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("has no checkpoint (the run stopped before its first one): starting it again"),
        "{err}"
    );
    assert_same_run(&full, &out, TOTAL, TOTAL, &["policy"]);

    // Killed before it wrote its settings (here: an empty directory), or never there.
    let empty = t.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, err) = run_err(&mut resume_cmd(&t, &empty, TOTAL));
    assert_eq!(code, 2);
    assert!(
        err.contains("holds no run to resume")
            && err.contains(&format!("--out {}", empty.display())),
        "{err}"
    );
    let (code, err) = run_err(&mut resume_cmd(&t, &t.dir.path().join("nowhere"), TOTAL));
    assert_eq!(code, 2);
    assert!(err.contains("nowhere does not exist"), "{err}");
}

/// A 4-iteration PPO run, and the same run stopped after 3 (a checkpoint every iteration, 2
/// kept): `(full, part)`.
fn four_and_three_of_four(t: &Tiny) -> (std::path::PathBuf, std::path::PathBuf) {
    let flags = |n: &'static str| {
        [
            ("--iterations", n),
            ("--checkpoint-every", "1"),
            ("--keep-checkpoints", "2"),
        ]
    };
    let full = t.dir.path().join("full");
    run_ok(&mut train_cmd(t, "ppo", &full, &flags("4")));
    let out = t.dir.path().join("part");
    run_ok(&mut train_cmd(t, "ppo", &out, &flags("3")));
    assert_eq!(checkpoints(&out), ["iter-000002", "iter-000003"]);
    (full, out)
}

/// `--resume` of `out` (from [`four_and_three_of_four`], its newest checkpoint damaged) to 4
/// iterations: it says why `iter-000003` cannot be restored (`why`), continues from
/// `iter-000002`, moves the damaged one aside and ends as `full`.
fn resume_falls_back_past_the_third(t: &Tiny, full: &Path, out: &Path, why: &str) {
    let o = run_ok(&mut resume_cmd(t, out, 4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("checkpoints/iter-000003 cannot be restored") && err.contains(why),
        "{err}"
    );
    assert!(
        err.contains("resuming from the older checkpoint")
            && err.contains("checkpoints/iter-000002 instead"),
        "{err}"
    );
    assert!(out.join("checkpoints/unusable-iter-000003").is_dir());
    assert_eq!(checkpoints(out), ["iter-000003", "iter-000004"]);
    assert_same_run(full, out, 4, 4, &["policy"]);
}

/// An unusable newest checkpoint (damaged weights, or a `state.toml` that cannot be read)
/// does not stop `--resume`: it continues from the older kept checkpoint, says so, moves the
/// unusable one aside, and ends as the run never interrupted.
#[test]
fn resume_falls_back_to_the_older_checkpoint() {
    let t = tiny();
    let (full, out) = four_and_three_of_four(&t);
    let weights = out.join("checkpoints/iter-000003/policy/model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    // The manifest would find the cut first: without it, the load finds it.
    std::fs::remove_file(
        out.join("checkpoints/iter-000003")
            .join(lmrl_runs::MANIFEST_FILE),
    )
    .unwrap();
    resume_falls_back_past_the_third(&t, &full, &out, "model.safetensors");

    // The same with a state.toml that does not parse.
    std::fs::write(out.join("checkpoints/iter-000004/state.toml"), "[[[").unwrap();
    let o = run_ok(&mut resume_cmd(&t, &out, 4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("checkpoints/iter-000004 cannot be used")
            && err.contains("checkpoints/iter-000003 instead"),
        "{err}"
    );
    assert!(out.join("checkpoints/unusable-iter-000004").is_dir());
    assert_same_run(&full, &out, 4, 4, &["policy"]);
}

/// Bytes changed inside a checkpoint, its file lengths kept (what no format check can see: the
/// weights still load, with other numbers), are found by the checkpoint's checksums: `--resume`
/// says which file and falls back to the older checkpoint, ending as the run never damaged;
/// loading the damaged copy as `--model` is refused naming the file. A checkpoint without
/// checksums (written before they existed) still resumes, with a note saying it is unchecked.
#[test]
fn silent_corruption_is_found_by_the_checksums() {
    let t = tiny();
    let (full, out) = four_and_three_of_four(&t);
    let newest = out.join("checkpoints/iter-000003");
    assert!(newest.join(lmrl_runs::MANIFEST_FILE).is_file());
    let weights = newest.join("policy/model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let at = bytes.len() * 2 / 3;
    for b in &mut bytes[at..at + 4] {
        *b ^= 0x5a;
    }
    std::fs::write(&weights, &bytes).unwrap();

    let (code, err) = run_err(
        bin()
            .args(["eval", "--model"])
            .arg(newest.join("policy"))
            .arg("--cache-dir")
            .arg(t.dir.path().join("cache")),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("policy/model.safetensors") && err.contains("checksum"),
        "{err}"
    );

    resume_falls_back_past_the_third(
        &t,
        &full,
        &out,
        "policy/model.safetensors does not match its checksum",
    );

    let newest = out.join("checkpoints/iter-000004");
    std::fs::remove_file(newest.join(lmrl_runs::MANIFEST_FILE)).unwrap();
    let o = run_ok(&mut resume_cmd(&t, &out, 4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("iter-000004 has no checksums.xxh128") && err.contains("not verified"),
        "{err}"
    );
    assert_same_run(&full, &out, 4, 4, &["policy"]);
}

/// A run whose data or model cannot be read fails naming it and creates no `--out`.
#[test]
fn a_run_that_cannot_start_creates_nothing() {
    let t = tiny();
    let out = t.dir.path().join("never");
    let missing = t.dir.path().join("missing.jsonl");
    let (code, err) = run_err(&mut train_cmd(
        &t,
        "ppo",
        &out,
        &[("--data", missing.to_str().unwrap())],
    ));
    assert_ne!(code, 0);
    assert!(err.contains("missing.jsonl"), "{err}");
    assert!(
        !out.exists(),
        "--out was created for a run that could not start"
    );
    let no_model = t.dir.path().join("no-model");
    let (_, err) = run_err(&mut train_cmd(
        &t,
        "ppo",
        &out,
        &[("--model", no_model.to_str().unwrap())],
    ));
    assert!(err.contains("no-model"), "{err}");
    assert!(!out.exists());
}

/// A run whose learner diverges before its first checkpoint (a learning rate of 1e30 gives an
/// infinite loss in its second iteration) fails naming the iteration as the progress lines
/// count it; the same `--out` with a sane setting then starts it again in place.
#[test]
fn a_diverged_run_fails_naming_the_iteration_and_starts_again_in_place() {
    let t = tiny();
    // The tiny model answers nothing right: its all-zero rewards must still be trained on to
    // diverge, with TRL's random value head (a zero one would make every advantage 0 here).
    let flags = [
        ("--iterations", "3"),
        ("--checkpoint-every", "3"),
        ("--skip-equal-scores", "false"),
        ("--value-head-init", "default"),
    ];
    let full = t.dir.path().join("full");
    run_ok(&mut train_cmd(&t, "ppo", &full, &flags));
    let out = t.dir.path().join("diverged");
    let mut wild = flags.to_vec();
    wild.push(("--learning-rate", "1e30"));
    let (code, err) = run_err(&mut train_cmd(&t, "ppo", &out, &wild));
    assert_eq!(code, 1);
    assert!(err.contains(&done_line(1, 3)), "{err}");
    assert!(
        err.contains("error: iteration 2: the learner's step failed: non-finite value"),
        "{err}"
    );
    assert!(checkpoints(&out).is_empty());
    let o = run_ok(&mut train_cmd(&t, "ppo", &out, &flags));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stopped before its first checkpoint"), "{err}");
    assert_same_run(&full, &out, 3, 3, &["policy"]);
}
