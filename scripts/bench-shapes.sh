#!/usr/bin/env bash
# Speed and memory of random models of real shapes, this project against PyTorch + transformers,
# one process at a time (run on a quiet machine):
#   scripts/bench-shapes.sh OUT_DIR PYTHON [SHAPE...]
# PYTHON has torch 2.15.0 and transformers 4.57.1; SHAPE names a file of apps/lm-app/shapes
# (default: all). For each shape, `lm-app bench --config` and scripts/bench_peer_shapes.py run
# back to back, each under /usr/bin/time -v (peak RSS); the load average is logged before each.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
py=$2
shift 2
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(qwen2.5-0.5b llama-3.2-1b qwen2.5-1.5b)
mkdir -p "$out"
cargo build --release -p lm-app
for s in "${shapes[@]}"; do
  cfg=apps/lm-app/shapes/$s.json
  echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) ours $s" | tee -a "$out/log.txt"
  /usr/bin/time -v target/release/lm-app bench --skip-gpt2 --config "$cfg" --reps 2 \
    > "$out/ours-$s.json" 2> "$out/ours-$s.time"
  echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) peer $s" | tee -a "$out/log.txt"
  OMP_NUM_THREADS=2 /usr/bin/time -v "$py" scripts/bench_peer_shapes.py "$cfg" --reps 2 --threads 2 \
    > "$out/peer-$s.json" 2> "$out/peer-$s.time"
done
echo "$(date -u +%FT%TZ) done" | tee -a "$out/log.txt"
