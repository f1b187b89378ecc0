"""Soak: sustained acks=all produce into RF 3 topics with a consumer group reading along,
and the whole cluster (3 controllers, 3 brokers) stopped and started again every so
often - the shape of a cluster's life the short tests never reach (issue 23: every
restart lost records once a segment passed 8 MiB).

    python bench/soak.py [--minutes 120] [--restart-every-s 300] [--rate 4000] [--size 1024]

The short form (``--minutes 0.6 --restart-every-s 12``) is what CI runs
(tests/integration/test_soak.py). Reported:

* acknowledged vs read back (and lost, duplicated): the property, 0 lost;
* each restart's recovery time (SIGTERM of every node to every partition led and its
  ISR full again) against the size of the logs it recovered, beside the same run's
  baseline: the first restart, of an empty cluster;
* each node's RSS over time (first and last sample, and the largest);
* produce and consume rates.

Prints a table and writes bench/results/soak-<time>.json. Every loop is bounded by the
duration given; traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Cluster, Node  # noqa: E402

TOPICS = ("soak-0", "soak-1")
PARTITIONS = 3
GROUP = "soak-g"


class Seen:
    """One bit per sequence number: acknowledged, and read back (a bitmap: hours of
    writes fit in a few MB)."""

    def __init__(self) -> None:
        self.bits = bytearray()
        self.lock = threading.Lock()

    def add(self, seq: int) -> bool:
        """Set the bit; False if it was set already."""
        with self.lock:
            i, b = divmod(seq, 8)
            if i >= len(self.bits):
                self.bits.extend(bytes(i + 1 - len(self.bits) + 4096))
            was = self.bits[i] >> b & 1
            self.bits[i] |= 1 << b
            return not was

    def count(self) -> int:
        return sum(bin(x).count("1") for x in self.bits)

    def missing_from(self, other: Seen) -> list[int]:
        """Sequence numbers set in ``other`` but not here (the first thousand)."""
        out = []
        for i, x in enumerate(other.bits):
            mine = self.bits[i] if i < len(self.bits) else 0
            gone = x & ~mine
            while gone and len(out) < 1000:
                b = (gone & -gone).bit_length() - 1
                out.append(i * 8 + b)
                gone &= gone - 1
        return out


def rss_mb(node: Node) -> float | None:
    if node.proc is None or node.proc.poll() is not None:
        return None
    try:
        for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def dir_mb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, f)).st_size
    return total / 2**20


def full_isr(bootstrap: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=5)
    return all(
        pm.leader >= 0 and set(pm.isrs) == set(pm.replicas)
        for name in TOPICS
        if name in md.topics
        for pm in md.topics[name].partitions.values()
    ) and all(name in md.topics for name in TOPICS)


def restart_all(c: Cluster, timeout_s: float = 180.0) -> float:
    """Stop every node as Kafka's runbook does a full restart - the brokers together
    (each a controlled shutdown), then the controllers - and start them again,
    controllers first; seconds from the first SIGTERM until every partition is led with
    its ISR full. (Stopped all at once, a broker finds no controller for its controlled
    shutdown and its next start waits out its old session: the fault harness does that.)"""
    nodes = [*c.brokers.values(), *c.controllers.values()]
    t0 = time.monotonic()
    for group in (c.brokers.values(), c.controllers.values()):
        for n in group:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.terminate()
        for n in group:
            n.stop()
    for n in c.controllers.values():
        n.start_background()
    for n in c.brokers.values():
        n.start_background()
    for n in nodes:
        n.wait_listening(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if full_isr(c.bootstrap):
                return time.monotonic() - t0
        except Exception:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the cluster did not recover within {timeout_s} s")


def produce(bootstrap: str, rate: float, size: int, stop: threading.Event, acked: Seen,
            stats: dict[str, Any]) -> None:  # fmt: skip
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 300_000,
                  "queue.buffering.max.kbytes": 64 * 1024})  # fmt: skip
    pad = b"x" * max(size - 12, 0)

    def cb(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked.add(int(msg.value()[:12]))
        else:
            stats["errors"] = stats.get("errors", 0) + 1

    seq = 0
    t0 = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - t0) * rate)
        while seq < due and not stop.is_set():
            value = b"%012d" % seq + pad
            try:
                p.produce(TOPICS[seq % len(TOPICS)], value=value, on_delivery=cb)
            except BufferError:
                p.poll(0.05)
                continue
            seq += 1
        p.poll(0.01)
    p.flush(300)
    stats["sent"] = seq


def consume(bootstrap: str, stop: threading.Event, stats: dict[str, Any]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe(list(TOPICS))
    n = 0
    try:
        while not stop.is_set():
            n += sum(1 for m in c.consume(500, 0.5) if m.error() is None)
    finally:
        stats["consumed_live"] = n
        c.close()


def read_back(bootstrap: str) -> tuple[Seen, int]:
    """Every record of every partition, from the start: (sequence numbers, duplicates)."""
    seen = Seen()
    dups = 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-reader",
                  "enable.auto.commit": False, "fetch.max.bytes": 16 << 20})  # fmt: skip
    try:
        ends = {}
        for t in TOPICS:
            for p in range(PARTITIONS):
                lo, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=30)
                ends[(t, p)] = (lo, hi)
        c.assign([TopicPartition(t, p, lo) for (t, p), (lo, _) in ends.items()])
        left = {k for k, (lo, hi) in ends.items() if hi > lo}
        deadline = time.monotonic() + 600
        while left and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is not None:
                    continue
                if not seen.add(int(m.value()[:12])):
                    dups += 1
                key = (m.topic(), m.partition())
                if m.offset() >= ends[key][1] - 1:
                    left.discard(key)
        if left:
            raise TimeoutError(f"could not read back {sorted(left)}")
    finally:
        c.close()
    return seen, dups


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=120.0)
    ap.add_argument("--restart-every-s", type=float, default=300.0)
    ap.add_argument("--rate", type=float, default=4000.0, help="records/s offered")
    ap.add_argument("--size", type=int, default=1024, help="bytes per record")
    ap.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling interval")
    ap.add_argument("--no-save", action="store_true", help="print only (the CI form)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    c = Cluster(work, controllers=3, brokers=3, extra={"min.insync.replicas": "2"})
    c.start()
    stop = threading.Event()
    acked = Seen()
    pstats: dict[str, Any] = {}
    cstats: dict[str, Any] = {}
    rss: dict[int, list[tuple[float, float]]] = {n: [] for n in [*c.controllers, *c.brokers]}
    restarts: list[dict[str, float]] = []
    t_start = time.monotonic()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in TOPICS]).values():
            f.result(30)
        # the baseline: a restart of the same cluster with empty logs
        base_s = restart_all(c)
        restarts.append({"at_s": 0.0, "log_mb": dir_mb(work), "recovery_s": base_s})
        threads = [
            threading.Thread(target=produce, args=(c.bootstrap, args.rate, args.size, stop,
                                                   acked, pstats)),
            threading.Thread(target=consume, args=(c.bootstrap, stop, cstats)),
        ]  # fmt: skip
        for t in threads:
            t.start()
        t_run = time.monotonic()
        end = t_run + args.minutes * 60
        next_restart = t_run + args.restart_every_s
        next_sample = t_run
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                for nid, node in {**c.controllers, **c.brokers}.items():
                    mb = rss_mb(node)
                    if mb is not None:
                        rss[nid].append((round(now - t_run, 1), round(mb, 1)))
                next_sample = now + args.sample_s
            if now >= next_restart:
                log_mb = dir_mb(work)
                took = restart_all(c)
                restarts.append({"at_s": round(now - t_run, 1), "log_mb": round(log_mb, 1),
                                 "recovery_s": round(took, 2)})  # fmt: skip
                print(f"  restart at {now - t_run:7.1f} s: {log_mb:8.1f} MB of logs, "
                      f"recovered in {took:5.2f} s", flush=True)  # fmt: skip
                next_restart = time.monotonic() + args.restart_every_s
            time.sleep(0.2)
        run_s = time.monotonic() - t_run
        stop.set()
        for t in threads:
            t.join(360)
        read, dups = read_back(c.bootstrap)
        lost = read.missing_from(acked)
    finally:
        stop.set()
        c.stop()
    n_acked = acked.count()
    result = {
        "minutes": args.minutes,
        "rate_offered": args.rate,
        "size": args.size,
        "sent": pstats.get("sent", 0),
        "acknowledged": n_acked,
        "read_back": read.count(),
        "lost": len(lost),
        "lost_first": lost[:20],
        "duplicated": dups,
        "produce_errors": pstats.get("errors", 0),
        "consumed_live": cstats.get("consumed_live", 0),
        "acked_per_s": round(n_acked / run_s, 1),
        "restarts": restarts,
        "rss_mb": {
            str(n): {"first": s[0][1], "last": s[-1][1], "max": max(v for _, v in s)}
            for n, s in rss.items()
            if s
        },
        "rss_samples": {str(n): s for n, s in rss.items()},
        "seconds": round(time.monotonic() - t_start, 1),
    }
    print_table(result)
    if not args.no_save:
        out = ROOT / "bench" / "results" / f"soak-{time.strftime('%Y%m%dT%H%M%S')}.json"
        out.write_text(json.dumps(result, indent=2))
        print(f"results: {out.relative_to(ROOT)}")
    return result


def print_table(r: dict[str, Any]) -> None:
    print(f"soak: {r['minutes']} min, {r['rate_offered']:.0f} records/s of {r['size']} B "
          f"offered, {len(r['restarts']) - 1} full restarts")  # fmt: skip
    print(f"  acknowledged {r['acknowledged']:>12,}   read back {r['read_back']:>12,}   "
          f"lost {r['lost']}   duplicated {r['duplicated']}   ({r['acked_per_s']:,.0f} acked/s, "
          f"{r['consumed_live']:,} consumed live)")  # fmt: skip
    base = r["restarts"][0]["recovery_s"]
    print(f"  {'restart':>8} {'at s':>8} {'logs MB':>9} {'recovery s':>11} {'x baseline':>11}")
    for i, x in enumerate(r["restarts"]):
        name = "baseline" if i == 0 else str(i)
        print(f"  {name:>8} {x['at_s']:>8} {x['log_mb']:>9.1f} {x['recovery_s']:>11.2f} "
              f"{x['recovery_s'] / base:>11.2f}")  # fmt: skip
    print(f"  {'node':>8} {'RSS first':>10} {'last':>8} {'max MB':>8}")
    for n, v in r["rss_mb"].items():
        print(f"  {n:>8} {v['first']:>10.1f} {v['last']:>8.1f} {v['max']:>8.1f}")


if __name__ == "__main__":
    res = main()
    sys.exit(1 if res["lost"] else 0)
