"""The change-data-capture benchmark's short form (bench/cdc.py): PostgreSQL, a node and a
Connect worker, one UPDATE read the three ways it measures, every change counted."""

from __future__ import annotations

from pathlib import Path

from bench import cdc


def test_the_cdc_bench_reads_every_change_three_ways(tmp_path: Path) -> None:
    out = cdc.measure(500, tmp_path)
    assert out["events_in_topic"] == 500  # one change event per updated row, no more
    cases = [r["case"] for r in out["results"]]
    assert cases[0] == "pg_recvlogical to /dev/null (baseline)"
    assert len(cases) == 3
    assert all(r["seconds"] > 0 for r in out["results"])
