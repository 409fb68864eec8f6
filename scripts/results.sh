#!/usr/bin/env bash
# Every run behind docs/results.md, and the analyses of them. Each sweep trains one run per
# setting into runs/results/<sweep>/, skipping finished runs and resuming interrupted ones, so
# rerunning this script after an interruption continues where it stopped. Each finished run's
# config.toml and metrics.csv are copied into docs/results/data/<sweep>/<run>/ (the files the
# repository keeps); `imdb-app analyze` then writes docs/results/<sweep>/analysis.{md,json} and
# the mean ± std curves.
#
# The settings are the same for both algorithms except the algorithm: fixed β (the adaptive
# controller moves β by < 0.03% per iteration at batch 16, so it is fixed and said so), running
# score normalisation for both, no repetition penalty, the EOS text dropped before scoring (the
# bag-of-words classifier gives it weight), the same seeds (paired batches and response lengths),
# and every copy also measured answering the plain query.
#
# Usage: scripts/results.sh [main|frontier|collapse|bounded|all]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p imdb-app
APP=target/release/imdb-app
LR="${LR:-1e-4}"
ITERS="${ITERS:-45}"
COMMON=(--iterations "$ITERS" --adap-kl-ctrl false --use-score-norm true --use-score-scaling true
  --repetition-penalty 1.0 --strip-eos true --checkpoint-every 15 --samples-every 5)

sweep() { # name, then sweep flags
  local name=$1
  shift
  "$APP" sweep "${COMMON[@]}" "$@" --out "runs/results/$name" --data-dir "docs/results/data/$name"
  "$APP" analyze --data "docs/results/data/$name" --out "docs/results/$name"
}

what="${1:-all}"
if [[ $what == main || $what == all ]]; then
  # Main comparison: PPO vs CORY, 5 seeds, 45 iterations (9 role exchanges).
  sweep main --algos ppo,cory --init-kl-coefs 0.3 --seeds 0,1,2,3,4 --learning-rate "$LR"
fi
if [[ $what == frontier || $what == all ]]; then
  # Reward–KL frontier over β, 2 seeds per point.
  sweep frontier --algos ppo,cory --init-kl-coefs 0.1,0.3,1.0 --seeds 0,1 --learning-rate "$LR"
fi
if [[ $what == collapse || $what == all ]]; then
  # High learning rates with 2 PPO epochs (so the ratio clip can act), 3 seeds.
  for lr in 5e-4 1e-3; do
    sweep "collapse-lr$lr" --algos ppo,cory --init-kl-coefs 0.3 --seeds 0,1,2 --learning-rate "$lr" --ppo-epochs 2
  done
fi
if [[ $what == bounded || $what == all ]]; then
  # The bounded reward P(POS) instead of the unbounded POS − NEG logit, 3 seeds.
  sweep bounded --algos ppo,cory --init-kl-coefs 0.3 --seeds 0,1,2 --learning-rate "$LR" --reward textcat-prob
fi
echo "results: docs/results/"
