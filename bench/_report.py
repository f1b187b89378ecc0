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
