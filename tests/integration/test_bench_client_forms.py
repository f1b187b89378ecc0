"""Short forms of the client-side benchmarks (transactions, share groups, secured
listeners, partition moves), so none rots unseen: each runs its real code at a small
size and checks that it measured what it says - every record written, read, committed or
moved - not how fast."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import security, share_groups, transactions


def test_the_transactions_bench_commits_every_record_each_way() -> None:
    out = transactions.measure(1_000, 50)
    assert [r["producer"] for r in out["rows"]] == [
        "idempotent, no transactions (baseline)",
        "transactional, commit every 100",
        "transactional, commit every 10,000",
        "idempotent again (the machine's drift)",
    ]
    assert all(r["msg_per_s"] > 0 for r in out["rows"])
    # what a read_committed reader sees: the warm-up and both measured runs (and each
    # producer's first, untimed record); every transaction's records
    assert out["committed"] == {"idem": 3 * 1_001, "txn-100": 1_000, "txn-10000": 1_000}


def test_the_share_groups_bench_reads_every_record_in_each_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(share_groups, "TIMEOUT_S", 60.0)  # (a group that stops reading)
    out = share_groups.measure(300, 50)
    assert [r["consumers"] for r in out["rows"]] == [
        "consumer group, 1 consumer (baseline)",
        "share group, 1 consumer(s)",
        "share group, 2 consumer(s)",
        "share group, 4 consumer(s)",
        "consumer group again (the machine's drift)",
    ]
    assert all(r["msg_per_s"] > 0 for r in out["rows"])  # (each asserts it read them all)


def test_the_security_bench_serves_every_listener() -> None:
    out = security.measure(500, 100)
    listeners = out["listeners"]
    assert set(listeners) == {
        "PLAINTEXT (baseline)", "SSL", "SASL_PLAINTEXT (SCRAM)", "SASL_SSL (SCRAM)"
    }  # fmt: skip
    for name, r in listeners.items():
        assert r["unsent"] == 0, name
        assert r["consumed"] == 500, name
        assert r["new_client_ms"] > 0, name


def test_the_reassign_bench_moves_the_partition_every_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import reassign

    monkeypatch.setattr(reassign, "MOVE_TIMEOUT_S", 120.0)
    out = reassign.measure(4, 4, tmp_path)  # 4 MB, throttled at 4 MB/s
    assert out["bytes"] >= 4 << 20
    assert out["replicas_at_the_end"] == [4]
    assert out["bytes_at_the_end"] == out["bytes"], "the moved copy is the whole log"
    cases = [r["case"] for r in out["rows"]]
    assert cases[0] == "file copy (baseline)"
    assert len(cases) == 5
    assert all(r["seconds"] > 0 for r in out["rows"])


def test_the_fuzz_bench_decodes_every_input_and_the_node_survives(tmp_path: Path) -> None:
    from bench import fuzz

    dec = fuzz.decoding(3_000, 1)
    assert dec["decoded"] + dec["refused"] + dec["crashed"] == 3_000  # type: ignore[operator]
    assert dec["crashed"] == 0, dec["examples"]
    assert dec["refused"] > 0  # (mutated frames: some are refused)
    node = fuzz.live(300, 1, tmp_path)
    assert node["sent"] + node["connections_closed_by_node"] == 300  # type: ignore[operator]
    assert node["node_alive"] is True
    assert node["produce_after"] is True


def test_the_revisions_bench_compares_a_bench_of_two_trees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from bench import revisions

    monkeypatch.setenv("KEEPERLESS_BENCH_RESULTS", str(tmp_path))
    argv = ["--base", "HEAD", "--bench", "fuzz", "--rounds", "1", "--",
            "--inputs", "300", "--socket-inputs", "30"]  # fmt: skip
    assert revisions.main(argv) == 0
    (path,) = tmp_path.glob("revisions-fuzz-*.json")  # (the two fuzz runs left none)
    out = json.loads(path.read_text())
    assert out["base"] == out["head"]
    metrics = {r["metric"]: r for r in out["rows"]}
    assert metrics["decoding.inputs"]["base"] == metrics["decoding.inputs"]["head"] == 300
    assert metrics["live_node.inputs"]["head"] == 30
