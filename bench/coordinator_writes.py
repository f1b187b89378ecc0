"""Writes through the coordinator runtime (issue 28) on a 3-broker cluster, every
coordinator's state on one partition of its topic (replication factor 3,
min.insync.replicas 2), against a baseline measured in the same run:

1. commits: N clients, each committing its own group's offset (a simple commit, one
   partition) again and again, each waiting for its answer - commits/s and the latency
   of one commit (the group coordinator: one record and a wait for the replicas);
2. transactions: N transactional producers, each beginning a transaction, sending one
   record and committing, again and again - transactions/s and the latency of one
   (the transaction coordinator: AddPartitions, PrepareCommit and CompleteCommit
   records, each waited for, and the markers);
3. baseline: N producers, each sending one 100 B record with acks=all to a 1-partition
   topic of replication factor 3 (min.insync.replicas 2) and waiting for it - one
   append and wait for the in-sync replicas, without a coordinator.

A coordinator that holds a partition's writes one at a time across the wait for the
replicas answers about one write per replication round trip whatever N is; one that
pipelines them (appends the next while the last waits) scales with N as the produce
baseline does.

    python bench/coordinator_writes.py [--clients N ...] [--seconds S]

Prints a table and writes bench/results/coordinator-writes-<time>.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from tests.integration.cluster import Cluster  # noqa: E402

from bench._report import write_result  # noqa: E402
from bench.replicated import create  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _drive(n: int, seconds: float, make: Callable[[int], Callable[[int], None]]) -> dict[str, Any]:
    """N threads, each calling its operation until ``seconds`` have passed (bounded):
    operations/s over all and per-operation latency percentiles (ms)."""
    ops = [make(i) for i in range(n)]
    for op in ops:
        op(0)  # warm: connections, coordinator lookups
    lat: list[list[float]] = [[] for _ in range(n)]
    start = time.monotonic()
    end = start + seconds

    def loop(i: int) -> None:
        k = 1
        while (now := time.monotonic()) < end and k < 1_000_000:
            ops[i](k)
            lat[i].append((time.monotonic() - now) * 1000)
            k += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - start
    every = [x for xs in lat for x in xs]
    return {"clients": n, "per_s": len(every) / took, "p50_ms": _pct(every, 0.5),
            "p99_ms": _pct(every, 0.99), "count": len(every)}  # fmt: skip


def commits(boot: str, topic: str, n: int, seconds: float) -> dict[str, Any]:
    consumers: list[Consumer] = []

    def make(i: int) -> Callable[[int], None]:
        c = Consumer({"bootstrap.servers": boot, "group.id": f"bench-{n}-{i}",
                      "enable.auto.commit": False})  # fmt: skip
        consumers.append(c)

        def commit(k: int) -> None:
            c.commit(offsets=[TopicPartition(topic, 0, k)], asynchronous=False)

        return commit

    try:
        return _drive(n, seconds, make)
    finally:
        for c in consumers:
            c.close()


def transactions(boot: str, topic: str, n: int, seconds: float) -> dict[str, Any]:
    producers: list[Producer] = []

    def make(i: int) -> Callable[[int], None]:
        p = Producer({"bootstrap.servers": boot, "transactional.id": f"bench-{n}-{i}",
                      "linger.ms": 0})  # fmt: skip
        p.init_transactions(30)
        producers.append(p)

        def one(_k: int) -> None:
            p.begin_transaction()
            p.produce(topic, b"x" * 100, partition=0)
            p.commit_transaction(30)

        return one

    try:
        return _drive(n, seconds, make)
    finally:
        for p in producers:
            p.flush(10)


def produces(boot: str, topic: str, n: int, seconds: float) -> dict[str, Any]:
    value = b"x" * 100

    def make(i: int) -> Callable[[int], None]:
        p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 0,
                      "enable.idempotence": False})  # fmt: skip

        def send(_k: int) -> None:
            p.produce(topic, value, partition=0)
            if p.flush(30) != 0:
                raise RuntimeError("a record not acknowledged within 30 s")

        return send

    return _drive(n, seconds, make)


def run(workdir: Path, clients: list[int], seconds: float) -> dict[str, Any]:
    cluster = Cluster(workdir, controllers=1, brokers=3, extra={
        "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.num.partitions": "1", "transaction.state.log.min.isr": "2",
        "min.insync.replicas": "2"})  # fmt: skip
    cluster.start()
    try:
        boot = cluster.bootstrap
        create(boot, "committed", 1, 3)
        create(boot, "baseline", 1, 3)
        create(boot, "transactional", 1, 3)
        rows = []
        for n in clients:
            c = commits(boot, "committed", n, seconds)
            t = transactions(boot, "transactional", n, seconds)
            p = produces(boot, "baseline", n, seconds)
            rows.append({"clients": n, "commits": c, "transactions": t, "produce_acks_all": p,
                         "commits_of_produce": c["per_s"] / p["per_s"]})  # fmt: skip
        return {"rows": rows, "seconds": seconds}
    finally:
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="coordinator-writes-bench-"))
    try:
        out = run(workdir, args.clients, args.seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{'clients':>7} {'commits/s':>10} {'p50 ms':>7} {'p99 ms':>7}   "
          f"{'txns/s':>7} {'p50 ms':>7} {'p99 ms':>7}   "
          f"{'acks=all produce/s':>18} {'p50 ms':>7} {'p99 ms':>7}")  # fmt: skip
    for r in out["rows"]:
        c, t, p = r["commits"], r["transactions"], r["produce_acks_all"]
        print(f"{r['clients']:>7} {c['per_s']:>10,.0f} {c['p50_ms']:>7.2f} {c['p99_ms']:>7.2f}   "
              f"{t['per_s']:>7,.0f} {t['p50_ms']:>7.2f} {t['p99_ms']:>7.2f}   "
              f"{p['per_s']:>18,.0f} {p['p50_ms']:>7.2f} {p['p99_ms']:>7.2f}")  # fmt: skip
    write_result("coordinator-writes", out)


if __name__ == "__main__":
    main()
