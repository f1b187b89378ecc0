"""Moving a partition between brokers (KIP-455) and between the log directories of one
broker (KIP-858): the time and bytes to move one partition of ``--mb`` MB to another
broker, unthrottled and under a replication throttle, and to the broker's other log
directory, unthrottled and throttled, beside a plain file copy of the same segments
measured in the same run.

    python bench/reassign.py [--mb 1024] [--throttle-mb 50]

One controller and three brokers, each with two log.dirs (a, b); the partition (RF 1)
is filled on broker 2, moved to broker 3 with no throttle, then to broker 4 with
``kafka-reassign-partitions.sh --throttle``, then on broker 4 to its other directory
(``log_dirs``) with no throttle and back with ``--replica-alter-log-dirs-throttle``. A
move between brokers is timed from the AlterPartitionReassignments answer to the
partition's replicas being the target alone (the new replica caught up, joined the
ISR and the old one removed); a move between directories until the copy has been
swapped in and the old one deleted. Prints a table and writes
bench/results/reassign-<time>.json (its short form runs in make test).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster, wait_until  # noqa: E402

from bench._report import write_result  # noqa: E402

TOPIC = "bench-move"
MOVE_TIMEOUT_S = 3600.0  # a move that never ends fails (the short form sets less)


def _fill(c: Cluster, megabytes: int) -> None:
    import os

    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "1", "linger.ms": 20,
                  "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})  # fmt: skip
    block = os.urandom(1 << 20)
    value_size = 10_000
    for i in range(megabytes * (1 << 20) // value_size):
        start = (i * 7919) % (len(block) - value_size)
        while True:
            try:
                p.produce(TOPIC, block[start : start + value_size], partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(300) == 0


def _replicas(c: Cluster) -> list[int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return sorted(md.topics[TOPIC].partitions[0].replicas)


def _dirs(c: Cluster, broker: int) -> tuple[Path, Path]:
    d = c.brokers[broker].data
    return d / "a", d / "b"


def _where(c: Cluster, broker: int) -> Path | None:
    """The log directory holding the partition on ``broker`` (None: none does)."""
    return next((d for d in _dirs(c, broker) if (d / f"{TOPIC}-0").exists()), None)


def _log_bytes(c: Cluster, broker: int) -> int:
    at = _where(c, broker)
    d = at / f"{TOPIC}-0" if at is not None else None
    return sum(f.stat().st_size for f in d.glob("*.log")) if d is not None else 0


def _move_dir(c: Cluster, broker: int, throttle: int | None, workdir: Path) -> float:
    """Move the partition on ``broker`` to its other log directory."""
    now = _where(c, broker)
    target = next(d for d in _dirs(c, broker) if d != now)
    plan = workdir / f"dir-{target.name}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [broker],
         "log_dirs": [str(target)]}]}))  # fmt: skip
    tool = [str(ROOT / "bin" / "kafka-reassign-partitions.sh"), "--bootstrap-server",
            c.bootstrap, "--reassignment-json-file", str(plan)]  # fmt: skip
    args = [*tool, "--execute"]
    if throttle:
        args += ["--replica-alter-log-dirs-throttle", str(throttle)]
    started = time.monotonic()
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)

    def moved() -> bool:
        return (
            _where(c, broker) == target
            and not any(now.glob(f"{TOPIC}-0*") if now is not None else ())
            and not any(target.glob("*-future"))
        )

    wait_until(moved, timeout=MOVE_TIMEOUT_S, interval=0.1, what=f"the move to {target}")
    took = time.monotonic() - started
    subprocess.run([*tool, "--verify"], check=True, capture_output=True, text=True, timeout=60)
    return took


def _move(c: Cluster, target: int, throttle: int | None, workdir: Path) -> float:
    plan = workdir / f"to-{target}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [target]}]}))  # fmt: skip
    tool = [str(ROOT / "bin" / "kafka-reassign-partitions.sh"), "--bootstrap-server",
            c.bootstrap, "--reassignment-json-file", str(plan)]  # fmt: skip
    args = [*tool, "--execute"] + (["--throttle", str(throttle)] if throttle else [])
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)
    started = time.monotonic()
    wait_until(lambda: _replicas(c) == [target], timeout=MOVE_TIMEOUT_S, interval=0.1,
               what=f"the move to broker {target}")  # fmt: skip
    took = time.monotonic() - started
    subprocess.run([*tool, "--verify"], check=True, capture_output=True, text=True, timeout=60)
    return took


def _copy_baseline(c: Cluster, broker: int, workdir: Path) -> float:
    at = _where(c, broker)
    assert at is not None
    src = at / f"{TOPIC}-0"
    dst = workdir / "copy"
    dst.mkdir()
    started = time.monotonic()
    for f in sorted(src.glob("*.log")):
        shutil.copyfile(f, dst / f.name)
        with open(dst / f.name, "rb+") as out:  # durable, as a replica's appends are
            import os

            os.fsync(out.fileno())
    took = time.monotonic() - started
    shutil.rmtree(dst)
    return took


def measure(megabytes: int, throttle_mb: int, work: Path) -> dict[str, Any]:
    """One partition of ``megabytes`` moved between brokers and log directories, each
    way beside a copy of its files, on a cluster of 1 controller and 3 brokers."""
    c = Cluster(work, controllers=1, brokers=3)
    for n in c.brokers.values():  # two log directories each (KIP-858)
        text = n.config.read_text().replace(f"log.dirs={n.data}\n",
                                            f"log.dirs={n.data}/a,{n.data}/b\n")  # fmt: skip
        n.config.write_text(text)
    c.start()
    try:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        admin.create_topics([NewTopic(TOPIC, replica_assignments={0: [2]})])
        admin.close()
        wait_until(lambda: _replicas(c) == [2], what="the topic")
        _fill(c, megabytes)
        size = _log_bytes(c, 2)
        copy_s = _copy_baseline(c, 2, work)
        free_s = _move(c, 3, None, work)
        throttle = throttle_mb * 1_000_000
        throttled_s = _move(c, 4, throttle, work)
        dir_s = _move_dir(c, 4, None, work)
        dir_throttled_s = _move_dir(c, 4, throttle, work)
        moved = _log_bytes(c, 4)
        replicas = _replicas(c)
    finally:
        c.stop()
    mb = size / 1e6
    rows: list[dict[str, Any]] = [
        {"case": "file copy (baseline)", "seconds": copy_s, "mb_per_s": mb / copy_s},
        {"case": "move, no throttle", "seconds": free_s, "mb_per_s": mb / free_s},
        {
            "case": f"move, --throttle {throttle}",
            "seconds": throttled_s,
            "mb_per_s": mb / throttled_s,
            "limit_mb_per_s": throttle / 1e6,
        },
        {"case": "log dir move, no throttle", "seconds": dir_s, "mb_per_s": mb / dir_s},
        {
            "case": f"log dir move, --replica-alter-log-dirs-throttle {throttle}",
            "seconds": dir_throttled_s,
            "mb_per_s": mb / dir_throttled_s,
            "limit_mb_per_s": throttle / 1e6,
        },
    ]
    return {"bytes": size, "bytes_at_the_end": moved, "replicas_at_the_end": replicas,
            "rows": rows}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1024, help="size of the partition moved")
    ap.add_argument("--throttle-mb", type=int, default=50, help="MB/s of the throttled move")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-reassign-") as tmp:
        out = measure(args.mb, args.throttle_mb, Path(tmp))
    rows = out["rows"]
    print(f"one partition of {out['bytes'] / 1e6:.0f} MB ({out['bytes']} bytes) moved between "
          "brokers and log directories")  # fmt: skip
    print(f"{'case':<58}{'seconds':>10}{'MB/s':>10}{'x copy':>10}")
    for r in rows:
        print(f"{r['case']:<58}{r['seconds']:>10.2f}{r['mb_per_s']:>10.1f}"
              f"{r['mb_per_s'] / rows[0]['mb_per_s']:>10.2f}")  # fmt: skip
    write_result("reassign", out)


if __name__ == "__main__":
    main()
