"""Short forms of the client-side benchmarks (transactions, share groups, secured
listeners), so none rots unseen: each runs its real code at a small size and checks that
it measured what it says - every record written, read or committed - not how fast."""

from __future__ import annotations

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
    # what a read_committed reader sees: the warm-up and both measured runs; every
    # transaction's records
    assert out["committed"] == {"idem": 1_000 + 2 * 1_000, "txn-100": 1_000, "txn-10000": 1_000}


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
