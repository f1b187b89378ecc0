"""Kafka's log cleaner for compacted topics, the part that reads and writes files: no
event loop, no sockets (it runs in a worker process, see runtime/log_cleaner.py).

Cleaning a partition: an offset map of the dirty section (key -> the offset of its
latest record, from the first dirty offset up to the end of the cleanable segments),
then each cleanable segment is copied without the records a later one with the same
key replaces, and without tombstones (null values) older than delete.retention.ms.
Offsets never change: kept records keep their offsets, batches their base offset and
last offset delta, timestamps, headers and producer fields; a batch whose records are
all removed is dropped, unless it is its producer's last (its sequence stays known, as
Kafka keeps it). Control batches are kept. A cleaned segment is written and fsynced
as ``<base>.log.cleaned``; the log checks the segment is still what was cleaned and
renames it ``.swap``, then over the segment (``storage/log.py``). A restart finishes a
``.swap`` and drops a ``.cleaned``: a half-cleaned segment is never served, and a
cleaning the log gave up (a truncation meanwhile) never lands.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from keeperless.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BatchHeader,
    CorruptBatchError,
    raw_records,
    rebuild_batch,
)
from keeperless.storage.batch_scan import BatchScan

__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleanJob",
    "CleanResult",
    "SegmentToClean",
    "build_offset_map",
    "clean_partition",
    "key_hash",
]

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Kafka's SkimpyOffsetMap spends 24 bytes an entry; a Python dict entry of a 16-byte
# digest and an int costs about 128: dedupe.buffer.size buys this many entries
BYTES_PER_ENTRY = 128


def key_hash(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class SegmentToClean:
    path: Path  # <base>.log
    base_offset: int
    size: int  # the size it had when chosen: a segment that changed is not swapped
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class CleanJob:
    """One partition: its cleanable segments (every segment below the active one and
    the high watermark), oldest first, and where the dirty section starts."""

    name: str
    segments: tuple[SegmentToClean, ...]
    first_dirty_offset: int
    delete_retention_ms: int
    max_map_entries: int
    io_bytes_per_s: float = float("inf")
    # (producer id, first offset, marker offset) of aborted transactions: their records
    # are not values of their keys and are removed
    aborted: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class CleanResult:
    name: str
    swaps: tuple[tuple[SegmentToClean, Path], ...]  # segment -> its .cleaned file
    map_end: int  # the next first dirty offset
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    seconds: float


def _batches(path: Path, size: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The segment's batches up to ``size``, read in windows (a segment is up to
    segment.bytes, 1 GiB by default: never all in memory). A segment that does not
    hold whole, valid batches up to ``size`` is not cleaned: a cleaned copy of it would
    silently lose what follows the bad batch."""
    fd = os.open(path, os.O_RDONLY)
    try:
        scan = BatchScan(fd, 0, size, verify_crc=True)
        for _, h, data in scan:
            yield h, data
        if scan.stop is not None and not scan.stop.clean:
            raise CorruptBatchError(f"{path.name}: {scan.stop.reason}", scan.stop.position)
    finally:
        os.close(fd)


class _Throttle:
    def __init__(self, bytes_per_s: float) -> None:
        self.rate = bytes_per_s
        self.start = time.monotonic()
        self.done = 0

    def __call__(self, n: int) -> None:
        self.done += n
        if self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


class _Aborted:
    """Whether a transactional batch belongs to an aborted transaction."""

    def __init__(self, ranges: Sequence[tuple[int, int, int]]) -> None:
        self.by_pid: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in ranges:
            self.by_pid.setdefault(pid, []).append((first, last))

    def __call__(self, h: BatchHeader) -> bool:
        if not h.attributes & ATTR_TRANSACTIONAL or h.producer_id not in self.by_pid:
            return False
        return any(first <= h.base_offset <= last for first, last in self.by_pid[h.producer_id])


def build_offset_map(
    segments: Sequence[SegmentToClean],
    start: int,
    max_entries: int,
    aborted: Sequence[tuple[int, int, int]] = (),
) -> tuple[dict[bytes, int], int]:
    """key digest -> latest offset, over the records at or after ``start``; stops at a
    batch boundary when the map is full. Returns (map, the offset it covers up to)."""
    keys: dict[bytes, int] = {}
    end = start
    is_aborted = _Aborted(aborted)
    for seg in segments:
        for h, batch in _batches(seg.path, seg.size):
            if h.last_offset < start:
                continue
            if h.attributes & ATTR_CONTROL or is_aborted(h):
                end = h.last_offset + 1
                continue
            if len(keys) + h.record_count > max_entries and keys:
                return keys, end
            for offset, key, _null, _raw in raw_records(batch):
                if key is not None and offset >= start:
                    keys[key_hash(key)] = offset
            end = h.last_offset + 1
    return keys, end


def clean_partition(job: CleanJob, now_ms: int) -> CleanResult:
    """Clean every segment of ``job`` up to where the offset map reaches; write each as
    a .cleaned file beside it (the log swaps them in, see PartitionLog.swap_in)."""
    t0 = time.monotonic()
    throttle = _Throttle(job.io_bytes_per_s)
    keys, map_end = build_offset_map(
        job.segments, job.first_dirty_offset, job.max_map_entries, job.aborted
    )
    is_aborted = _Aborted(job.aborted)
    # each producer's last batch in what is cleaned: kept, even emptied
    last_batch: dict[int, int] = {}
    for seg in job.segments:
        for h, _ in _batches(seg.path, seg.size):
            if h.producer_id >= 0:
                last_batch[h.producer_id] = h.base_offset
    horizon = now_ms - job.delete_retention_ms
    swaps = []
    totals = (0, 0, 0, 0)  # bytes read and written, records read and kept
    try:
        for seg in job.segments:
            if seg.base_offset >= map_end:
                break  # beyond what the map knows: cleaned next time
            cleaned = seg.path.with_name(seg.path.name + CLEANED_SUFFIX)
            swaps.append((seg, cleaned))
            counts = _clean_segment(
                seg, cleaned, keys, map_end, horizon, is_aborted, last_batch, throttle
            )
            totals = tuple(t + c for t, c in zip(totals, counts, strict=True))  # type: ignore[assignment]
    except BaseException:
        for _, cleaned in swaps:  # nothing half-written is left for a swap
            cleaned.unlink(missing_ok=True)
        raise
    read, written, seen, kept = totals
    return CleanResult(
        job.name, tuple(swaps), map_end, read, written, seen, kept, time.monotonic() - t0
    )


def _clean_segment(
    seg: SegmentToClean,
    cleaned: Path,
    keys: dict[bytes, int],
    map_end: int,
    horizon: int,
    is_aborted: _Aborted,
    last_batch: dict[int, int],
    throttle: _Throttle,
) -> tuple[int, int, int, int]:
    """Write ``seg`` without what the offset map replaces as ``cleaned``, fsynced;
    returns (bytes read, bytes written, records read, records kept)."""
    read = written = seen = kept = 0
    with open(cleaned, "wb") as out:
        for h, batch in _batches(seg.path, seg.size):
            read += len(batch)
            throttle(len(batch))
            if h.attributes & ATTR_CONTROL:
                written += out.write(batch)
                continue
            retained = []
            aborted = is_aborted(h)
            for offset, key, null, raw in raw_records(batch):
                seen += 1
                if aborted and offset < map_end:
                    continue  # written by an aborted transaction
                if key is not None:
                    latest = keys.get(key_hash(key))
                    if latest is not None and latest > offset:
                        continue  # replaced by a later record of the same key
                    if null and seg.max_timestamp < horizon and offset < map_end:
                        continue  # a tombstone past delete.retention.ms
                retained.append(raw)
            kept += len(retained)
            if len(retained) == h.record_count:
                written += out.write(batch)
            elif retained or last_batch.get(h.producer_id) == h.base_offset:
                written += out.write(rebuild_batch(h, retained))
        out.flush()
        os.fsync(out.fileno())
    throttle(written)
    return read, written, seen, kept
