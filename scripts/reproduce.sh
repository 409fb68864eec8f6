#!/usr/bin/env bash
# Reruns a committed run from its config.toml alone and checks that this build gives the same
# first rows: every (iteration, copy) row of the first N iterations must match the committed
# metrics.csv in task_reward and kl within TOL (absolute). A build with other kernels samples
# other tokens, so a mismatch means "rerun the sweep at this commit", not necessarily a bug.
#
#   scripts/reproduce.sh docs/results/data/main/ppo-kl0.3-seed0 [N=2]     (TOL=1e-3 by default)
#
# The app is chosen by the config's task section ([imdb] or [gsm8k]); the rerun goes to a
# temporary directory, removed afterwards. Exit 0 when every compared value is within TOL, 1
# when one is not, 2 on bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:?usage: scripts/reproduce.sh RUN_DIR [N]}
N=${2:-2}
TOL=${TOL:-1e-3}
CONFIG="$RUN/config.toml"
[ -f "$CONFIG" ] && [ -f "$RUN/metrics.csv" ] || {
    echo "reproduce: $RUN needs config.toml and metrics.csv" >&2
    exit 2
}
if grep -q '^\[imdb\]' "$CONFIG"; then app=imdb-app
elif grep -q '^\[gsm8k\]' "$CONFIG"; then app=gsm8k-app
else echo "reproduce: $CONFIG has neither an [imdb] nor a [gsm8k] section" >&2; exit 2
fi
made_by=$(grep -m1 -oE '(^commit = "[0-9a-f]+"|commit [0-9a-f]{7,40})' "$CONFIG" | grep -oE '[0-9a-f]{7,40}' || echo unknown)
echo "reproduce: $RUN (made by commit $made_by) with $app at $(git rev-parse --short HEAD), $N iterations" >&2
cargo build --release -q -p "$app"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"target/release/$app" --config "$CONFIG" --iterations "$N" --out "$out/run" > "$out/log" 2>&1 || {
    tail -20 "$out/log" >&2
    echo "reproduce: the rerun failed (log above)" >&2
    exit 1
}
python3 - "$RUN/metrics.csv" "$out/run/metrics.csv" "$N" "$TOL" <<'EOF'
import csv, sys
committed, rerun, n, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def rows(path):
    with open(path) as f:
        return {(int(r["iteration"]), r["agent"]): r for r in csv.DictReader(f) if int(r["iteration"]) < n}
a, b = rows(committed), rows(rerun)
if a.keys() != b.keys():
    sys.exit(f"reproduce: the rows differ: committed {sorted(a)} rerun {sorted(b)}")
worst = 0.0
for key in sorted(a):
    for col in ("task_reward", "kl"):
        d = abs(float(a[key][col]) - float(b[key][col]))
        worst = max(worst, d)
        flag = "" if d <= tol else "   <- over"
        print(f"iteration {key[0]:>3} {key[1]:<7} {col:<11} committed {float(a[key][col]):+.6f} rerun {float(b[key][col]):+.6f} |Δ| {d:.2e}{flag}")
print(f"max |Δ| {worst:.2e} (tolerance {tol:g}): {'reproduced' if worst <= tol else 'NOT reproduced'}")
sys.exit(0 if worst <= tol else 1)
EOF
