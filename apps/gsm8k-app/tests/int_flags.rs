//! Every flag of every `gsm8k-app` (sub)command that takes a value, at the edges of the integer
//! types: a clean refusal (exit 1 or 2), never a panic. See `tests/probe/int_flags.rs`.
#[path = "../../../tests/probe/int_flags.rs"]
mod int_flags;

use std::path::Path;

use int_flags::{MISSING, PAST_I64, RUN_FLAGS, assert_integer_flags, probe_app};

#[test]
fn every_flag_at_the_integer_edges_is_refused_cleanly() {
    let bin = Path::new(env!("CARGO_BIN_EXE_gsm8k-app"));
    // The training flags at the top level and under `train`, and eval's own.
    let (names, outcomes) = probe_app(bin, true, 120, &|sub| match sub {
        Some("check") => vec![("input", MISSING), ("out", "checked.jsonl")],
        Some("compare") => vec![("a", MISSING), ("b", MISSING)],
        _ => vec![("model", MISSING)],
    });
    assert_eq!(names, ["", "train", "check", "eval", "compare"]);
    // Past i64::MAX, or negative, an integer setting is a usage error naming its flag.
    let own = [
        (Some("train"), "max-new-tokens"),
        (Some("eval"), "max-new-tokens"),
        (Some("eval"), "k"),
    ];
    assert_integer_flags(&outcomes, &[&RUN_FLAGS[..], &own].concat(), &PAST_I64);
}
