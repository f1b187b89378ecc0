"""Where every benchmark writes its results: ``bench/results/<name>-<time>.json``, with
the commit it measured (or the directory ``KEEPERLESS_BENCH_RESULTS`` names: the short
forms ``make test`` runs write theirs there)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def write_result(name: str, out: dict[str, Any]) -> Path:
    """Write ``out`` (with the measured commit added as ``git``) and say where."""
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    results = Path(os.environ.get("KEEPERLESS_BENCH_RESULTS") or ROOT / "bench" / "results")
    results.mkdir(exist_ok=True)
    path = results / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps({**out, "git": git}, indent=2))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def print_rates(rows: list[dict[str, Any]], key: str, digits: int = 2) -> None:
    """A table of ``rows`` (each with ``key``, ``msg_per_s`` and ``vs_baseline``)."""
    width = max(len(key), *(len(str(r[key])) for r in rows)) + 2
    print(f"{key:<{width}} {'msg/s':>10} {'vs baseline':>12}")
    for r in rows:
        print(f"{r[key]:<{width}} {r['msg_per_s']:>10,.0f} {r['vs_baseline']:>11.{digits}f}x")
