"""One segment of a partition's log: its `.log` file and the sparse offset and time
indexes kept beside it (`.index`, `.timeindex`), and the file slices reads return."""

from __future__ import annotations

import asyncio
import os
import struct
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Protocol

from keeperless.protocol.records import BatchHeader
from keeperless.storage.batch_scan import BatchScan
from keeperless.storage.producer_files import TXN_INDEX_SUFFIX

__all__ = [
    "INDEX_ENTRY",
    "TIME_ENTRY",
    "BuiltIndex",
    "FileSlice",
    "Segment",
    "note_batch",
    "segment_name",
    "write_unwritten",
]

INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
# index entries held in memory before they are appended to their files (~8 k entries)
PENDING_BYTES = 64 * 1024
# how long index entries wait in memory at most while an event loop runs (then
# write_unwritten): Kafka's mapped indexes are readable at once, and kafka-dump-log reads
# a live segment's
INDEX_WRITE_S = 0.5
_CREATE = os.O_WRONLY | os.O_CREAT
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class _Indexed(Protocol):
    base_offset: int
    index: list[tuple[int, int]]
    time_index: list[tuple[int, int]]
    next_offset: int
    max_timestamp: int
    bytes_since_index: int


def note_batch(seg: _Indexed, pos: int, h: BatchHeader, interval: int) -> tuple[bool, bool]:
    """A batch at ``pos`` in a segment's in-memory indexes (an offset index entry every
    ``interval`` bytes, a time index entry at each new max timestamp); whether it made
    an entry in each."""
    indexed = timed = False
    if seg.bytes_since_index >= interval or not seg.index:
        seg.index.append((h.base_offset, pos))
        seg.bytes_since_index = 0
        indexed = True
    seg.bytes_since_index += h.size
    if h.max_timestamp > seg.max_timestamp:
        seg.max_timestamp = h.max_timestamp
        seg.time_index.append((h.max_timestamp, h.base_offset))
        timed = True
    seg.next_offset = h.last_offset + 1
    return indexed, timed


@dataclass(slots=True)
class BuiltIndex:
    """A segment's in-memory indexes, built as its file is written (the cleaner's copy):
    what ``note_batch`` makes of each batch, and the file's size then."""

    base_offset: int
    interval: int
    index: list[tuple[int, int]] = field(default_factory=list)
    time_index: list[tuple[int, int]] = field(default_factory=list)
    next_offset: int = -1
    max_timestamp: int = -1
    bytes_since_index: int = 0
    size: int = 0

    def __post_init__(self) -> None:
        self.next_offset = self.base_offset

    def add(self, h: BatchHeader) -> None:
        """The next batch written (at the end of what was written so far)."""
        note_batch(self, self.size, h, self.interval)
        self.size += h.size


@dataclass(frozen=True, slots=True)
class FileSlice:
    fd: int
    position: int
    length: int

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)


class Segment:
    __slots__ = (
        "base_offset",
        "bytes_since_index",
        "created_ms",
        "dir",
        "fd",
        "index",
        "max_timestamp",
        "next_offset",
        "pending",
        "size",
        "time_index",
    )

    def __init__(
        self, directory: Path, base_offset: int, created_ms: int, read_only: bool = False
    ) -> None:
        self.dir = directory
        self.base_offset = base_offset
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT | os.O_APPEND
        self.fd = os.open(directory / segment_name(base_offset, ".log"), flags, 0o644)
        # The one descriptor a segment keeps is its log's, as Kafka's (whose indexes are
        # mapped, their files closed): a broker's open files grow with its segments, not
        # three times that. The index entries made since the last write wait in
        # ``pending`` and are appended to the files by path, in runs (and at each sync).
        self.pending = (bytearray(), bytearray())  # (.index, .timeindex)
        if not read_only:  # (indexes are rebuilt from the log; a reader needs none)
            for suffix in (".index", ".timeindex"):
                os.close(os.open(directory / segment_name(base_offset, suffix), _CREATE, 0o644))
        self.size = os.fstat(self.fd).st_size
        self.index: list[tuple[int, int]] = []  # (offset, position), sparse
        self.time_index: list[tuple[int, int]] = []  # (max timestamp so far, offset)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms = created_ms
        self.bytes_since_index = 0

    def paths(self) -> list[Path]:
        return [
            self.dir / segment_name(self.base_offset, s)
            for s in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX)
        ]

    def close(self) -> None:
        """Close the log's descriptor. Index entries not yet written are dropped: they
        are rebuilt from the log at the next start (a segment whose indexes must be
        loaded then was synced before: at its roll, or at the clean stop)."""
        _unwritten.discard(self)
        os.close(self.fd)

    def note_batch(self, pos: int, h: BatchHeader, interval: int, persist: bool) -> None:
        """Update in-memory state and indexes for a batch written at ``pos``."""
        indexed, timed = note_batch(self, pos, h, interval)
        if persist and (indexed or timed) and not (self.pending[0] or self.pending[1]):
            _unwritten.add(self)
            _write_later()
        if persist and indexed:
            self.pending[0].extend(INDEX_ENTRY.pack(h.base_offset - self.base_offset, pos))
        if persist and timed:
            self.pending[1].extend(
                TIME_ENTRY.pack(h.max_timestamp, h.base_offset - self.base_offset)
            )
        if persist and len(self.pending[0]) + len(self.pending[1]) >= PENDING_BYTES:
            self.write_indexes(sync=False)

    def write_indexes(self, sync: bool, truncate: bool = False) -> None:
        """Append the pending index entries to the index files (and fsync them), or
        write the files with them alone (``truncate``)."""
        flags = _APPEND | os.O_TRUNC if truncate else _APPEND
        for suffix, buf in zip((".index", ".timeindex"), self.pending, strict=True):
            if not (buf or sync or truncate):
                continue
            fd = os.open(self.dir / segment_name(self.base_offset, suffix), flags, 0o644)
            try:
                if buf:
                    os.write(fd, buf)
                    buf.clear()
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        _unwritten.discard(self)

    def take_indexes(self, built: BuiltIndex) -> None:
        """Indexes built as the segment's file was written (by the cleaner, off the
        event loop), instead of reading its batches again."""
        self.index, self.time_index = built.index, built.time_index
        self.next_offset, self.max_timestamp = built.next_offset, built.max_timestamp
        self.bytes_since_index = built.bytes_since_index
        self.rewrite_indexes()

    def load_indexes(self, interval: int) -> bool:
        """The indexes as the segment's files hold them, checked as Kafka checks an index
        it loads (entries in order and inside the file) and as it finds a segment's next
        offset (the batches from the last offset entry on are read: the entry must be at
        a batch of its offset, and they must run whole and valid, CRCs checked, to the
        file's end). A short index costs a longer read, nothing else. False, with
        nothing loaded, if a check fails: the caller reads the segment's batches."""
        if self.size == 0:
            return False  # (nothing to read)
        base = self.base_offset
        raw, traw = (self._read_index(suffix) for suffix in (".index", ".timeindex"))
        # (a segment of batches has a time entry: its first batch's)
        if not raw or not traw or len(raw) % INDEX_ENTRY.size or len(traw) % TIME_ENTRY.size:
            return False
        index = [(base + rel, pos) for rel, pos in INDEX_ENTRY.iter_unpack(raw)]
        times = [(ts, base + rel) for ts, rel in TIME_ENTRY.iter_unpack(traw)]
        ordered = all(a[0] < b[0] and a[1] < b[1] for a, b in pairwise(index)) and all(
            a[0] < b[0] and a[1] <= b[1] for a, b in pairwise(times)
        )
        if not ordered or index[0][1] != 0 or index[0][0] < base or index[-1][1] >= self.size:
            return False
        # the batches from the last offset entry on are read again, and what they make
        # of the indexes is made again; what is before stays (both files were fsynced
        # before the recovery point passed them: at the roll, or at the clean stop)
        start, at = index[-1]
        self.index = index[:-1]
        self.time_index = [t for t in times if t[1] < start]
        self.max_timestamp = self.time_index[-1][0] if self.time_index else -1
        self.bytes_since_index = interval  # (the batch at ``at`` is indexed again)
        scan = BatchScan(self.fd, at, self.size, verify_crc=True)
        for pos, h, _ in scan:
            if pos == at and h.base_offset != start:
                break  # the entry names another batch: not this log's index (stop None)
            note_batch(self, pos, h, interval)
        # a time entry past the batches is not this log's: the earlier ones neither
        past = times[-1][1] >= self.next_offset
        if scan.stop is None or not scan.stop.clean or past:
            self.index, self.time_index, self.next_offset = [], [], base
            self.max_timestamp, self.bytes_since_index = -1, 0
            return False
        if self.index != index or self.time_index != times:
            self.rewrite_indexes()  # the entries a crash left unwritten, or stale ones
        return True

    def _read_index(self, suffix: str) -> bytes:
        try:
            return (self.dir / segment_name(self.base_offset, suffix)).read_bytes()
        except FileNotFoundError:
            return b""

    def sync_indexes(self) -> None:
        self.write_indexes(sync=True)

    def rewrite_indexes(self) -> None:
        """Write both index files again from the in-memory entries (not synced)."""
        self.pending[0][:] = b"".join(
            INDEX_ENTRY.pack(o - self.base_offset, p) for o, p in self.index
        )
        self.pending[1][:] = b"".join(
            TIME_ENTRY.pack(t, o - self.base_offset) for t, o in self.time_index
        )
        self.write_indexes(sync=False, truncate=True)


# the segments with index entries waiting in memory, in every log of this process, and
# the event loop a write_unwritten is due on
_unwritten: set[Segment] = set()
_due_on: list[asyncio.AbstractEventLoop | None] = [None]


def _write_later() -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # (no loop: a tool, a test; written at the next sync)
        return
    if _due_on[0] is not loop:
        _due_on[0] = loop
        loop.call_later(INDEX_WRITE_S, _write_due)


def _write_due() -> None:
    _due_on[0] = None
    write_unwritten()


def write_unwritten() -> int:
    """Append every segment's waiting index entries to its files (a node's periodic
    task); how many segments had some. One whose write fails keeps them: its next
    append, roll or flush writes them, and fails its log directory if it fails again."""
    done = 0
    for seg in list(_unwritten):
        try:
            seg.write_indexes(sync=False)
            done += 1
        except OSError:
            _unwritten.discard(seg)
    return done
