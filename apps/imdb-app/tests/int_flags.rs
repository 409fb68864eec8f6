//! Every flag of every `imdb-app` (sub)command that takes a value, at the edges of the integer
//! types: a clean refusal (exit 1 or 2), never a panic. See `tests/probe/int_flags.rs`.
#[path = "../../../tests/probe/int_flags.rs"]
mod int_flags;

use std::path::Path;

use int_flags::{MISSING, PAST_I64, RUN_FLAGS, assert_integer_flags, probe_app};

#[test]
fn every_flag_at_the_integer_edges_is_refused_cleanly() {
    let bin = Path::new(env!("CARGO_BIN_EXE_imdb-app"));
    let (names, outcomes) = probe_app(bin, true, 150, &|sub| match sub {
        Some("score") => vec![("input", MISSING), ("out", "scored.jsonl")],
        Some("generate") => vec![("model", MISSING), ("prompt", "hi")],
        Some("analyze") => vec![("data", MISSING)],
        _ => vec![("model", MISSING)],
    });
    assert_eq!(
        names,
        ["", "train", "score", "generate", "eval", "sweep", "analyze"]
    );
    let own = [
        (Some("train"), "response-tokens-max"),
        (Some("sweep"), "seeds"),
        (Some("generate"), "num"),
        (Some("generate"), "max-new-tokens"),
        (Some("train"), "heldout-reviews"),
        (Some("train"), "eval-samples"),
        (Some("eval"), "samples"),
        (Some("eval"), "max-new-tokens"),
    ];
    assert_integer_flags(&outcomes, &[&RUN_FLAGS[..], &own].concat(), &PAST_I64);
}
