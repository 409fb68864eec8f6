#!/usr/bin/env bash
# The checks of an optional backend, on this machine's CPU: scripts/test-backend.sh tch
#
# tch (libtorch 2.9.0 from PyPI, set up by scripts/setup-tch.sh; the route a GPU user takes
# with CUDA libtorch) runs burn's composite ops where `flex` runs this workspace's hand-written
# kernels, so this is the check of that path:
#   1. the reference-parity tests on libtorch: GPT-2, Llama, Qwen2/Qwen3/Mistral logits, value
#      head, KV cache and greedy generation against transformers; PPO, GRPO and RLOO quantities
#      against TRL (`--features lmrl-models/tch,lmrl-rl/tch` makes their device libtorch);
#   2. `lmrl-rl/tests/backends.rs`: three PPO, GRPO and CORY iterations on libtorch against the
#      same on flex (tolerance in that file);
#   3. the apps built as a user builds them (`--no-default-features --features tch`), and short
#      imdb-app PPO, GRPO and CORY runs and a gsm8k-app GRPO run on SmolLM2-135M.
# Exits 0 only when every step passes; ends by printing `lm-app binary: PATH`.
#
# Everything is built under target/tch (CARGO_TARGET_DIR), so the default build is untouched.
# Environment: TORCH_VENV (default ~/torch29) for the libtorch venv; RUNS_DIR (default
# target/tch/backend-runs) for the app runs' outputs.
set -euo pipefail
cd "$(dirname "$0")/.."

backend="${1:-}"
case "$backend" in
    tch) ;;
    *) echo "usage: scripts/test-backend.sh tch   (the one optional backend this machine can run)" >&2
       exit 2 ;;
esac

say() { echo "test-backend: $*" >&2; }
step() { say "== $* ($(date -u +%H:%M:%S) UTC)"; }

step "libtorch from PyPI"
exports="$(scripts/setup-tch.sh "${TORCH_VENV:-$HOME/torch29}")"
# Only the `export` lines: anything else a pip configuration may print is not for the shell.
eval "$(grep '^export ' <<<"$exports")"
export LIBTORCH LD_LIBRARY_PATH
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR_TCH:-$PWD/target/tch}"

step "reference parity and flex-vs-libtorch training on libtorch"
cargo test --release -p lmrl-models -p lmrl-rl --features lmrl-models/tch,lmrl-rl/tch \
    --test fixture_forward --test generation --test trl_parity --test group_parity \
    --test backends

step "the apps for libtorch (--no-default-features --features tch)"
cargo build --release --no-default-features --features tch -p imdb-app -p gsm8k-app -p lm-app
bin="$CARGO_TARGET_DIR/release"

runs="${RUNS_DIR:-$CARGO_TARGET_DIR/backend-runs}"
rm -rf "$runs"
mkdir -p "$runs"
# Each run must finish and write its metrics and summary; these binaries have libtorch as their
# only backend, so whatever they train, they train on it.
check_run() {
    local name="$1" log="$runs/$1.log"
    shift
    say "run $name: $*"
    if ! "$@" >"$log" 2>&1; then
        tail -30 "$log" >&2
        say "FAILED: $name (log: $log)"
        exit 1
    fi
    [[ -s "$runs/$name/metrics.csv" && -s "$runs/$name/summary.json" ]] \
        || { say "FAILED: $name wrote no metrics.csv/summary.json"; exit 1; }
}

step "short runs on libtorch"
imdb=(--iterations 2 --batch-size 4 --mini-batch-size 2 --response-tokens-min 4
      --response-tokens-max 4 --heldout-reviews 8 --eval-samples 1 --checkpoint-every 100)
group=(--grpo-prompts-per-step 2 --grpo-num-generations 2 --grpo-mini-batch-size 4
       --grpo-gradient-accumulation-steps 1)
check_run imdb-ppo "$bin/imdb-app" --algo ppo "${imdb[@]}" --out "$runs/imdb-ppo"
check_run imdb-grpo "$bin/imdb-app" --algo grpo --iterations 2 --response-tokens-min 4 \
    --response-tokens-max 4 --heldout-reviews 8 --eval-samples 1 --checkpoint-every 100 \
    "${group[@]}" --out "$runs/imdb-grpo"
check_run imdb-cory "$bin/imdb-app" --algo cory "${imdb[@]}" --swap-period 1 --out "$runs/imdb-cory"
check_run gsm8k-grpo "$bin/gsm8k-app" --algo grpo --iterations 2 --max-new-tokens 8 \
    --eval-limit 2 --checkpoint-every 100 "${group[@]}" --out "$runs/gsm8k-grpo"

# The runs' final checkpoints are full models (GBs); their metrics and plots stay.
rm -rf "$runs"/*/checkpoints
say "all tch checks passed"
echo "lm-app binary: $bin/lm-app"
