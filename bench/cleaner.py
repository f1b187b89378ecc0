"""The log cleaner (issue 15), against baselines measured in the same run:

1. cleaning throughput: a compacted partition's segments (keyed records, most of them
   replaced) cleaned by the cleaner's worker code, beside a plain copy of the same
   files (read, write, fsync) — the I/O floor of any cleaner;
2. what cleaning costs the broker: produce throughput and event-loop lag p99 of one
   node while a compacted topic is written (and so keeps getting dirty), with the
   cleaner off, then on.

    python bench/cleaner.py [--mb 64] [--seconds 15]

Prints a table and writes bench/results/cleaner-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Node, free_port  # noqa: E402

from bench.throughput import lag_p99, loop_lag_buckets  # noqa: E402
from keeperless.protocol.records import build_batch, iter_batches, patch_offsets  # noqa: E402
from keeperless.storage.cleaner import (  # noqa: E402
    CLEANED_SUFFIX,
    CleanJob,
    SegmentToClean,
    clean_partition,
    txn_index_path,
)
from keeperless.storage.log import LogConfig, PartitionLog  # noqa: E402

MB = 1024 * 1024


def build_log(directory: Path, total: int, keys: int, value_size: int) -> PartitionLog:
    rng = random.Random(1)
    log = PartitionLog(directory, LogConfig(segment_bytes=8 * MB), 0)
    value = b"v" * value_size
    written = 0
    while written < total:
        batch = bytearray(
            build_batch(
                [(b"key-%d" % rng.randrange(keys), value, ()) for _ in range(100)],
                timestamp_ms=int(time.time() * 1000),
            )
        )
        patch_offsets(batch, 0, log.log_end_offset, 0)
        log.append(bytes(batch), list(iter_batches(batch)), 0)
        written += len(batch)
    return log


def copy_baseline(paths: list[Path], directory: Path) -> float:
    """Bytes per second of reading and writing the same files, fsynced."""
    total = 0
    t0 = time.perf_counter()
    for p in paths:
        data = p.read_bytes()
        out = directory / (p.name + ".copy")
        with open(out, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        total += len(data)
    dt = time.perf_counter() - t0
    for p in paths:
        (directory / (p.name + ".copy")).unlink()
    return total / dt


def cleaning(tmp: Path, mb: int) -> dict[str, object]:
    log = build_log(tmp / "t-0", mb * MB, keys=20_000, value_size=200)
    segs = tuple(
        SegmentToClean(path, base, size, ts, end)
        for path, base, size, ts, end in log.cleanable_segments(log.log_end_offset)
    )
    copy_bps = copy_baseline([s.path for s in segs], tmp)
    # (grouped up to Kafka's default segment.bytes, 1 GiB: these 8 MiB segments merge)
    job = CleanJob("t-0", segs, 0, 86_400_000, (128 * MB) // 128, max_segment_bytes=1024 * MB)
    res = clean_partition(job, int(time.time() * 1000))
    for group, cleaned in res.swaps:
        cleaned.unlink()
        txn_index_path(group[0].path, CLEANED_SUFFIX).unlink(missing_ok=True)
    log.close()
    return {
        "bytes": res.bytes_read,
        "records_read": res.records_read,
        "records_kept": res.records_kept,
        "segments_cleaned": sum(len(group) for group, _ in res.swaps),
        "segments_written": len(res.swaps),  # (grouped up to segment.bytes, as Kafka's)
        "cleaner_mb_per_s": round(res.bytes_read / MB / res.seconds, 1),
        "copy_mb_per_s": round(copy_bps / MB, 1),
        "cleaner_vs_copy": round(res.bytes_read / res.seconds / copy_bps, 3),
    }


def dirtier(bootstrap: str, stop: threading.Event) -> None:
    """Keyed updates to the compacted topic for as long as the measurement runs."""
    rng = random.Random(2)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"d" * 300
    sent = 0
    while not stop.is_set() and sent < 2_000_000:
        try:
            p.produce("compacted", key=b"k%d" % rng.randrange(5000), value=value)
            sent += 1
        except BufferError:
            p.poll(0.01)
        if sent % 1000 == 0:
            p.poll(0)
            time.sleep(0.02)  # about 40k updates a second at most
    p.flush(30)


def produce_for(bootstrap: str, topic: str, seconds: float, size: int) -> float:
    """Messages per second acknowledged (acks=all) over ``seconds``."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                  "queue.buffering.max.messages": 200_000})  # fmt: skip
    value = b"x" * size
    sent = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds and sent < 50_000_000:
        try:
            p.produce(topic, value=value)
            sent += 1
        except BufferError:
            p.poll(0.001)
    assert p.flush(120) == 0
    return sent / (time.perf_counter() - t0)


def broker_cost(tmp: Path, seconds: float, cleaner: bool) -> dict[str, object]:
    port = free_port()
    node = Node(
        tmp / ("on" if cleaner else "off"),
        extra={
            "metrics.http.listener": f"127.0.0.1:{port}",
            "log.cleaner.enable": "true" if cleaner else "false",
            "log.cleaner.backoff.ms": "200",
        },
    )
    node.metrics_port = port
    node.format()
    node.start()
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        fs = admin.create_topics(
            [
                NewTopic(
                    "compacted",
                    1,
                    1,
                    config={
                        "cleanup.policy": "compact",
                        "segment.bytes": str(MB),
                        "min.cleanable.dirty.ratio": "0.1",
                    },
                ),
                NewTopic("plain", 1, 1),
            ]
        )
        for f in fs.values():
            f.result(30)
        stop = threading.Event()
        t = threading.Thread(target=dirtier, args=(node.bootstrap, stop))
        t.start()
        time.sleep(3)  # some dirty segments first
        before = loop_lag_buckets(node)
        cleanings_before = node.logs().count("Cleaned compacted-0")
        rate = produce_for(node.bootstrap, "plain", seconds, 1024)
        lag_le, samples = lag_p99(before, loop_lag_buckets(node))
        cleanings = node.logs().count("Cleaned compacted-0") - cleanings_before
        stop.set()
        t.join()
        return {
            "cleaner": cleaner,
            "produce_msgs_per_s": round(rate),
            "produce_mb_per_s": round(rate * 1024 / 1e6, 1),
            "loop_lag_p99_ms_upper_bound": lag_le,
            "loop_lag_samples": samples,
            "cleanings_during_produce": cleanings,
        }
    finally:
        node.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=64, help="size of the partition to clean")
    ap.add_argument("--seconds", type=float, default=15, help="of producing, per run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clean = cleaning(Path(tmp), args.mb)
        off = broker_cost(Path(tmp), args.seconds, cleaner=False)
        on = broker_cost(Path(tmp), args.seconds, cleaner=True)
    print(f"{'cleaning':<34} {'MB':>6} {'MB/s':>8} {'copy MB/s':>10} {'vs copy':>8} {'kept':>14}")
    print(
        f"{'one partition, 20k keys':<34} {clean['bytes'] / MB:>6.0f} "  # type: ignore[operator]
        f"{clean['cleaner_mb_per_s']:>8} {clean['copy_mb_per_s']:>10} "
        f"{clean['cleaner_vs_copy']:>8} "
        f"{clean['records_kept']:>6}/{clean['records_read']:<7}"
    )
    print()
    print(f"{'broker while compacted data arrives':<36} {'produce msg/s':>14} {'MB/s':>7} "
          f"{'loop lag p99':>13} {'cleanings':>10}")  # fmt: skip
    for r in (off, on):
        label = "cleaner " + ("on" if r["cleaner"] else "off (baseline)")
        print(
            f"{label:<36} {r['produce_msgs_per_s']:>14,} {r['produce_mb_per_s']:>7} "
            f"{'<= ' + format(r['loop_lag_p99_ms_upper_bound'], 'g') + ' ms':>13} "
            f"{r['cleanings_during_produce']:>10}"
        )
    out = ROOT / "bench" / "results" / f"cleaner-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps({"cleaning": clean, "broker": [off, on]}, indent=2))
    print(f"results: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
