#!/usr/bin/env bash
# The PPO-vs-CORY comparison of docs/results.md, at CPU scale, on imdb-app's defaults:
#   1. both algorithms × seeds 0,1,2 at the default learning rate  → runs/results/
#   2. both algorithms × seed 0 at a 5× higher learning rate        → runs/results-high-lr/
# Each sweep writes one run directory per setting, frontier.{csv,png,svg} and
# curves_{task_reward,kl,combined_reward}.{png,svg} (mean ± std over seeds).
# Rerunning continues: finished runs are skipped, interrupted ones resumed.
# About 1 hour on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p imdb-app
APP=target/release/imdb-app
HIGH_LR="${HIGH_LR:-1e-3}"
"$APP" sweep --algos ppo,cory --init-kl-coefs 0.3 --seeds 0,1,2 --checkpoint-every 100 --out runs/results
"$APP" sweep --algos ppo,cory --init-kl-coefs 0.3 --seeds 0 --lr "$HIGH_LR" --checkpoint-every 100 --out runs/results-high-lr
echo "results: runs/results/ and runs/results-high-lr/"
