"""Short forms of the benchmarks no other test runs, so none rots unseen: bench/quorum.py
and bench/controller_scale.py had both stopped running (a removed client method; simulated
brokers refused with INCONSISTENT_CLUSTER_ID once registrations carried the cluster id)
and nothing noticed. Each runs its real code at a small size and checks that it measured
what it says, not how fast (tests assert behaviour)."""

from __future__ import annotations

from pathlib import Path

from bench import controller_scale, quorum


def test_the_quorum_bench_measures_commits_and_a_failover(tmp_path: Path) -> None:
    one = quorum.one_voter(tmp_path / "one", 30, 0)
    assert one["records_per_s"] > 0
    three = quorum.three_voters(tmp_path / "three", 30, 1, 25)
    assert three["records_per_s"] > 0  # type: ignore[operator]
    assert len(three["failover_ms_all"]) == 1  # type: ignore[arg-type]


def test_the_controller_scale_bench_runs_every_phase() -> None:
    args = controller_scale.parse(["--topics", "40", "--partitions", "3", "--per-request", "10"])
    out = controller_scale.run(args)
    assert out["partitions_per_s"] > 0
    assert out["broker_load_to_unfenced_s"] >= 0
    # a simulated broker led a third of the partitions and shut down in a controlled way;
    # another failed: both moved their leaderships, seen by a real broker
    assert out["controlled_shutdown_leaderships"] > 0
    assert out["uncontrolled_leaderships"] > 0
    assert out["controller_failover_s"] >= 0
    assert out["elections"] >= 0
    assert "restart_snapshot_load_s" in out  # (the broker restarted and was unfenced)


def test_the_zookeeper_migration_bench_reads_parses_and_writes_everything() -> None:
    from bench import zk_migration

    out = zk_migration.run(100, 3)  # ~900 znodes: past 3x the reader's 250 at a time
    assert out["partitions"] == 300
    assert out["znodes_written"] > 3 * 250
    assert out["znodes_read_by_client_alone"] == out["znodes_written"]
    assert out["records"] == 100 + 300 + 100 + 1  # topics, partitions, configs, migration state
    assert out["client_alone_s"] > 0
    assert out["migration_s"] > 0


def test_the_cleaner_bench_cleans_and_merges_segments(tmp_path: Path) -> None:
    from bench import cleaner

    out = cleaner.cleaning(tmp_path, 20)  # 20 MB: three 8 MiB segments, two cleanable
    assert 0 < out["records_kept"] < out["records_read"]  # type: ignore[operator]
    assert out["segments_cleaned"] == 2
    assert out["segments_written"] == 1  # cleaned into one, under segment.bytes
    assert out["cleaner_mb_per_s"] > 0  # type: ignore[operator]
    assert out["copy_mb_per_s"] > 0  # type: ignore[operator]


def test_the_restart_bench_opens_every_log_whole_each_way(tmp_path: Path) -> None:
    from bench import restart

    out = restart.measure(tmp_path, 3, 3, 16, 1, 1)  # 3 segments of 1 MiB a partition
    assert out["mb"] >= 9  # type: ignore[operator]
    rows = out["results"]
    assert isinstance(rows, dict)
    assert set(rows) == {"read every byte", "clean stop", "crash"}
    assert all(r["best_s"] > 0 for r in rows.values())


def test_the_coordinator_writes_bench_measures_each_beside_produce(tmp_path: Path) -> None:
    from bench import coordinator_writes

    out = coordinator_writes.run(tmp_path, [2], 1.0)
    (row,) = out["rows"]
    assert row["commits"]["count"] > 0
    assert row["transactions"]["count"] > 0
    assert row["produce_acks_all"]["count"] > 0


def test_the_throughput_bench_measures_both_sizes_and_the_loop(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "bench/throughput.py", "--messages-100", "3000", "--messages-1k",
         "1000", "--clients-nice", "0", "--idle-s", "0.5"],
        cwd=root, env={**os.environ, "KEEPERLESS_BENCH_RESULTS": str(tmp_path)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (path,) = tmp_path.glob("throughput-*.json")
    out = json.loads(path.read_text())
    rows = out["rows"]
    assert [(r["message_bytes"], r["partitions"]) for r in rows] == [
        (100, 1), (100, 6), (1024, 1), (1024, 6)
    ]  # fmt: skip
    assert all(r["produce_msgs_per_s"] > 0 for r in rows)
    assert all(r["consume_msgs_per_s"] > 0 for r in rows)
    assert out["event_loop_lag_samples"] > 0  # the node's histogram, under the load
    assert out["api_versions_rtt_under_load"]["samples"] > 0  # the probe's round trips
    assert out["event_loop_waited_for_a_core_s"] >= 0


def test_the_replicated_bench_measures_rf3_and_end_to_end_latency(tmp_path: Path) -> None:
    from bench import replicated

    out = replicated.run(tmp_path, 1_000, 500, 200, 2.0)
    for size in ("100", "1024"):
        row = out["throughput"][size]
        assert row["rf1_records_s"] > 0
        assert row["rf3_records_s"] > 0
    lat = out["latency"]
    assert lat["received"] >= lat["sent"] > 0
    assert lat["measured"] > 0
    assert lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"]
