//! Every flag of every `imdb-app` (sub)command that takes a value, at the edges of the integer
//! types: a clean refusal (exit 1 or 2), never a panic. See `tests/probe/int_flags.rs`.
#[path = "../../../tests/probe/int_flags.rs"]
mod int_flags;

use std::path::Path;

use int_flags::{EDGES, MISSING, assert_clean, find, probe, subcommands};

#[test]
fn every_flag_at_the_integer_edges_is_refused_cleanly() {
    let bin = Path::new(env!("CARGO_BIN_EXE_imdb-app"));
    let subs: Vec<Option<String>> = std::iter::once(None)
        .chain(subcommands(bin).into_iter().map(Some))
        .collect();
    let names: Vec<&str> = subs.iter().flatten().map(String::as_str).collect();
    assert_eq!(names, ["train", "score", "generate", "sweep", "analyze"]);
    let outcomes = probe(bin, &subs, &|sub| match sub {
        Some("score") => vec![("input", MISSING), ("out", "scored.jsonl")],
        Some("generate") => vec![("model", MISSING), ("prompt", "hi")],
        Some("analyze") => vec![("data", MISSING)],
        _ => vec![("model", MISSING)],
    });
    assert!(
        outcomes.len() >= 150 * EDGES.len(),
        "{} invocations",
        outcomes.len()
    );
    assert_clean(&outcomes);
    for (sub, flag) in [
        (None, "seed"),
        (Some("train"), "iterations"),
        (Some("train"), "checkpoint-every"),
        (Some("train"), "keep-checkpoints"),
        (Some("train"), "response-tokens-max"),
        (Some("train"), "generation-batch-size"),
        (Some("sweep"), "seeds"),
        (Some("generate"), "num"),
        (Some("generate"), "max-new-tokens"),
    ] {
        for v in ["9223372036854775808", "18446744073709551615", "-1"] {
            let o = find(&outcomes, sub, flag, v);
            assert_eq!(o.code, Some(2), "{:?}: {}", o.args, o.stderr);
            assert!(o.stderr.contains(&format!("--{flag}")), "{}", o.stderr);
        }
        let o = find(&outcomes, sub, flag, "9223372036854775807");
        assert_eq!(o.code.map(|c| c == 1 || c == 2), Some(true), "{}", o.stderr);
    }
}
