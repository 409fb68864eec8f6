#!/usr/bin/env bash
# The default IMDB run (`imdb-app` with no settings but --seed) on seeds 0–4, each then
# evaluated outside the loop on held-out openings. Finished runs are skipped, so rerunning the
# script continues; the small outputs are copied into $DATA.
#
#   scripts/imdb-default-seeds.sh [OUT] [DATA]
#   SEEDS="0 1 2 3 4"  SAMPLES=4  PROMPTS=FILE (default: each run's own heldout.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/imdb-default-seeds}
DATA=${2:-docs/results/data/imdb-default-seeds}
SEEDS=${SEEDS:-0 1 2 3 4}
SAMPLES=${SAMPLES:-4}
BIN=target/release/imdb-app
cargo build --release --workspace --bin imdb-app
mkdir -p "$OUT" "$DATA"
for seed in $SEEDS; do
    run="$OUT/seed-$seed"
    if [ ! -f "$run/summary.json" ]; then
        if [ -d "$run/checkpoints" ]; then
            args=(--resume "$run")
        else
            args=(--seed "$seed" --out "$run")
        fi
        /usr/bin/time -v "$BIN" "${args[@]}" >> "$run.log" 2>&1
    fi
    prompts=${PROMPTS:-$run/heldout.jsonl}
    name=$(basename "$prompts" .jsonl)
    if [ ! -f "$run/eval-$name/eval.json" ]; then
        "$BIN" eval --model "$run" --prompts "$prompts" --samples "$SAMPLES" --out "$run/eval-$name" > "$run.eval.log" 2>&1
    fi
    mkdir -p "$DATA/seed-$seed/eval-$name"
    cp "$run"/{config.toml,metrics.csv,eval.json,eval.md,summary.json,task_reward.png,kl.png} "$DATA/seed-$seed/"
    cp "$run/eval-$name"/{eval.json,eval.md,eval.csv} "$DATA/seed-$seed/eval-$name/"
    grep -E "Elapsed|Maximum resident" "$run.log" > "$DATA/seed-$seed/time.txt" || true
    # Each checkpoint of both copies takes ~3 GB: keep only the evaluated (latest) one.
    ls -d "$run"/checkpoints/iter-* | head -n -1 | xargs -r rm -rf
done
