"""Transactional produce throughput (issue 16) of a single keeperless node with
confluent-kafka: transactions committed every 100 and every 10,000 records, beside
non-transactional idempotent produce of the same records in the same run (the
baseline: what transactions cost on top of it).

    python bench/transactions.py [--messages N] [--size BYTES]

Prints a table and writes bench/results/transactions-<time>.json (its short form runs in
make test).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Node  # noqa: E402

from bench._report import print_rates, write_result  # noqa: E402


def _send(p: Producer, topic: str, value: bytes, count: int) -> None:
    """``count`` records, waiting for room when librdkafka's queue is full."""
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)


def idempotent(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    p.produce(topic, value=value, partition=0)  # its connection and producer id, untimed
    assert p.flush(30) == 0  # (as init_transactions is for the transactional producer)
    t0 = time.perf_counter()
    _send(p, topic, value, n)
    assert p.flush(60) == 0
    return n / (time.perf_counter() - t0)


def transactional(bootstrap: str, topic: str, n: int, value: bytes, every: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{every}",
                  "linger.ms": 5})  # fmt: skip
    p.init_transactions(30)
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        p.begin_transaction()
        batch = min(every, n - sent)
        _send(p, topic, value, batch)
        sent += batch
        p.commit_transaction(60)
    return n / (time.perf_counter() - t0)


def written(bootstrap: str, topic: str) -> int:
    """Records a read_committed reader sees, read from the start up to the last stable
    offset (markers and aborted records aside)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check",
                  "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        c.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 0.5)
            seen += sum(1 for m in msgs if m.error() is None)
            if any(m.error() is not None and m.offset() >= end for m in msgs):
                break  # (the partition's end, reached)
        return seen
    finally:
        c.close()


def measure(messages: int, size: int) -> dict[str, Any]:
    """Each producer's rate on one new node, the idempotent baseline before and after."""
    value = b"x" * size
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp))
        node.format()
        node.start()
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            topics = ["idem", "txn-100", "txn-10000"]
            for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
                f.result(30)
            # warm-up (connections, the first segment, the node's caches), not measured
            idempotent(node.bootstrap, "idem", max(messages // 5, 1000), value)
            base = idempotent(node.bootstrap, "idem", messages, value)
            rows.append(("idempotent, no transactions (baseline)", base))
            for every in (100, 10_000):
                rate = transactional(node.bootstrap, f"txn-{every}", messages, value, every)
                rows.append((f"transactional, commit every {every:,}", rate))
            again = idempotent(node.bootstrap, "idem", messages, value)
            rows.append(("idempotent again (the machine's drift)", again))
            committed = {t: written(node.bootstrap, t) for t in topics}
        finally:
            node.stop()
    return {
        "messages": messages,
        "size": size,
        "rows": [{"producer": n, "msg_per_s": r, "vs_baseline": r / base} for n, r in rows],
        "committed": committed,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args(argv)
    out = measure(args.messages, args.size)
    for t, n in out["committed"].items():  # every record is there (and committed)
        assert n >= args.messages, f"{t}: {n} of {args.messages} committed"
    print(f"{args.messages:,} records of {args.size} bytes, one partition, one node")
    print_rates(out["rows"], "producer")
    write_result("transactions", out)


if __name__ == "__main__":
    main()
