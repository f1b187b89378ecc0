"""Replicated produce and end-to-end latency on a 3-broker cluster (issue 30, item 6),
against baselines measured in the same run:

1. throughput, acks=all, 100 B and 1 KiB records into 6 partitions: replication factor
   3 (min.insync.replicas 2) beside replication factor 1 on the same cluster, and the
   raw loopback socket pushing the same bytes (the ceiling of anything on this machine);
   Kafka's 2014 figure for 3x synchronous replication of 100 B records on 6-core
   machines was 421,823 records/s (Jay Kreps, "Benchmarking Apache Kafka");
2. end-to-end latency at a fixed rate below saturation, OpenMessaging Benchmark style:
   1 topic of 100 partitions (replication factor 3), 1 KiB records, 4 producers and 4
   consumers (one group), each record carrying its send time; p50/p99/p99.9/max of the
   time from send to receipt.

    python bench/replicated.py [--records-100 N] [--records-1k N] [--rate R] [--seconds S]

One dedicated controller and three brokers, all on this machine with the clients.
Prints a table and writes bench/results/replicated-<time>.json.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Cluster, wait_until  # noqa: E402

from bench._report import write_result  # noqa: E402
from bench.throughput import produce, socket_baseline  # noqa: E402

KAFKA_2014_RF3 = 421_823  # records/s, 100 B, 3x synchronous replication, 6 partitions


def create(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if rf >= 3 else {}
    admin.create_topics([NewTopic(name, partitions, rf, config=config)])[name].result(30)

    def ready() -> bool:
        md = admin.list_topics(name, timeout=5).topics[name]
        return len(md.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()
        )

    wait_until(ready, 60, what=f"{name}: every partition led, {rf} in sync")


def latency(bootstrap: str, topic: str, rate: int, seconds: float, size: int = 1024,
            producers: int = 4, consumers: int = 4) -> dict[str, Any]:  # fmt: skip
    """Send ``rate`` records/s in all for ``seconds`` (the first fifth a warm-up, not
    counted), each stamped with CLOCK_MONOTONIC (one clock for every process here);
    the consumers note the time each arrives."""
    stop = threading.Event()
    lat_ns: list[int] = []
    sent = [0]
    got = [0]
    lock = threading.Lock()
    assigned = [0] * consumers  # partitions each consumer holds now
    warm_until = [0]

    def consume(i: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{topic}",
                      "auto.offset.reset": "latest", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 100})  # fmt: skip
        c.subscribe([topic])
        mine: list[int] = []
        while not stop.is_set():
            m = c.poll(0.1)  # (consume(n, t) waits to fill n or for all of t)
            if m is not None and not m.error():
                now = time.monotonic_ns()
                (stamp,) = struct.unpack_from(">q", m.value() or b"")
                if stamp >= warm_until[0]:
                    mine.append(now - stamp)
                with lock:
                    got[0] += 1
            assigned[i] = len(c.assignment())  # (it keeps polling: a rebalance needs it)
        c.close()
        with lock:
            lat_ns.extend(mine)

    def produce_at(i: int, per_s: float, until: float) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
        pad = b"x" * (size - 8)
        interval = 1.0 / per_s
        nxt = time.monotonic()
        n = 0
        while nxt < until:
            now = time.monotonic()
            if now < nxt:
                p.poll(min(nxt - now, 0.01))
                continue
            p.produce(topic, value=struct.pack(">q", time.monotonic_ns()) + pad)
            p.poll(0)
            n += 1
            nxt += interval
        p.flush(30)
        with lock:
            sent[0] += n

    cs = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(consumers)]
    for t in cs:
        t.start()
    try:
        wait_until(lambda: sum(assigned) == 100 and all(assigned), 90,
                   what="every consumer in the group, every partition assigned")  # fmt: skip
        time.sleep(2)  # (the last assignment's positions fetched)
        start = time.monotonic()
        warm_until[0] = int((start + seconds / 5) * 1e9)
        until = start + seconds
        ps = [threading.Thread(target=produce_at, args=(i, rate / producers, until))
              for i in range(producers)]  # fmt: skip
        for t in ps:
            t.start()
        for t in ps:
            t.join()
        wait_until(lambda: got[0] >= sent[0], 30, what="every record consumed")
    finally:
        stop.set()
        for t in cs:
            t.join(30)
    lat = sorted(lat_ns)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1e6 if lat else float("nan")

    return {"rate": rate, "seconds": seconds, "sent": sent[0], "received": got[0],
            "measured": len(lat), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "p999_ms": pct(0.999), "max_ms": lat[-1] / 1e6 if lat else float("nan")}  # fmt: skip


def run(workdir: Path, n100: int, n1k: int, rate: int, seconds: float) -> dict[str, Any]:
    cluster = Cluster(workdir, controllers=1, brokers=3)
    cluster.start()
    try:
        boot = cluster.bootstrap
        out: dict[str, Any] = {"throughput": {}, "kafka_2014_rf3_100b": KAFKA_2014_RF3}
        for size, n in ((100, n100), (1024, n1k)):
            row: dict[str, float] = {}
            row["loopback_mb_s"] = socket_baseline(max(64 << 20, n * size), 1 << 20) / 1e6
            for rf in (1, 3):
                topic = f"rf{rf}-{size}"
                create(boot, topic, 6, rf)
                row[f"rf{rf}_records_s"] = produce(boot, topic, n, size)
            row["rf3_mb_s"] = row["rf3_records_s"] * size / 1e6
            row["rf3_of_rf1"] = row["rf3_records_s"] / row["rf1_records_s"]
            out["throughput"][str(size)] = row
        create(boot, "latency", 100, 3)
        out["latency"] = latency(boot, "latency", rate, seconds)
        out["tansu"] = (
            "not run: no tansu binary on this machine"
            if not shutil.which("tansu")
            else "not run: tansu found, not wired into this bench"
        )
        return out
    finally:
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records-100", type=int, default=300_000)
    ap.add_argument("--records-1k", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=2_000, help="records/s, all producers")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="replicated-bench-"))
    try:
        out = run(workdir, args.records_100, args.records_1k, args.rate, args.seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{'record':>7} {'loopback MB/s':>14} {'RF1 rec/s':>11} {'RF3 rec/s':>11} "
          f"{'RF3 MB/s':>9} {'RF3/RF1':>8}")  # fmt: skip
    for size, r in out["throughput"].items():
        print(
            f"{size + ' B':>7} {r['loopback_mb_s']:>14,.0f} {r['rf1_records_s']:>11,.0f} "
            f"{r['rf3_records_s']:>11,.0f} {r['rf3_mb_s']:>9,.1f} {r['rf3_of_rf1']:>8.2f}"
        )
    print(f"Kafka 2014, RF 3, 100 B, 6-core machines: {KAFKA_2014_RF3:,} records/s")
    lat = out["latency"]
    print(f"end-to-end at {lat['rate']:,} records/s of 1 KiB, 100 partitions, RF 3, 4+4 "
          f"clients: p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, p99.9 "
          f"{lat['p999_ms']:.2f} ms, max {lat['max_ms']:.2f} ms "
          f"({lat['measured']:,} records measured of {lat['received']:,})")  # fmt: skip
    print(f"tansu: {out['tansu']}")
    write_result("replicated", out)


if __name__ == "__main__":
    main()
