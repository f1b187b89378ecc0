"""The cleaner and transactional producers (found by review of the marker removal): a
removed ABORT marker's transaction is no longer listed to read_committed readers (who
would otherwise skip the producer's later committed batches, waiting for a marker that
is gone), and the batch holding a producer's last data offset stays (its sequence), as
Kafka's cleaner keeps it, so that a replica rebuilding its producers from the log takes
the next sequence."""

from __future__ import annotations

import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import Partition
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.control import ABORT, control_type
from keeperless.protocol.records import build_batch, decode_records, iter_batches
from keeperless.storage.cleaner import CleanJob, SegmentToClean, clean_partition
from keeperless.storage.log import LogConfig

NOW = 10_000_000
DAY = 86_400_000


def _partition(d: Path) -> Partition:
    p = Partition("t", 0, uuid.UUID(int=5), d / "t-0", LogConfig(segment_bytes=300), 0)
    p.node_id = 1
    p.on_info(PartitionInfo((1,), (1,), 1, 0, 0), 0)
    return p


def _txn(pid: int, seq: int, key: bytes, value: bytes) -> bytes:
    return build_batch([(key, value, ())], timestamp_ms=NOW, producer_id=pid,
                       producer_epoch=0, base_sequence=seq, transactional=True)  # fmt: skip


def _pad(p: Partition, n: int, tag: bytes) -> None:
    for i in range(n):
        batch = build_batch([(tag + b"%d" % i, b"p" * 40, ())], timestamp_ms=NOW)
        p.append(batch, 0, 1 << 20, NOW)


def _clean(p: Partition, now: int) -> None:
    """As runtime/log_cleaner.py cleans a partition."""
    found = p.log.cleanable_segments(p.last_stable_offset)
    segs = tuple(SegmentToClean(path, b, s, ts, e) for path, b, s, ts, e in found)
    job = CleanJob("t-0", segs, 0, DAY, 10**6,
                   aborted=tuple((pid, first, last) for last, pid, first in p.txns.aborted),
                   max_segment_bytes=300)  # fmt: skip
    res = clean_partition(job, now)
    for k, (group, cleaned) in enumerate(res.swaps):
        sizes = [(s.base_offset, s.size) for s in group]
        assert p.swap_in_cleaned(sizes, cleaned, now, p.log.generation, res.indexes[k],
                                 res.dropped_aborts[k])  # fmt: skip


def _read_committed(p: Partition) -> list[bytes]:
    """What Kafka's Java consumer (CompletedFetch, READ_COMMITTED) returns of one fetch
    from offset 0, given the aborted transactions the broker lists with it."""
    aborted = sorted(p.txns.aborted_between(0, p.last_stable_offset), key=lambda a: a[1])
    got = p.read(0, 1 << 20, committed=True)
    assert got is not None
    data = got.read()
    out: list[bytes] = []
    aborted_pids: set[int] = set()
    for pos, h in iter_batches(data):
        recs = list(decode_records(data[pos : pos + h.size]))
        if h.producer_id >= 0:
            while aborted and aborted[0][1] <= h.last_offset:
                aborted_pids.add(aborted.pop(0)[0])
            if h.is_control and control_type(recs[0]) == ABORT:
                aborted_pids.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborted_pids:
                continue
        if not h.is_control:
            out += [r.value for r in recs if r.value is not None]
    return out


def test_a_removed_abort_markers_transaction_is_no_longer_listed(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append(_txn(8, 0, b"a", b"aborted"), 0, 1 << 20, NOW)  # 0
    p.append_marker(8, 0, False, 0, NOW)  # 1: ABORT
    p.append(_txn(8, 1, b"b", b"committed-b"), 0, 1 << 20, NOW)  # 2
    p.append_marker(8, 0, True, 0, NOW)  # 3: COMMIT
    _pad(p, 20, b"pad")
    p.append(_txn(8, 2, b"c", b"committed-c"), 0, 1 << 20, NOW)
    p.append_marker(8, 0, True, 0, NOW)
    _pad(p, 20, b"q")
    p._hw = p.log.log_end_offset
    assert b"committed-b" in _read_committed(p)
    _clean(p, NOW)  # the aborted record goes
    _clean(p, NOW + 2 * DAY)  # its ABORT marker (and its index entry) go
    assert p.log.aborted_txns() == []
    assert p.txns.aborted == []  # forgotten in memory too
    assert b"committed-b" in _read_committed(p)
    p.log.close()


def test_the_batch_of_a_producers_last_sequence_stays(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append(_txn(7, 0, b"a", b"txn"), 0, 1 << 20, NOW)  # its last data batch, sequence 0
    p.append_marker(7, 0, True, 0, NOW)
    p.append(build_batch([(b"a", b"plain", ())], timestamp_ms=NOW), 0, 1 << 20, NOW)
    _pad(p, 20, b"pad")
    p._hw = p.log.log_end_offset
    _clean(p, NOW)
    p.log.close()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()  # producers rebuilt from the log, as a new replica builds them
    q = _partition(tmp_path)
    res = q.append(_txn(7, 1, b"b", b"next"), 0, 1 << 20, NOW)
    assert res.error == ErrorCode.none  # not OUT_OF_ORDER_SEQUENCE_NUMBER
    q.log.close()


def test_a_producers_last_marker_of_a_newer_epoch_stays(tmp_path: Path) -> None:
    """Kafka keeps a producer's last marker when it carries a newer epoch than its last
    data batch (an abort after an epoch bump, with nothing written in it): a replica
    rebuilding producers from the cleaned log still fences the old epoch (found by a
    second review)."""
    p = _partition(tmp_path)
    p.append(_txn(9, 0, b"a", b"txn"), 0, 1 << 20, NOW)  # 0: epoch 0
    p.append_marker(9, 0, True, 0, NOW)  # 1
    bumped = p.log.log_end_offset
    p.append_marker(9, 1, False, 0, NOW)  # 2: aborted at epoch 1, nothing in it
    p.append(build_batch([(b"a", b"plain", ())], timestamp_ms=NOW), 0, 1 << 20, NOW)
    _pad(p, 20, b"pad")
    p._hw = p.log.log_end_offset
    _clean(p, NOW)
    _clean(p, NOW + 2 * DAY)
    markers = []
    for seg in sorted((tmp_path / "t-0").glob("*.log")):
        raw = seg.read_bytes()
        markers += [h.base_offset for _, h in iter_batches(raw) if h.is_control]
    assert bumped in markers
    p.log.close()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    q = _partition(tmp_path)
    res = q.append(_txn(9, 1, b"z", b"zombie"), 0, 1 << 20, NOW)  # epoch 0, fenced
    assert res.error == ErrorCode.invalid_producer_epoch
    q.log.close()
