"""The short fault schedule run by `make test`: one run of each topology with a fixed
seed, each writing and reading back 48 MB of large values (3 read windows per partition
of the bulk topic); the combined one (seed 3 modulo 4) starts with share groups on and
runs the share-group workload. `make chaos RUNS=N SEED=S` runs more, at 300 MB a run."""

from __future__ import annotations

import json

import pytest

from tests.chaos.run import print_report, run_once


@pytest.mark.parametrize(
    ("seed", "topology", "duration_s"),
    [(101, "split", 50.0), (203, "combined", 35.0)],
    ids=["split", "combined"],
)
def test_short_fault_schedule(seed: int, topology: str, duration_s: float) -> None:
    report = run_once(seed, topology, duration_s, volume_mb=48)
    print_report(report)
    assert report["faults"], "the nemesis injected nothing"
    assert report["writes"]["acked"] > 0, "nothing was acknowledged: the workload did not run"
    assert report["volume"]["read_bytes"] >= 48 << 20, "the volume was not written and read"
    if seed % 4 == 3:
        assert report["share"]["accepted"] > 0, "the share-group workload did not run"
    assert not report["anomalies"], json.dumps(report["anomalies"], indent=1, default=str)[:4000]
