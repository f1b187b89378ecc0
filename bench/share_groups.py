"""Share-group consumption (issue 28, KIP-932) on a single keeperless node with
confluent-kafka's ShareConsumer: 1, 2 and 4 share consumers reading one partition (every
record acquired, delivered once and accepted, the state written to __share_group_state
after each acknowledgement), beside a plain consumer group reading the same records in
the same run (the baseline: what per-record acquisition and acknowledgement cost).

    python bench/share_groups.py [--messages N] [--size BYTES]

Prints a table and writes bench/results/share-groups-<time>.json (its short form runs
in make test).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Node, keeperless  # noqa: E402

from bench._report import print_rates, write_result  # noqa: E402

TOPIC = "bench-share"
TIMEOUT_S = 300.0


def fill(bootstrap: str, n: int, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(n):
        while True:
            try:
                p.produce(TOPIC, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(60) == 0


def plain_group(bootstrap: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True})  # fmt: skip
    c.subscribe([TOPIC])
    got = 0
    t0 = 0.0
    deadline = time.monotonic() + TIMEOUT_S
    while got < n and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if m.error() is None:
                if not got:
                    t0 = time.perf_counter()
                got += 1
    elapsed = time.perf_counter() - t0
    c.close()
    assert got >= n, f"the plain group read {got} of {n}"
    return (got - 1) / elapsed


def share_group(bootstrap: str, n: int, consumers: int) -> float:
    group = f"share-{consumers}-{uuid.uuid4()}"
    keeperless("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type",
               "groups", "--entity-name", group, "--add-config",
               "share.auto.offset.reset=earliest", check=True)  # fmt: skip
    cs = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
          for _ in range(consumers)]  # fmt: skip
    for c in cs:
        c.subscribe([TOPIC])
    seen: set[int] = set()
    first: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + TIMEOUT_S

    def poll(c: ShareConsumer) -> None:  # a thread per consumer, as applications run them
        while len(seen) < n and time.monotonic() < deadline:
            got = [int(m.offset() or 0) for m in c.poll(0.1) or [] if m.error() is None]
            with lock:
                if got and not first:
                    first.append(time.perf_counter())
                seen.update(got)

    threads = [threading.Thread(target=poll, args=(c,)) for c in cs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - first[0] if first else 1.0
    for c in cs:
        c.commit_sync()
        c.close()
    assert len(seen) >= n, f"{consumers} share consumer(s) read {len(seen)} of {n}"
    return (len(seen) - 1) / elapsed


def measure(messages: int, size: int) -> dict[str, Any]:
    """Each group's rate on one new node, the consumer-group baseline before and after."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp))
        node.format(release="4.2")  # share.version 1
        node.start()
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
            fill(node.bootstrap, messages, b"x" * size)
            plain_group(node.bootstrap, messages)  # warm-up: the page cache
            base = plain_group(node.bootstrap, messages)
            rows.append(("consumer group, 1 consumer (baseline)", base))
            for k in (1, 2, 4):
                rows.append((f"share group, {k} consumer(s)",
                             share_group(node.bootstrap, messages, k)))  # fmt: skip
            again = plain_group(node.bootstrap, messages)
            rows.append(("consumer group again (the machine's drift)", again))
        finally:
            node.stop()
    return {"messages": messages, "size": size,
            "rows": [{"consumers": n, "msg_per_s": r, "vs_baseline": r / base}
                     for n, r in rows]}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args(argv)
    out = measure(args.messages, args.size)
    print(f"{args.messages:,} records of {args.size} bytes, one partition, one node")
    print_rates(out["rows"], "consumers", 3)
    write_result("share-groups", out)


if __name__ == "__main__":
    main()
