//! A property every app's command line must hold: any value of any flag that takes one — in
//! particular the edges of every integer type (0, 1, -1, i64::MAX, i64::MAX + 1, u64::MAX,
//! u64::MAX + 1) — ends in a clean refusal (exit 2 for a value clap refuses, exit 1 for one
//! refused later), never a panic (exit 101) or a crash. Shared by the apps' `int_flags` tests
//! (`#[path]`-included, as each test can only run its own crate's binary).
//!
//! The flags are not listed by hand: they are read from each (sub)command's `--help`, so a flag
//! added later is probed too. Every invocation is made to fail before any real work by its
//! base arguments (a model path that does not exist), so a value that passes parsing is
//! refused in a few milliseconds and nothing ever trains.
#![allow(dead_code)]
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The values every flag is given.
pub const EDGES: [&str; 8] = [
    "0",
    "1",
    "-1",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
];

/// A missing model: every command that loads one fails on it, after parsing.
pub const MISSING: &str = "/nonexistent-lmrl-probe/model";

/// The subcommands of `bin` (from `bin --help`'s `Commands:` section), without `help`.
pub fn subcommands(bin: &Path) -> Vec<String> {
    let help = help_text(bin, &[]);
    let mut out = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap_or_default();
            if !name.is_empty() && name != "help" {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The long flags of `bin SUB` that take a value (`--name <VALUE>`), from its `--help`.
pub fn value_flags(bin: &Path, sub: Option<&str>) -> Vec<String> {
    let help = help_text(bin, sub.as_slice());
    let mut out = Vec::new();
    for line in help.lines() {
        let mut words = line.split_whitespace();
        let Some(mut first) = words.next() else {
            continue;
        };
        if first.starts_with('-') && !first.starts_with("--") {
            first = words.next().unwrap_or_default(); // `-h, --help`
        }
        let Some(name) = first.strip_prefix("--") else {
            continue;
        };
        let takes_value = words
            .next()
            .is_some_and(|w| w.starts_with('<') || w.starts_with("[<"));
        if takes_value && !out.iter().any(|f: &String| f == name) {
            out.push(name.to_string());
        }
    }
    out
}

fn help_text(bin: &Path, sub: &[&str]) -> String {
    let out = Command::new(bin)
        .args(sub)
        .arg("--help")
        .output()
        .expect("the app runs");
    assert!(
        out.status.success(),
        "{} {sub:?} --help failed",
        bin.display()
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// One invocation's outcome.
#[derive(Debug)]
pub struct Outcome {
    pub args: Vec<String>,
    pub code: Option<i32>,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs `bin` with `args` in `cwd`, killed after `limit`.
pub fn invoke(bin: &Path, cwd: &Path, args: Vec<String>, limit: Duration) -> Outcome {
    let start = Instant::now();
    let mut child = Command::new(bin)
        .args(&args)
        .current_dir(cwd)
        .env("LMRL_CACHE", cwd.join("cache"))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the app starts");
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break Some(-1);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Outcome {
        args,
        code,
        stderr: reader.join().unwrap_or_default(),
        elapsed: start.elapsed(),
    }
}

/// The base arguments of a (sub)command (`None` = the top level), `(flag, value)` pairs.
pub type BaseArgs<'a> = &'a dyn Fn(Option<&str>) -> Vec<(&'static str, &'static str)>;

/// `base` with `--flag value`: the flag replaces the base's own value of it, if any.
pub fn with_flag(base: &[(&str, &str)], sub: Option<&str>, flag: &str, value: &str) -> Vec<String> {
    let mut args: Vec<String> = sub.iter().map(|s| s.to_string()).collect();
    for (f, v) in base {
        if *f != flag {
            args.push(format!("--{f}"));
            args.push(v.to_string());
        }
    }
    // `--flag=value`, so that a value starting with `-` is read as the value.
    args.push(format!("--{flag}={value}"));
    args
}

/// Every value-taking flag of every (sub)command in `subs` (`None` = the top level), given
/// every edge value over the base arguments `base(sub)`, run two at a time. Returns every
/// outcome; [`assert_clean`] checks them.
pub fn probe(bin: &Path, subs: &[Option<String>], base: BaseArgs<'_>) -> Vec<Outcome> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jobs = Vec::new();
    for sub in subs {
        let sub = sub.as_deref();
        let b = base(sub);
        for flag in value_flags(bin, sub) {
            for v in EDGES {
                jobs.push(with_flag(&b, sub, &flag, v));
            }
        }
    }
    let limit = Duration::from_secs(60);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(args) = jobs.get(i) else { break };
                    let o = invoke(bin, dir.path(), args.clone(), limit);
                    results.lock().unwrap().push(o);
                }
            });
        }
    });
    results.into_inner().unwrap()
}

/// Every outcome a clean refusal: exit 1 or 2, an `error:` message, no panic.
pub fn assert_clean(outcomes: &[Outcome]) {
    let count = |c: i32| outcomes.iter().filter(|o| o.code == Some(c)).count();
    let flags: std::collections::BTreeSet<(&str, &str)> = outcomes
        .iter()
        .map(|o| {
            let sub = o.args.first().filter(|a| !a.starts_with("--"));
            let flag = o.args.last().and_then(|a| a.split('=').next());
            (sub.map_or("", String::as_str), flag.unwrap_or_default())
        })
        .collect();
    eprintln!(
        "{} invocations ({} flags × {} values): {} exit 2 (refused by parsing), {} exit 1 \
         (refused later), slowest {:.2?}",
        outcomes.len(),
        flags.len(),
        EDGES.len(),
        count(2),
        count(1),
        outcomes.iter().map(|o| o.elapsed).max().unwrap_or_default()
    );
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|o| {
            !matches!(o.code, Some(1 | 2))
                || o.stderr.contains("panicked")
                || !o.stderr.contains("error")
        })
        .map(|o| {
            format!(
                "{:?} → exit {:?} after {:.1?}:\n{}",
                o.args,
                o.code,
                o.elapsed,
                o.stderr.lines().take(6).collect::<Vec<_>>().join("\n")
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} invocations were not clean refusals:\n{}",
        bad.len(),
        outcomes.len(),
        bad.join("\n\n")
    );
}

/// The outcome of `--flag=value` of (sub)command `sub` (`None` = the top level).
pub fn find<'a>(
    outcomes: &'a [Outcome],
    sub: Option<&str>,
    flag: &str,
    value: &str,
) -> &'a Outcome {
    let last = format!("--{flag}={value}");
    outcomes
        .iter()
        .find(|o| {
            let first = o.args.first().map(String::as_str).unwrap_or_default();
            let same_sub = match sub {
                Some(s) => first == s,
                None => first.starts_with("--"),
            };
            same_sub && o.args.last() == Some(&last)
        })
        .unwrap_or_else(|| panic!("no invocation of {sub:?} --{flag}={value}"))
}

/// The integer settings every training app has (`[run]`, `lmrl_train::RunSettings`), as flags
/// of its top level and of `train`.
pub const RUN_FLAGS: [(Option<&str>, &str); 5] = [
    (None, "seed"),
    (Some("train"), "iterations"),
    (Some("train"), "checkpoint-every"),
    (Some("train"), "keep-checkpoints"),
    (Some("train"), "generation-batch-size"),
];

/// Values past `i64::MAX`, and a negative one: a usage error for every integer flag.
pub const PAST_I64: [&str; 3] = ["9223372036854775808", "18446744073709551615", "-1"];

/// Every (sub)command of `bin` — its top level too where `top_level` — probed over `base`
/// ([`probe`]) and checked clean ([`assert_clean`]), at least `min_flags` flags in all; returns
/// the (sub)command names (`""` for the top level) and the outcomes.
pub fn probe_app(
    bin: &Path,
    top_level: bool,
    min_flags: usize,
    base: BaseArgs<'_>,
) -> (Vec<String>, Vec<Outcome>) {
    let subs: Vec<Option<String>> = top_level
        .then_some(None)
        .into_iter()
        .chain(subcommands(bin).into_iter().map(Some))
        .collect();
    let outcomes = probe(bin, &subs, base);
    assert!(
        outcomes.len() >= min_flags * EDGES.len(),
        "only {} invocations: the flags were not all found in --help",
        outcomes.len()
    );
    assert_clean(&outcomes);
    let names = subs.into_iter().map(Option::unwrap_or_default).collect();
    (names, outcomes)
}

/// Each of `flags` (`(sub)command, flag`) refuses each of `refused` with exit 2 naming the
/// flag, and is refused cleanly (exit 1 or 2) at `i64::MAX`, the largest value it parses.
pub fn assert_integer_flags(
    outcomes: &[Outcome],
    flags: &[(Option<&str>, &str)],
    refused: &[&str],
) {
    for &(sub, flag) in flags {
        for v in refused {
            let o = find(outcomes, sub, flag, v);
            assert_eq!(o.code, Some(2), "{:?}: {}", o.args, o.stderr);
            assert!(o.stderr.contains(&format!("--{flag}")), "{}", o.stderr);
        }
        let o = find(outcomes, sub, flag, "9223372036854775807");
        assert!(matches!(o.code, Some(1 | 2)), "{:?}: {}", o.args, o.stderr);
    }
}
