#!/usr/bin/env bash
# Every run behind docs/results.md, and the analyses of them. Each sweep trains one run per
# setting into runs/results/<sweep>/, skipping finished runs and resuming interrupted ones, so
# rerunning this script after an interruption continues where it stopped. Each finished run's
# config.toml, metrics.csv and last logged samples are copied into
# docs/results/data/<sweep>/<run>/ (the files the repository keeps); `imdb-app analyze` then
# writes docs/results/<sweep>/analysis.{md,json} and the mean ± std curves, and the sweep's
# frontier.{csv,png} is copied beside them. Runs are spread over JOBS processes (default: the
# number of cores); each run's log is runs/results/<sweep>/<run>.log.
#
# The settings are the same for both algorithms except the algorithm: fixed β (the adaptive
# controller moves β by < 0.03% per iteration at batch 16, so it is fixed and said so), running
# score normalisation for both, no repetition penalty, the EOS text dropped before scoring (the
# bag-of-words classifier gives it weight), the same seeds (paired batches and response lengths),
# and every copy also measured answering the plain query.
#
# Usage: [JOBS=N] scripts/results.sh [main|collapse|frontier|lr|bounded|all]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p imdb-app
APP=target/release/imdb-app
LR="${LR:-5e-5}"
ITERS="${ITERS:-45}"
# The collapse runs are shorter: at these learning rates a collapse shows within 30 iterations.
COLLAPSE_ITERS="${COLLAPSE_ITERS:-30}"
# The settings of the committed sweeps, pinned where the app's defaults have changed since
# (responses of 4–15 tokens, role exchange every 5 iterations, no held-out reviews).
COMMON=(--adap-kl-ctrl false --use-score-norm true --use-score-scaling true
  --repetition-penalty 1.0 --strip-eos true --checkpoint-every 15 --samples-every 5
  --response-tokens-min 4 --response-tokens-max 15 --swap-period 5
  --heldout-reviews 0 --eval-samples 0)

# Runs are independent and a run's rows do not depend on the number of threads (only its
# `seconds` column does), so the runs of a sweep are spread over JOBS processes of one thread
# each (flex is mostly single-threaded, so this uses the cores better than one process).
JOBS="${JOBS:-$(nproc)}"

# A finished run's checkpoint holds its weights (3 GB per PPO run, 6 GB per CORY run here), which
# no analysis reads: once a run has finished (summary.json written after its last checkpoint), its
# checkpoints are deleted unless KEEP_CHECKPOINTS=1, so a whole sweep fits on a small disk.
prune_finished() { # sweep root
  [[ ${KEEP_CHECKPOINTS:-0} == 1 ]] && return
  local s
  for s in "$1"/*/summary.json; do
    [[ -f $s && -d $(dirname "$s")/checkpoints ]] && rm -rf "$(dirname "$s")/checkpoints"
  done
  return 0
}

sweep() { # name, algos, β₀ list, seeds, then further sweep flags
  local name=$1 algos=$2 kls=$3 seeds=$4
  shift 4
  local root="runs/results/$name"
  local args=("${COMMON[@]}" "$@" --out "$root" --data-dir "docs/results/data/$name")
  local a k s failed=0 running=0
  mkdir -p "$root"
  for a in ${algos//,/ }; do for k in ${kls//,/ }; do for s in ${seeds//,/ }; do
    # A new run starts as soon as any running one ends (a CORY run takes several PPO runs' time).
    if ((running >= JOBS)); then
      wait -n || failed=1
      running=$((running - 1))
      prune_finished "$root"
    fi
    echo "results.sh: $name $a β₀=$k seed $s (log: $root/$a-kl$k-seed$s.log)"
    RAYON_NUM_THREADS=1 "$APP" sweep "${args[@]}" --algos "$a" --init-kl-coefs "$k" --seeds "$s" \
      >/dev/null 2>>"$root/$a-kl$k-seed$s.log" &
    running=$((running + 1))
  done; done; done
  while ((running > 0)); do
    wait -n || failed=1
    running=$((running - 1))
    prune_finished "$root"
  done
  if ((failed)); then
    echo "results.sh: a run of sweep $name failed or was interrupted (see its log); rerun to continue" >&2
    exit 1
  fi
  # Every run is finished now: this pass only collects them into the frontier and curves.
  "$APP" sweep "${args[@]}" --algos "$algos" --init-kl-coefs "$kls" --seeds "$seeds"
  mkdir -p "docs/results/$name"
  cp "$root"/frontier.{csv,png} "docs/results/$name/"
  if [[ $kls == *,* ]]; then
    # Several β₀: the frontier is the result (analyze pairs runs that differ only in the
    # algorithm and the seed).
    cp "$root"/curves_*.png "docs/results/$name/"
  else
    "$APP" analyze --data "docs/results/data/$name" --out "docs/results/$name"
  fi
}

what="${1:-all}"
if [[ $what == main || $what == all ]]; then
  # Main comparison: PPO vs CORY, 5 seeds, 45 iterations (9 role exchanges).
  sweep main ppo,cory 0.3 0,1,2,3,4 --iterations "$ITERS" --learning-rate "$LR"
fi
if [[ $what == frontier || $what == all ]]; then
  # Reward–KL frontier over β, 2 seeds per point.
  # The β₀ = 0.3 runs are the main comparison's seeds 0 and 1 (same settings, deterministic
  # rows), so their files are taken from there when those have finished.
  for a in cory ppo; do for s in 0 1; do
    from="runs/results/main/$a-kl0.3-seed$s"
    to="runs/results/frontier/$a-kl0.3-seed$s"
    if [[ -f $from/summary.json && ! -e $to ]]; then
      mkdir -p "$to" && cp "$from"/{config.toml,metrics.csv,summary.json} "$to/"
    fi
  done; done
  sweep frontier ppo,cory 0.1,0.3,1.0 0,1 --iterations "$ITERS" --learning-rate "$LR"
fi
if [[ $what == collapse || $what == all ]]; then
  # High learning rates with 2 PPO epochs (so the ratio clip can act), 3 seeds.
  for lr in 5e-4 1e-3; do
    sweep "collapse-lr$lr" cory,ppo 0.3 0,1,2 --iterations "$COLLAPSE_ITERS" --learning-rate "$lr" \
      --ppo-epochs 2
  done
fi
if [[ $what == lr || $what == all ]]; then
  # Why the main comparison runs at 5e-5: PPO at 1e-4 (seed 0) for reference.
  sweep lr-1e-4 ppo 0.3 0 --iterations "$ITERS" --learning-rate 1e-4
fi
if [[ $what == bounded || $what == all ]]; then
  # The bounded reward P(POS) instead of the unbounded POS − NEG logit, 3 seeds.
  sweep bounded ppo,cory 0.3 0,1,2 --iterations "$ITERS" --learning-rate "$LR" --reward textcat-prob
fi
echo "results: docs/results/"
