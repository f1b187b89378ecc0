"""One benchmark of two revisions in the same run: a baseline revision (checked out in a
temporary git worktree) and this checkout, alternating (base, head, base, head...) so
that the machine's drift falls on both. Every number of the benchmark's JSON is
compared; the table shows each side's median and head/base.

    python bench/revisions.py --base <rev> [--bench throughput] [--rounds 2] [-- args]

Prints a table and writes bench/results/revisions-<bench>-<time>.json (its short form
runs in make test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._report import write_result  # noqa: E402


def _flat(value: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(_flat(v, f"{prefix}[{i}]"))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out[prefix] = float(value)
    return out


def _run(
    tree: Path, bench: str, extra: list[str], script_tree: Path | None = None
) -> dict[str, float]:
    """Run ``bench`` (of ``script_tree``, by default ``tree``) with the code of the tree
    at ``tree`` on PYTHONPATH, and read its JSON (from a directory of its own, or from
    the tree's bench/results for a revision whose benchmarks write only there)."""
    script_tree = script_tree or tree
    results = script_tree / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    before = set(results.glob("*.json"))
    with tempfile.TemporaryDirectory(prefix="kl-results-") as own:
        env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree}",
               "KEEPERLESS_BENCH_RESULTS": own}  # fmt: skip
        script = str(script_tree / "bench" / f"{bench}.py")
        subprocess.run([sys.executable, script, *extra], check=True, env=env, cwd=tree,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        mine = sorted(Path(own).glob("*.json"), key=lambda p: p.stat().st_mtime)
        if mine:
            return _flat(json.loads(mine[-1].read_text()))
    new = sorted(set(results.glob("*.json")) - before, key=lambda p: p.stat().st_mtime)
    if not new:
        raise RuntimeError(f"{bench} of {tree} wrote no result")
    data = json.loads(new[-1].read_text())
    if tree != ROOT or script_tree != ROOT:
        new[-1].unlink()
    return _flat(data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base", required=True, help="the baseline revision (a commit, a tag)")
    ap.add_argument("--bench", default="throughput", help="a bench/<name>.py")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--script-from-head", action="store_true",
                    help="run this checkout's benchmark script on both (a script that rotted "
                    "at the baseline, driving the code through interfaces both have)")  # fmt: skip
    ap.add_argument("extra", nargs="*", help="the benchmark's own arguments (after --)")
    args = ap.parse_args(argv)

    def rev(name: str) -> str:
        cmd = ["git", "-C", str(ROOT), "rev-parse", "--short", name]
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()

    base_rev, head_rev = rev(args.base), rev("HEAD")
    tmp = Path(tempfile.mkdtemp(prefix="kl-base-"))
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), base_rev],
                   check=True, capture_output=True)  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    try:
        for _ in range(args.rounds):
            script_tree = ROOT if args.script_from_head else None
            runs["base"].append(_run(tree, args.bench, args.extra, script_tree))
            runs["head"].append(_run(ROOT, args.bench, args.extra))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)  # fmt: skip
    keys = [k for k in runs["head"][0] if all(k in r for r in runs["base"] + runs["head"])]
    rows = []
    for k in keys:
        b = statistics.median(r[k] for r in runs["base"])
        h = statistics.median(r[k] for r in runs["head"])
        rows.append({"metric": k, "base": b, "head": h, "head_vs_base": h / b if b else None})
    print(f"{args.bench}: base {base_rev} vs head {head_rev}, median of {args.rounds} runs each")
    print(f"{'metric':<58} {'base':>12} {'head':>12} {'head/base':>10}")
    for row in rows:
        ratio = f"{row['head_vs_base']:.2f}" if row["head_vs_base"] is not None else "-"
        print(f"{row['metric'][:58]:<58} {row['base']:>12.4g} {row['head']:>12.4g} {ratio:>10}")
    summary = {"bench": args.bench, "base": base_rev, "head": head_rev,
               "rounds": args.rounds, "rows": rows, "runs": runs}  # fmt: skip
    write_result(f"revisions-{args.bench}", summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
