#!/usr/bin/env python3
"""The math protocol's results as markdown tables, from what scripts/gsm8k-protocol.sh keeps.

    python3 scripts/gsm8k_protocol_table.py [docs/results/data/gsm8k-protocol/test]

One table per arm and copy: each seed's pass@1 on both test sets with the difference to the
base model, the discordant counts and McNemar's p; then the comparison over seeds (`compare`'s
JSON: mean difference, t interval over seeds, bootstrap interval over questions or templates).
"""

import json
import sys
from pathlib import Path

SETS = [("asdiv", "ASDiv test"), ("gsms", "GSM-Symbolic test")]


def load(path):
    return json.loads(path.read_text()) if path.is_file() else None


def fmt_ci(ci):
    return "–" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def main():
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/data/gsm8k-protocol/test")
    for cmp_file in sorted((data / "compare").glob("*-asdiv.json")):
        stem = cmp_file.name[: -len("-asdiv.json")]
        if "-vs-" in stem:  # one arm against another, not against the base model
            continue
        arm, copy = stem.rsplit("-", 1)
        print(f"**{arm.upper()}, {copy}**\n")
        print("| seed | " + " | ".join(f"{name}: pass@1 (base → after), only base / only after, McNemar p" for _, name in SETS) + " |")
        print("|---:|" + "---|" * len(SETS))
        comps = {key: load(data / "compare" / f"{stem}-{key}.json") for key, _ in SETS}
        seeds = sorted({Path(s["b"]).parts[-3] for c in comps.values() if c for s in c["seeds"]})
        for seed in seeds:
            cells = []
            for key, _ in SETS:
                c = comps[key]
                row = next((s for s in c["seeds"] if Path(s["b"]).parts[-3] == seed), None) if c else None
                if row is None:
                    cells.append("–")
                    continue
                only_a, only_b = row["discordant"] or (None, None)
                cells.append(
                    f"{row['pass_at_1_a']:.3f} → {row['pass_at_1_b']:.3f} ({row['difference']:+.3f}), "
                    f"{only_a} / {only_b}, p = {row['mcnemar_p']:.2f}"
                )
            print(f"| {seed.rsplit('-', 1)[1]} | " + " | ".join(cells) + " |")
        print()
        for key, name in SETS:
            c = comps[key]
            if not c:
                continue
            unit = "templates" if c["clusters"] < c["questions"] else "questions"
            print(
                f"- {name} ({c['questions']} questions, {len(c['seeds'])} seeds): mean difference "
                f"{c['mean_difference']:+.4f}; 95 % interval over seeds (t) {fmt_ci(c['seeds_t_ci95'])}; "
                f"over {unit} (bootstrap of the seed mean) {fmt_ci(c['questions_ci95'])}"
            )
        print()


if __name__ == "__main__":
    main()
