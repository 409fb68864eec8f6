#!/usr/bin/env bash
# The math protocol of docs/gsm8k-app.md ("Protocol"): every arm × seed is trained, each trained
# copy and the base model are evaluated on the ASDiv split and the GSM-Symbolic file of the
# phase, and each arm is compared with the base model question by question (`compare`).
# `dev` is for choosing settings; `test` only for the final numbers, with the settings chosen.
# Finished steps are skipped, so rerunning the script continues an interrupted sweep; the small
# outputs (no weights, no question text: per-question files keep the question's id) are copied
# into $DATA as they finish.
#
#   scripts/gsm8k-protocol.sh dev|test [OUT] [DATA]
#   ARMS="grpo rloo ppo cory"  SEEDS="0 1 2 3 4"  FLAGS_grpo="--grpo-learning-rate 4e-6" …
# Two instances with the same OUT and DATA and disjoint SEEDS share the two cores better than
# one (a run keeps about 1.2 cores busy); start the second once the base model is evaluated.
set -euo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:?usage: scripts/gsm8k-protocol.sh dev|test [OUT] [DATA]}
case "$PHASE" in dev | test) ;; *) echo "phase must be dev or test, got $PHASE" >&2; exit 2 ;; esac
OUT=${2:-runs/gsm8k-protocol}
DATA=${3:-docs/results/data/gsm8k-protocol/$PHASE}
ARMS=${ARMS-grpo rloo ppo cory}
SEEDS=${SEEDS:-0 1 2 3 4}
GSMS=${GSMS:-${LMRL_CACHE:-$HOME/.cache/lmrl}/gsm-symbolic}
# BIN=PATH: a binary built beforehand (the sweep then runs one build however the tree changes).
if [ -z "${BIN:-}" ]; then
    cargo build --release -p gsm8k-app
    BIN=target/release/gsm8k-app
fi
[ -f "$GSMS/$PHASE.jsonl" ] || python3 scripts/gsm_symbolic.py --out "$GSMS"
mkdir -p "$OUT" "$DATA/compare"

# evaluate MODEL DIR [eval flags]: both sets of the phase, per-question files in DIR.
evaluate() {
    local model=$1 dir=$2
    shift 2
    mkdir -p "$dir"
    [ -f "$dir/asdiv-$PHASE.csv" ] || "$BIN" eval --model "$model" "$@" --split "$PHASE" \
        --data asdiv --out "$dir/asdiv-$PHASE.jsonl" --csv "$dir/asdiv-$PHASE.csv" > "$dir/asdiv-$PHASE.log" 2>&1
    [ -f "$dir/gsms-$PHASE.csv" ] || "$BIN" eval --model "$model" "$@" --split all \
        --data "$GSMS/$PHASE.jsonl" --out "$dir/gsms-$PHASE.jsonl" --csv "$dir/gsms-$PHASE.csv" > "$dir/gsms-$PHASE.log" 2>&1
}

# strip_text FILE DEST: a per-question file without the question text (its id stays).
strip_text() {
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); r.pop("question", None); print(json.dumps(r))' "$1" > "$2"
}

# keep DIR DEST: the evaluation files of DIR without question text.
keep() {
    mkdir -p "$2"
    for f in "$1"/*-"$PHASE".jsonl; do strip_text "$f" "$2/$(basename "$f")"; done
    cp "$1"/*-"$PHASE".csv "$2/"
}

evaluate smollm2-135m "$OUT/base"
keep "$OUT/base" "$DATA/base"

for arm in $ARMS; do
    flags_var="FLAGS_$arm"
    read -r -a flags <<< "${!flags_var:-}"
    copies=(policy)
    [ "$arm" = cory ] && copies=(llm1 llm2)
    for seed in $SEEDS; do
        run="$OUT/$arm-$seed"
        # Done on another machine: its committed outputs are complete.
        [ -f "$DATA/$arm-$seed/summary.json" ] && [ ! -d "$run" ] && continue
        if [ ! -f "$run/summary.json" ]; then
            if [ -d "$run/checkpoints" ]; then
                args=(--resume "$run")
            else
                args=(--algo "$arm" --seed "$seed" --out "$run" "${flags[@]}")
            fi
            /usr/bin/time -v "$BIN" "${args[@]}" >> "$run.log" 2>&1
        fi
        for copy in "${copies[@]}"; do
            evaluate "$run" "$run/eval-$copy" --agent "$copy"
            keep "$run/eval-$copy" "$DATA/$arm-$seed/eval-$copy"
        done
        # The dev split's per-question files of the evaluations during training.
        mkdir -p "$DATA/$arm-$seed/eval-dev"
        for f in "$run"/eval-questions/*.jsonl; do strip_text "$f" "$DATA/$arm-$seed/eval-dev/$(basename "$f")"; done
        cp "$run"/{config.toml,metrics.csv,eval.csv,eval.md,summary.json} "$DATA/$arm-$seed/"
        grep -E "Elapsed|Maximum resident" "$run.log" > "$DATA/$arm-$seed/time.txt" || true
        # Keep only the evaluated (latest) checkpoint.
        ls -d "$run"/checkpoints/iter-* | head -n -1 | xargs -r rm -rf
    done
    # Every seed done so far (also by other runs of this script), not only this run's SEEDS.
    for copy in "${copies[@]}"; do
        for set in asdiv gsms; do
            b=()
            for f in "$DATA/$arm"-*/"eval-$copy/$set-$PHASE.jsonl"; do [ -f "$f" ] && b+=("$f"); done
            [ ${#b[@]} -gt 0 ] || continue
            clusters=()
            [ "$set" = gsms ] && clusters=(--clusters "$GSMS/$PHASE.jsonl")
            "$BIN" compare --a "$DATA/base/$set-$PHASE.jsonl" --b "${b[@]}" "${clusters[@]}" \
                --json "$DATA/compare/$arm-$copy-$set.json" > "$DATA/compare/$arm-$copy-$set.md"
        done
    done
done
