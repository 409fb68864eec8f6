#!/usr/bin/env bash
# The scaling table of docs/benchmarks.md: seconds and peak memory of one PPO iteration
# (generation + `PpoAgent::step`) and one whole CORY iteration on SmolLM2-135M, against the
# batch and the response length. One process per cell and per algorithm, so each
# `peak_rss_mib` is that run's own peak. Run it on a quiet machine (nothing else running).
#
# Usage: [BATCHES="8 16 32 64"] [RESPONSES="32 64 128"] [REPS=1] scripts/bench-scaling.sh [out.csv]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-runs/bench-scaling.csv}"
mkdir -p "$(dirname "$out")"
cargo build --release --workspace --bin fetch-assets
cargo build --release --workspace --example bench_ppo
model=$(target/release/fetch-assets smollm2-135m | awk '$1 == "smollm2-135m" {print $NF}')
[[ -f $model ]] || { echo "bench-scaling.sh: no SmolLM2-135M file from fetch-assets" >&2; exit 1; }
[[ -f $out ]] || echo "algo,batch,response_len,query_len,iteration_secs,peak_rss_mib,load_1min" >"$out"
for b in ${BATCHES:-8 16 32 64}; do for r in ${RESPONSES:-32 64 128}; do for a in ppo cory; do
  if grep -q "^$a,$b,$r," "$out"; then continue; fi # finished cells are kept (resume)
  echo "bench-scaling.sh: $a batch $b response $r" >&2
  line=$(target/release/examples/bench_ppo --model "$model" --reps "${REPS:-1}" --only "$a" \
    --batch "$b" --response-len "$r" | tail -1)
  load=$(cut -d' ' -f1 /proc/loadavg)
  python3 - "$a" "$line" "$load" >>"$out" <<'PY'
import json, sys
algo, j, load = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
secs = j["ppo_iteration_secs"] if algo == "ppo" else j["cory_iteration_secs"]
print(f'{algo},{j["batch"]},{j["response_len"]},{j["query_len"]},{secs:.2f},{j["peak_rss_mib"]:.0f},{load}')
PY
done; done; done
column -s, -t "$out"
