//! Every flag of every `gsm8k-app` (sub)command that takes a value, at the edges of the integer
//! types: a clean refusal (exit 1 or 2), never a panic. See `tests/probe/int_flags.rs`.
#[path = "../../../tests/probe/int_flags.rs"]
mod int_flags;

use std::path::Path;

use int_flags::{EDGES, MISSING, assert_clean, find, probe, subcommands};

#[test]
fn every_flag_at_the_integer_edges_is_refused_cleanly() {
    let bin = Path::new(env!("CARGO_BIN_EXE_gsm8k-app"));
    let subs: Vec<Option<String>> = std::iter::once(None)
        .chain(subcommands(bin).into_iter().map(Some))
        .collect();
    assert_eq!(
        subs,
        [
            None,
            Some("train".into()),
            Some("check".into()),
            Some("eval".into())
        ]
    );
    let outcomes = probe(bin, &subs, &|sub| match sub {
        Some("check") => vec![("input", MISSING), ("out", "checked.jsonl")],
        _ => vec![("model", MISSING)],
    });
    // The training flags at the top level and under `train`, and eval's own.
    assert!(
        outcomes.len() >= 120 * EDGES.len(),
        "{} invocations",
        outcomes.len()
    );
    assert_clean(&outcomes);
    // Past i64::MAX, or negative, an integer setting is a usage error naming its flag.
    for (sub, flag) in [
        (None, "seed"),
        (Some("train"), "iterations"),
        (Some("train"), "checkpoint-every"),
        (Some("train"), "keep-checkpoints"),
        (Some("train"), "generation-batch-size"),
        (Some("train"), "max-new-tokens"),
        (Some("eval"), "max-new-tokens"),
        (Some("eval"), "k"),
    ] {
        for v in ["9223372036854775808", "18446744073709551615", "-1"] {
            let o = find(&outcomes, sub, flag, v);
            assert_eq!(o.code, Some(2), "{:?}: {}", o.args, o.stderr);
            assert!(o.stderr.contains(&format!("--{flag}")), "{}", o.stderr);
        }
        // The largest accepted value passes parsing and is refused later, cleanly.
        let o = find(&outcomes, sub, flag, "9223372036854775807");
        assert_eq!(o.code.map(|c| c == 1 || c == 2), Some(true), "{}", o.stderr);
    }
}
