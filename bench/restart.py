"""How long a broker's storage takes to open at a restart (issue 30, item 3), against a
baseline measured in the same run:

1. open after a clean stop: every partition's log, producers' state and leader epochs,
   as a broker opens them when its first metadata image names them;
2. open after a crash (kill -9: no clean-shutdown file, nothing else lost);
3. the baseline: a plain read of every byte of the same log files (what a start that
   reads the whole log costs in I/O alone).

    python bench/restart.py [--partitions 1000] [--mb-per-partition 10] [--batch-kb 16]

The logs are written once, with small batches (a producer's default ``batch.size`` of
16 KiB), into a temporary directory, and opened several times. Prints a table and writes
bench/results/restart-<time>.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench._report import write_result  # noqa: E402
from keeperless.broker.partition_manager import PartitionManager  # noqa: E402
from keeperless.metadata.image import PartitionInfo  # noqa: E402
from keeperless.protocol.records import build_batch, patch_offsets, read_header  # noqa: E402
from keeperless.storage.log import LogConfig  # noqa: E402
from keeperless.storage.partition_dirs import CLEAN_SHUTDOWN_FILE  # noqa: E402

MB = 1024 * 1024
TOPIC = "restart-bench"


def _open(
    directory: Path, partitions: int, tid: uuid.UUID, config: LogConfig
) -> tuple[float, PartitionManager]:
    info = PartitionInfo((1,), (1,), 1, 0, 0)
    t0 = time.perf_counter()
    pm = PartitionManager(1, directory, config)
    for i in range(partitions):
        pm.ensure(TOPIC, i, tid, info, config, 0)
    return time.perf_counter() - t0, pm


def build(directory: Path, partitions: int, per_partition: int, batch: int, config: LogConfig,
          tid: uuid.UUID) -> int:  # fmt: skip
    records = max(1, batch // 1024)
    template = build_batch([(None, b"v" * 1000, [])] * records, timestamp_ms=int(time.time() * 1e3))
    per_append = max(1, (1 * MB) // len(template))  # a produce request of ~1 MiB
    _, pm = _open(directory, partitions, tid, config)
    total = 0
    for i in range(partitions):
        p = pm.get(TOPIC, i)
        assert p is not None
        written = 0
        while written < per_partition:
            buf = bytearray(template * per_append)
            headers = []
            for j in range(per_append):
                pos = j * len(template)
                patch_offsets(buf, pos, p.log.log_end_offset + j * records, 0)
                headers.append((pos, read_header(buf, pos)))
            p.log.append(buf, headers, int(time.time() * 1e3))
            written += len(buf)
        total += written
    pm.close()
    return total


def read_everything(directory: Path) -> float:
    t0 = time.perf_counter()
    for path in directory.rglob("*.log"):
        with open(path, "rb", buffering=0) as f:
            while f.read(8 * MB):
                pass
    return time.perf_counter() - t0


def _ends(pm: PartitionManager) -> dict[int, int]:
    return {i: p.log.log_end_offset for (_, i), p in pm.partitions.items()}


def measure(base: Path, partitions: int, mb_per_partition: float, batch_kb: int,
            segment_mb: int, rounds: int) -> dict[str, object]:  # fmt: skip
    """Write the logs into ``base``, then open them ``rounds`` times each way; every open
    must find every partition's log ending where it was written."""
    config = LogConfig(segment_bytes=segment_mb * MB)
    tid = uuid.uuid4()
    t0 = time.perf_counter()
    total = build(base, partitions, int(mb_per_partition * MB), batch_kb * 1024, config, tid)
    built_s = time.perf_counter() - t0
    _, pm = _open(base, partitions, tid, config)
    ends = _ends(pm)
    pm.close()
    rows: dict[str, list[float]] = {"read every byte": [], "clean stop": [], "crash": []}
    for _ in range(rounds):
        rows["read every byte"].append(read_everything(base))
        took, pm = _open(base, partitions, tid, config)
        rows["clean stop"].append(took)
        assert _ends(pm) == ends, "a clean restart lost records"
        # a crash: the logs as they are, no clean-shutdown file (written at a clean stop)
        for p in pm.partitions.values():
            p.log.close()
        (base / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        took, pm = _open(base, partitions, tid, config)
        rows["crash"].append(took)
        assert _ends(pm) == ends, "a restart after a crash lost records"
        pm.close()
    results = {}
    for name, times in rows.items():
        best, median = min(times), sorted(times)[len(times) // 2]
        results[name] = {"best_s": best, "median_s": median, "runs_s": times,
                         "mb_per_s": total / MB / best if best else 0.0}  # fmt: skip
    return {
        "bench": "restart",
        "partitions": partitions,
        "mb": total / MB,
        "write_s": built_s,
        "batch_kb": batch_kb,
        "segment_mb": segment_mb,
        "results": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--mb-per-partition", type=float, default=10.0)
    ap.add_argument("--batch-kb", type=int, default=16)
    ap.add_argument("--segment-mb", type=int, default=1024, help="segment.bytes (Kafka's 1 GiB)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (a temporary dir)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="restart-bench-", dir=args.dir))
    try:
        result = measure(base, args.partitions, args.mb_per_partition, args.batch_kb,
                         args.segment_mb, args.rounds)  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"wrote {result['mb']:,.0f} MB in {args.partitions} partitions "
          f"in {result['write_s']:.1f} s")  # fmt: skip
    print(f"{'open after':<18} {'best s':>8} {'median s':>9} {'MB/s':>9}")
    rows = result["results"]
    assert isinstance(rows, dict)
    for name, r in rows.items():
        print(f"{name:<18} {r['best_s']:>8.2f} {r['median_s']:>9.2f} {r['mb_per_s']:>9,.0f}")
    write_result("restart", result)


if __name__ == "__main__":
    main()
