"""Kafka's log cleaner for compacted topics, the part that reads and writes files: no
event loop, no sockets (it runs in a worker process, see runtime/log_cleaner.py).

Cleaning a partition: an offset map of the dirty section (key -> the offset of its
latest record, from the first dirty offset up to the end of the cleanable segments),
then each cleanable segment is copied without the records a later one with the same
key replaces, without tombstones (null values) older than delete.retention.ms, and
without records that have no key (Kafka's cleaner counts them invalid and drops them;
a compacted topic refuses them, but a topic made compacted later may hold some).
Offsets never change: kept records keep their offsets, batches their base offset and
last offset delta, timestamps, headers and producer fields; a batch whose records are
all removed is dropped, unless it is its producer's last (its sequence stays known, as
Kafka keeps it). A transaction's marker goes once no batch of its transaction is left
(the records go in one pass, the marker in a later one), its segment is older than
delete.retention.ms, and it is not its producer's last batch; with an ABORT marker goes
its entry in the transaction index. Other control batches are kept. Consecutive
segments are cleaned into one while their sizes add up to no more than segment.bytes
(Kafka's grouping), written and
fsynced as ``<first base>.log.cleaned`` with the group's transaction indexes merged
beside it (``.txnindex.cleaned``); the log checks the segments are still what was
cleaned and swaps the copy in for them (``storage/log.py``). A restart finishes a
``.swap`` and drops a ``.cleaned``: a half-cleaned segment is never served, and a
cleaning the log gave up (a truncation meanwhile) never lands.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from keeperless.protocol.control import ABORT, COMMIT, control_type
from keeperless.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BatchHeader,
    CorruptBatchError,
    decode_records,
    raw_records,
    read_header,
    rebuild_batch,
    record_slices,
)
from keeperless.storage.batch_scan import BatchScan
from keeperless.storage.producer_files import TXN_INDEX_SUFFIX, decode_txn_index
from keeperless.storage.segment import BuiltIndex

__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleanJob",
    "CleanResult",
    "SegmentToClean",
    "build_offset_map",
    "clean_partition",
    "group_segments",
    "key_hash",
    "txn_index_path",
]

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Kafka's SkimpyOffsetMap spends 24 bytes an entry; a Python dict entry of a 16-byte
# digest and an int costs about 128: dedupe.buffer.size buys this many entries
BYTES_PER_ENTRY = 128


_SHORT_KEY = 16  # keys shorter than a digest are their own map key (no hashing)


def key_hash(key: bytes) -> bytes:
    """The offset map's key for a record key: the key itself when shorter than 16
    bytes, else its 16-byte digest (as Kafka's SkimpyOffsetMap keeps a 16-byte MD5).
    The two never meet: a digest is 16 bytes long, a key kept whole is shorter."""
    if len(key) < _SHORT_KEY:
        return key
    return hashlib.blake2b(key, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class SegmentToClean:
    path: Path  # <base>.log
    base_offset: int
    size: int  # the size it had when chosen: a segment that changed is not swapped
    max_timestamp: int
    end_offset: int = -1  # where the next segment starts (-1: not known, not grouped)


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
    # the topic's segment.bytes: consecutive segments are cleaned into one up to it
    max_segment_bytes: int = 2**31 - 1
    index_interval_bytes: int = 4096  # the log's: the copy's indexes are built as it is


@dataclass(frozen=True, slots=True)
class CleanResult:
    name: str
    # segments cleaned into one -> its .cleaned file (named after the first)
    swaps: tuple[tuple[tuple[SegmentToClean, ...], Path], ...]
    map_end: int  # the next first dirty offset
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    seconds: float
    # each copy's indexes, built as it was written (the log need not read it again)
    indexes: tuple[BuiltIndex, ...] = ()
    # each copy's ABORT markers removed (their offsets): their transactions are to be
    # forgotten once the copy is in
    dropped_aborts: tuple[frozenset[int], ...] = ()


def _records(batch: memoryview) -> list[Any]:
    """The records of a batch (``offset``, ``key``, ``value``), read by aiokafka's
    compiled record reader: about ten times this module's own varint reading in Python,
    which held the cleaner to a fraction of the disk's speed (bench/cleaner.py: 25.8
    MB/s against a 352 MB/s copy of the same files). Records that do not parse (under
    a valid CRC) are a corrupt batch: the segment is not cleaned. (aiokafka is imported
    here, by the cleaner's worker: importing it takes ~30 ms of every node's start.)"""
    from aiokafka.errors import CorruptRecordException
    from aiokafka.record.default_records import DefaultRecordBatch

    try:
        return list(DefaultRecordBatch(batch))
    except UnicodeDecodeError:
        # a header key that is not UTF-8: aiokafka decodes header keys, Kafka does not
        # look at them here, and neither does this module's own (slower) reader
        return [
            _Record(offset, key, None if null else b"")
            for offset, key, null, _raw in raw_records(batch)
        ]
    except (CorruptRecordException, ValueError) as e:
        raise CorruptBatchError(f"a batch's records do not parse: {e}", 0) from None


class _Record(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None  # None: a tombstone (the value itself is not needed)


def _batches(
    path: Path, size: int, verify_crc: bool = True
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The segment's batches up to ``size``, read in windows (a segment is up to
    segment.bytes, 1 GiB by default: never all in memory). A segment that does not
    hold whole, valid batches up to ``size`` is not cleaned: a cleaned copy of it would
    silently lose what follows the bad batch."""
    fd = os.open(path, os.O_RDONLY)
    try:
        scan = BatchScan(fd, 0, size, verify_crc=verify_crc)
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


@dataclass(frozen=True, slots=True)
class _Dirty:
    """The section the offset map read: [start, end), and each key's latest offset in
    it (sorted)."""

    start: int
    end: int
    latest: list[int]

    def keeps_nothing(self, h: BatchHeader) -> bool:
        """Whether every record of a batch in the section goes: none is its key's
        latest (records without a key, and those of an aborted transaction, go too)."""
        if h.base_offset < self.start or h.last_offset >= self.end:
            return False
        i = bisect.bisect_left(self.latest, h.base_offset)
        return i == len(self.latest) or self.latest[i] > h.last_offset


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
            for r in _records(batch):
                key = r.key
                if key is not None and r.offset >= start:
                    keys[key if len(key) < _SHORT_KEY else key_hash(key)] = r.offset
            end = h.last_offset + 1
    return keys, end


def group_segments(
    segments: Sequence[SegmentToClean], max_bytes: int
) -> list[tuple[SegmentToClean, ...]]:
    """Consecutive segments cleaned into one, as Kafka's cleaner groups them
    (``groupSegmentsBySize``): while their sizes before cleaning add up to no more than
    segment.bytes and their offsets stay within a segment's 32-bit relative offsets.
    Without it a compacted topic's log only ever grows in segments, each cleaning
    leaving them smaller."""
    groups: list[tuple[SegmentToClean, ...]] = []
    group: list[SegmentToClean] = []
    size = 0
    for seg in segments:
        if (
            group
            and size + seg.size <= max_bytes
            and seg.end_offset >= 0
            and group[-1].end_offset == seg.base_offset
            and seg.end_offset - 1 - group[0].base_offset <= 2**31 - 1
        ):
            group.append(seg)
            size += seg.size
            continue
        if group:
            groups.append(tuple(group))
        group, size = [seg], seg.size
    if group:
        groups.append(tuple(group))
    return groups


def txn_index_path(log_path: Path, suffix: str = "") -> Path:
    """The transaction index beside ``<base>.log`` (``suffix``: .cleaned, .swap)."""
    return log_path.with_name(log_path.name[: -len(".log")] + TXN_INDEX_SUFFIX + suffix)


def _merge_txn_indexes(group: tuple[SegmentToClean, ...], cleaned: Path, dropped: set[int]) -> None:
    """The group's transaction indexes as one, beside its cleaned segment (always
    written, empty if none: its swap then says the merged index is in place), without
    the aborted transactions whose markers went (``dropped``: their offsets)."""
    data = b""
    for seg in group:
        with contextlib.suppress(FileNotFoundError):
            raw = txn_index_path(seg.path).read_bytes()
            data += b"".join(
                e.encode() for e in decode_txn_index(raw) if e.last_offset not in dropped
            )
    with open(cleaned, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def clean_partition(job: CleanJob, now_ms: int) -> CleanResult:
    """Clean every segment of ``job`` up to where the offset map reaches, consecutive
    ones into one (``group_segments``); write each group as a .cleaned file beside its
    first segment, with its merged transaction index (the log swaps them in, see
    PartitionLog.swap_in)."""
    t0 = time.monotonic()
    throttle = _Throttle(job.io_bytes_per_s)
    keys, map_end = build_offset_map(
        job.segments, job.first_dirty_offset, job.max_map_entries, job.aborted
    )
    # what the map read, a batch of which keeps nothing unless one of its offsets is
    # some key's latest: batches holding none go without their records being read
    dirty = _Dirty(job.first_dirty_offset, map_end, sorted(keys.values()))
    is_aborted = _Aborted(job.aborted)
    # each producer's batches kept even emptied (Kafka's isBatchLastRecordOfProducer):
    # the one holding its last data offset (its last sequence), and its last marker if
    # that is of a newer epoch or it has no data batch left (its latest epoch: fencing)
    last_data: dict[int, tuple[int, int]] = {}  # producer -> (base offset, epoch)
    last_marker: dict[int, tuple[int, int]] = {}
    for seg in job.segments:  # (headers only: each batch's CRC is checked where it is read)
        for h, _ in _batches(seg.path, seg.size, verify_crc=False):
            if h.producer_id >= 0:
                into = last_marker if h.attributes & ATTR_CONTROL else last_data
                into[h.producer_id] = (h.base_offset, h.producer_epoch)
    last_batch = {base for base, _ in last_data.values()}
    for pid, (base, epoch) in last_marker.items():
        if pid not in last_data or epoch > last_data[pid][1]:
            last_batch.add(base)
    horizon = now_ms - job.delete_retention_ms
    swaps = []
    totals = (0, 0, 0, 0)  # bytes read and written, records read and kept
    # beyond what the map knows: cleaned next time
    within = [seg for seg in job.segments if seg.base_offset < map_end]
    indexes: list[BuiltIndex] = []
    txns = _Txns()  # (over the whole pass, in log order)
    dropped: list[frozenset[int]] = []
    try:
        for group in group_segments(within, job.max_segment_bytes):
            first = group[0].path
            cleaned = first.with_name(first.name + CLEANED_SUFFIX)
            swaps.append((group, cleaned))
            built = BuiltIndex(group[0].base_offset, job.index_interval_bytes)
            indexes.append(built)
            with open(cleaned, "wb") as out:
                copy = _Out(out, built)
                for seg in group:
                    counts = _clean_segment(
                        seg, copy, keys, dirty, horizon, is_aborted, last_batch, throttle, txns
                    )
                    totals = tuple(t + c for t, c in zip(totals, counts, strict=True))  # type: ignore[assignment]
                out.flush()
                os.fsync(out.fileno())
                throttle(out.tell())
            _merge_txn_indexes(group, txn_index_path(first, CLEANED_SUFFIX), txns.dropped_aborts)
            dropped.append(frozenset(a for a in txns.dropped_aborts if a >= group[0].base_offset))
    except BaseException:
        for group, cleaned in swaps:  # nothing half-written is left for a swap
            cleaned.unlink(missing_ok=True)
            txn_index_path(group[0].path, CLEANED_SUFFIX).unlink(missing_ok=True)
        raise
    read, written, seen, kept = totals
    return CleanResult(
        job.name, tuple(swaps), map_end, read, written, seen, kept, time.monotonic() - t0,
        tuple(indexes), tuple(dropped),
    )  # fmt: skip


@dataclass
class _Txns:
    """Transactions as a pass reads the log: producers whose open transaction has a
    batch in it, and the offsets of the ABORT markers it removes."""

    open: set[int] = field(default_factory=set)
    dropped_aborts: set[int] = field(default_factory=set)


def _marker_kind(batch: memoryview) -> int | None:
    """ABORT or COMMIT for a transaction marker (None: another control batch)."""
    try:
        for rec in decode_records(batch):
            kind = control_type(rec)
            return kind if kind in (ABORT, COMMIT) else None
    except ValueError:
        return None
    return None


class _Out:
    """The copy being written, and its indexes as each batch goes in."""

    def __init__(self, out: BinaryIO, built: BuiltIndex) -> None:
        self.out = out
        self.built = built

    def write(self, batch: bytes | memoryview, h: BatchHeader | None = None) -> int:
        """Write a batch (``h``: its header, if it is the one read)."""
        self.built.add(read_header(batch) if h is None else h)
        return self.out.write(batch)


def _clean_segment(
    seg: SegmentToClean,
    out: _Out,
    keys: dict[bytes, int],
    dirty: _Dirty,
    horizon: int,
    is_aborted: _Aborted,
    last_batch: set[int],
    throttle: _Throttle,
    txns: _Txns,
) -> tuple[int, int, int, int]:
    """Write ``seg`` without what the offset map replaces to ``out``; returns (bytes
    read, bytes written, records read, records kept)."""
    read = written = seen = kept = 0
    map_end = dirty.end
    for h, batch in _batches(seg.path, seg.size):
        read += len(batch)
        throttle(len(batch))
        if h.attributes & ATTR_CONTROL:
            # a transaction's marker once no batch of the transaction is left (seen
            # in this pass), past delete.retention.ms, and not its producer's last
            # batch (Kafka's cleaner; the records go first, the marker a pass later)
            had_batches = h.producer_id in txns.open
            txns.open.discard(h.producer_id)
            kind = _marker_kind(batch)
            if (
                kind is not None
                and not had_batches
                and seg.max_timestamp < horizon
                and h.last_offset < map_end
                and h.base_offset not in last_batch
            ):
                seen += h.record_count
                if kind == ABORT:
                    txns.dropped_aborts.add(h.base_offset)
                continue
            written += out.write(batch, h)
            continue
        if h.attributes & ATTR_TRANSACTIONAL:
            txns.open.add(h.producer_id)  # its marker stays while this batch does
        if dirty.keeps_nothing(h):
            seen += h.record_count
            if h.base_offset in last_batch:
                written += out.write(rebuild_batch(h, []))
            continue
        retained = []
        aborted = is_aborted(h)
        old_tombstones = seg.max_timestamp < horizon
        i = -1
        for i, r in enumerate(_records(batch)):
            offset, key = r.offset, r.key
            if aborted and offset < map_end:
                continue  # written by an aborted transaction
            if key is None:
                if offset < map_end:
                    continue  # no key: nothing to compact it by (Kafka drops it)
            else:
                latest = keys.get(key if len(key) < _SHORT_KEY else key_hash(key))
                if latest is not None and latest > offset:
                    continue  # replaced by a later record of the same key
                if old_tombstones and offset < map_end and r.value is None:
                    continue  # a tombstone past delete.retention.ms
            retained.append(i)
        seen += i + 1
        kept += len(retained)
        if len(retained) == h.record_count:
            written += out.write(batch, h)
        elif retained or h.base_offset in last_batch:
            raw = record_slices(batch) if retained else []
            written += out.write(rebuild_batch(h, [raw[i] for i in retained]))
    return read, written, seen, kept
