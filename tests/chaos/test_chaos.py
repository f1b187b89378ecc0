"""The short fault schedule run by `make test`: one run of each topology with a fixed
seed (about three minutes). `make chaos RUNS=N SEED=S` runs more."""

from __future__ import annotations

import json

import pytest

from tests.chaos.run import print_report, run_once


@pytest.mark.parametrize(
    ("seed", "topology", "duration_s"),
    [(101, "split", 50.0), (202, "combined", 35.0)],
    ids=["split", "combined"],
)
def test_short_fault_schedule(seed: int, topology: str, duration_s: float) -> None:
    report = run_once(seed, topology, duration_s)
    print_report(report)
    assert report["faults"], "the nemesis injected nothing"
    assert report["writes"]["acked"] > 0, "nothing was acknowledged: the workload did not run"
    assert not report["anomalies"], json.dumps(report["anomalies"], indent=1, default=str)[:4000]
