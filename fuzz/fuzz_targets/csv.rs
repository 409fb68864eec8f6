//! Arbitrary bytes as a review CSV, in both layouts (`text,label` and Pang & Lee's), strict and
//! skipping bad rows: rows or a typed error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lmrl_data::{ReadOptions, read_pang_lee_csv, read_reviews, read_text_label_csv};

#[path = "input.rs"]
mod input;

fuzz_target!(|data: &[u8]| {
    let p = input::write("reviews.csv", data);
    for opts in [ReadOptions::strict(), ReadOptions::skip_bad_rows()] {
        let _ = read_text_label_csv(&p, opts);
        let _ = read_pang_lee_csv(&p, opts);
        let _ = read_reviews(&p, None, opts);
    }
});
