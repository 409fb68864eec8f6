#!/usr/bin/env bash
# The LoRA table of docs/benchmarks.md: PPO iteration (generation + step) and whole CORY
# iteration, seconds and peak RSS, full fine-tuning against LoRA, per model. One process per
# cell (so each peak RSS is that run's own), full and LoRA alternating, ROUNDS times. Run it on
# a quiet machine (nothing else running); each JSON line goes to OUT/<model>.jsonl with the
# 1-minute load average beside it.
#
# Usage: [MODELS="smollm2-135m qwen2.5-0.5b"] [RANKS="0 16"] [ALGOS="ppo cory"] [ROUNDS=1]
#        [REPS=3] [BATCH=8] [MINI=8] [RESPONSE=32] scripts/bench-lora.sh [OUT]
# A model is `smollm2-135m` (the real checkpoint, fetched into the asset cache) or a random
# model of a published shape (`qwen2.5-0.5b`, `qwen2.5-1.5b`: bench_ppo --shape).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-runs/bench-lora}"
mkdir -p "$out"
cargo build --release --workspace --bin fetch-assets
cargo build --release --workspace --example bench_ppo
for round in $(seq "${ROUNDS:-1}"); do
  for m in ${MODELS:-smollm2-135m}; do for a in ${ALGOS:-ppo cory}; do for r in ${RANKS:-0 16}; do
    if [[ $m == smollm2-135m ]]; then
      file=$(target/release/fetch-assets smollm2-135m | awk '$1 == "smollm2-135m" {print $NF}')
      src=(--model "$file")
    else
      src=(--shape "$m")
    fi
    echo "bench-lora.sh: round $round $m $a lora rank $r" >&2
    load=$(cut -d' ' -f1 /proc/loadavg)
    line=$(target/release/examples/bench_ppo "${src[@]}" --lora-rank "$r" --only "$a" \
      --reps "${REPS:-3}" --batch "${BATCH:-8}" --mini-batch "${MINI:-8}" --response-len "${RESPONSE:-32}" | tail -1)
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); j["algo"]=sys.argv[2]; j["load_1min_before"]=float(sys.argv[3]); print(json.dumps(j))' \
      "$line" "$a" "$load" >>"$out/$m.jsonl"
  done; done; done
done
