//! Arbitrary bytes as every JSONL reader's input (reviews, GSM8K, GSM-Symbolic, ASDiv), strict
//! and skipping bad rows: rows or a typed error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lmrl_data::{
    ReadOptions, read_asdiv_jsonl, read_gsm_symbolic_jsonl, read_gsm8k_jsonl, read_reviews_jsonl,
};

#[path = "input.rs"]
mod input;

fuzz_target!(|data: &[u8]| {
    let p = input::write("rows.jsonl", data);
    for opts in [ReadOptions::strict(), ReadOptions::skip_bad_rows()] {
        let _ = read_reviews_jsonl(&p, opts);
        let _ = read_gsm8k_jsonl(&p, opts);
        let _ = read_gsm_symbolic_jsonl(&p, opts);
        let _ = read_asdiv_jsonl(&p, opts);
    }
});
