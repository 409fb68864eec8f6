#!/bin/sh
# fuzz/run.sh [SECONDS] [TARGET...]: runs the fuzz targets (default: all six), one after another,
# for SECONDS (default 120) of wall time each, from the committed seeds plus what earlier runs
# found (corpus/, not committed), and prints libFuzzer's totals per target. A crash stops the
# script and leaves its input in artifacts/TARGET/ and the log in fuzz/TARGET.log.
# Needs cargo-fuzz (`cargo install cargo-fuzz`); the stable toolchain runs it with
# RUSTC_BOOTSTRAP=1 (libFuzzer's sanitizer-coverage flags are nightly-only).
set -e
cd "$(dirname "$0")"
secs=${1:-120}
[ $# -gt 0 ] && shift
targets=${*:-gguf safetensors config_json tokenizer csv jsonl}
for t in $targets; do
    mkdir -p "corpus/$t"
    RUSTC_BOOTSTRAP=1 cargo fuzz run -O --sanitizer none "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -max_len=65536 -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
        2>"$t.log" || { echo "$t: FAILED, see fuzz/$t.log"; tail -40 "$t.log"; exit 1; }
    printf '%s: %s; %s\n' "$t" "$(grep '^Done' "$t.log")" \
        "$(grep -E 'stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$t.log" | tr -s ' ' | tr '\n' ' ')"
done
