"""A partition's log: segments `<20-digit base offset>.log` with offset and time indexes.

Appends take record batches whose offsets are already assigned and write them as
bytes. Reads return file slices (fd, position, length), served with sendfile. On open,
the segments past the recovery point are validated batch by batch (header and CRC) and
a torn tail left by a crash is truncated and reported."""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from keeperless.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER_SIZE,
    BatchHeader,
    decode_records,
    read_header,
)
from keeperless.storage.batch_scan import BatchScan
from keeperless.storage.dir_failure import LogDirFailure, log_dir_failed
from keeperless.storage.durable import fsync_dir, fsync_file, write_atomically
from keeperless.storage.partition_dirs import PARTITION_METADATA
from keeperless.storage.producer_files import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    append_txn_index,
    decode_txn_index,
)
from keeperless.storage.sealing import Sealing
from keeperless.storage.segment import (
    BuiltIndex,
    FileSlice,
    Segment,
    segment_name,
)
from keeperless.storage.swaps import finish_swaps

__all__ = ["FileSlice", "LogConfig", "PartitionLog", "segment_name"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _guarded(
    fn: Callable[Concatenate[PartitionLog, _P], _R],
) -> Callable[Concatenate[PartitionLog, _P], _R]:
    """A write of the log: refused once the log failed; a failure fails the log."""

    def wrapper(self: PartitionLog, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        self._check_writable()
        try:
            return fn(self, *args, **kwargs)
        except LogDirFailure:
            raise
        except OSError as e:
            raise self._fail(e) from None

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


log = logging.getLogger(__name__)
_RETIRED_FD_MS = 60_000  # how long a replaced segment stays open for fetches sending it


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3_600_000
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    flush_interval_messages: int = 2**63 - 1


class PartitionLog:
    """One partition's segmented log. Not thread-safe: owned by one event loop."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        now_ms: int,
        on_recovered_batch: Callable[[BatchHeader], None] | None = None,
        read_only: bool = False,
        clean_shutdown: bool = False,
        recovery_point: int = 0,
        fresh: bool = False,
    ) -> None:
        """``read_only`` opens an existing log for tools: nothing is created, repaired or
        rewritten, so a running node's files are left exactly as they are.
        ``clean_shutdown``: the node knows its last stop was clean (a torn tail then
        points at the disk, and the warning says so). ``recovery_point``: the segments
        wholly below it were flushed (as the log rolled), and after a clean stop the
        active one too if it starts below it: their indexes are loaded, not rebuilt
        from every batch (``replayed_from`` says from where batches were passed to
        ``on_recovered_batch``). ``fresh``: the caller has just made ``directory``, empty
        but for a ``partition.metadata`` written without an fsync; none of its names is
        durable until ``sync_dir`` (done off the loop by the caller, or by the first
        flush or roll: nothing flushed ever sits in a directory a power loss may undo)."""
        self.dir = directory
        self.dir_pending = fresh
        self.clean_shutdown = clean_shutdown
        self.config = config
        self.read_only = read_only
        if not read_only and not directory.exists():
            directory.mkdir(parents=True)
            fsync_dir(directory.parent)
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._unflushed = 0
        self._failed: LogDirFailure | None = None  # a failed write: never write again
        self.truncated_bytes = 0
        # a log start offset inside the first segment (DeleteRecords), kept across
        # restarts by the broker's log-start-offset-checkpoint
        self._start: int | None = None
        self._retired: list[tuple[int, Segment]] = []  # replaced by cleaned copies
        self._generation = 0
        # called with the new segment's base offset when the log rolls, before anything
        # is written to it; what it returns is called once the rolled segment is
        # durable (the producers' state is snapshotted there: a recovery point)
        self.on_roll: Callable[[int], Callable[[], None]] | None = None
        self._sealing = Sealing()  # rolled segments being made durable
        self.replayed_from = 0
        if fresh:  # (no segment, no swap to finish)
            self._segments, self._bases = [Segment(directory, 0, now_ms)], [0]
        else:
            self._open(now_ms, on_recovered_batch, recovery_point)

    def sync_dir(self) -> None:
        """Make a fresh directory durable: ``partition.metadata``'s bytes, the names in
        the directory and its own name in the log directory. Only fsyncs: another thread
        may run it (a relocation meanwhile leaves it pending)."""
        directory = self.dir
        fsync_file(directory / PARTITION_METADATA)
        fsync_dir(directory)
        fsync_dir(directory.parent)
        if self.dir is directory:
            self.dir_pending = False

    # -- opening and recovery ------------------------------------------------------

    def _open(
        self, now_ms: int, on_batch: Callable[[BatchHeader], None] | None, recovery_point: int
    ) -> None:
        if not self.read_only:
            finish_swaps(self.dir)
        bases = sorted(int(p.name[:20]) for p in self.dir.glob("*.log") if p.name[:20].isdigit())
        trusting = not self.read_only
        interval = self.config.index_interval_bytes
        for i, base in enumerate(bases):
            seg = Segment(self.dir, base, now_ms, self.read_only)
            last = i == len(bases) - 1
            # below the recovery point, as Kafka's recovery: the indexes, checked; from
            # the first segment read on, every batch (the producers' state replays them)
            end = (base if self.clean_shutdown else None) if last else bases[i + 1]
            trusting = trusting and end is not None and end <= recovery_point
            if trusting and seg.load_indexes(interval):
                self.replayed_from = seg.next_offset
                self._segments.append(seg)
                continue
            trusting = False
            # every CRC, as Kafka's recovery past the recovery point: a segment rolled
            # just before a power loss may not have been made durable yet (Sealing)
            whole = self._scan(seg, validate=True, on_batch=on_batch)
            self._segments.append(seg)
            if not whole and not last:
                # as Kafka's recovery: the log ends at its first damaged batch; what
                # follows would be served with a hole before it
                self._drop_after(seg, bases[i + 1 :], now_ms)
                break
        if not self._segments:
            if self.read_only:
                raise FileNotFoundError(f"{self.dir} holds no log segment")
            self._segments.append(Segment(self.dir, 0, now_ms))
            fsync_dir(self.dir)
        self._bases = [s.base_offset for s in self._segments]

    def _drop_after(self, seg: Segment, later: list[int], now_ms: int) -> None:
        log.warning(
            "Partition log %s: deleting %d segment(s) after %s (from %s on): the log ends "
            "where its first damaged batch was",
            self.dir.name,
            len(later),
            segment_name(seg.base_offset, ".log"),
            segment_name(later[0], ".log"),
        )
        if self.read_only:
            return  # served up to the damage; the node repairs
        for base in later:
            gone = Segment(self.dir, base, now_ms)
            self._drop(gone)
        fsync_dir(self.dir)

    @property
    def generation(self) -> int:
        """Bumped by every truncation: a cleaning started before one must not land (its
        offset map saw records that are gone)."""
        return self._generation

    @_guarded
    def swap_in(
        self,
        group: list[tuple[int, int]],
        cleaned: Path,
        now_ms: int,
        generation: int,
        built: BuiltIndex | None = None,
    ) -> bool:
        """Replace the consecutive segments of ``group`` ((base offset, size) each) by
        their cleaned copy if the log is still the one that was cleaned (no truncation
        since, the segments the same and none the active one); otherwise the copy is
        dropped. The copy's merged transaction index is renamed ``.swap``, then the
        copy (from here a crash is finished at restart); the other segments go, the
        index and the copy are renamed over the first's. Readers of the old files (a
        fetch being sent) keep their descriptors a while. ``built``: the copy's indexes
        as the cleaner wrote it (else its batches are read again, on the event loop)."""
        base = group[0][0]
        index_cleaned = self.dir / segment_name(base, TXN_INDEX_SUFFIX + ".cleaned")
        i = bisect.bisect_left(self._bases, base)
        ok = (
            generation == self._generation
            and i + len(group) < len(self._segments)
            and all(
                self._bases[i + k] == b and self._segments[i + k].size == size
                for k, (b, size) in enumerate(group)
            )
            # segments merged only with their merged transaction index
            and (len(group) == 1 or index_cleaned.exists())
        )
        if not ok:
            cleaned.unlink(missing_ok=True)
            index_cleaned.unlink(missing_ok=True)
            return False
        old = self._segments[i : i + len(group)]
        if built is not None and (built.base_offset, built.size) != (base, cleaned.stat().st_size):
            built = None  # not this copy's: read it
        index = self.dir / segment_name(base, TXN_INDEX_SUFFIX)
        index_swap = self.dir / segment_name(base, TXN_INDEX_SUFFIX + ".swap")
        merged = index_cleaned.exists()  # (always written by this version's cleaner)
        if merged:
            os.replace(index_cleaned, index_swap)
        os.replace(cleaned, self.dir / segment_name(base, ".log.swap"))
        fsync_dir(self.dir)
        for seg in old[1:]:
            for path in seg.paths():
                path.unlink(missing_ok=True)
        if merged:
            # over the first segment's, even empty (a crash after it leaves an empty
            # index, never the first segment's own entries beside a copy whose markers
            # may be gone)
            empty = index_swap.stat().st_size == 0
            os.replace(index_swap, index)
            if empty:
                index.unlink()
        # the copy keeps its segments' modification time (Kafka's cleaner sets it), which
        # time retention reads of a segment left empty
        mtime = max(os.fstat(seg.fd).st_mtime for seg in old)
        swap = self.dir / segment_name(base, ".log.swap")
        os.utime(swap, (mtime, mtime))
        for path in old[0].paths()[1:3]:  # its indexes, never beside the copy
            path.unlink(missing_ok=True)
        os.replace(swap, self.dir / segment_name(base, ".log"))
        fsync_dir(self.dir)
        seg = Segment(self.dir, base, old[0].created_ms)
        if built is not None:
            seg.take_indexes(built)
        else:
            # headers only: the cleaner wrote the copy from batches whose checksums it
            # verified (a checksum of every batch here held the event loop for a while)
            self._scan(seg, validate=False, on_batch=None)
        if seg.size == 0:
            seg.next_offset = old[-1].next_offset  # emptied: it still spans its offsets
        self._segments[i : i + len(group)] = [seg]
        self._bases = [s.base_offset for s in self._segments]
        for gone in old:
            self._retire(gone, now_ms)
        return True

    def _retire(self, seg: Segment, now_ms: int) -> None:
        """Close a replaced segment's descriptors later: a fetch may still send from it."""
        self._retired.append((now_ms, seg))
        while self._retired and self._retired[0][0] < now_ms - _RETIRED_FD_MS:
            self._retired.pop(0)[1].close()

    def cleanable_segments(self, below: int) -> list[tuple[Path, int, int, int, int]]:
        """(path, base offset, size, max timestamp, end offset) of the segments a cleaner
        may clean: every one but the active segment, wholly below ``below`` (the high
        watermark). The end is where the next segment starts."""
        segs = self._segments
        return [
            (self.dir / segment_name(seg.base_offset, ".log"), seg.base_offset, seg.size,
             seg.max_timestamp, segs[i + 1].base_offset)
            for i, seg in enumerate(segs[:-1])
            if seg.next_offset <= below
        ]  # fmt: skip

    def _scan(
        self, seg: Segment, validate: bool, on_batch: Callable[[BatchHeader], None] | None
    ) -> bool:
        """Rebuild a segment's indexes from its batch headers (``validate``: and verify
        every CRC). The segment ends at its last whole, valid batch: an incomplete batch
        at the end of the file or a corrupt one (and all after it) is truncated and
        reported, saying which. False if it was (or, read-only, would be)."""
        interval = self.config.index_interval_bytes
        scan = BatchScan(seg.fd, 0, seg.size, verify_crc=validate)
        for pos, h, _ in scan:
            seg.note_batch(pos, h, interval, persist=False)
            if on_batch is not None:
                on_batch(h)
        stop = scan.stop
        assert stop is not None
        if self.read_only:
            seg.size = stop.position  # serve only what is valid; repair is the node's job
            return stop.clean
        if not stop.clean:
            lost = seg.size - stop.position
            self.truncated_bytes += lost
            if stop.incomplete:
                why = "a write cut short, as a crash or power loss leaves"
                if self.clean_shutdown:
                    why = "although the last shutdown was clean: check the disk"
            else:
                why = "the data was damaged on disk or by another program"
            log.warning(
                "Partition log %s: truncating %d bytes at position %d of segment %s: %s (%s)",
                self.dir.name,
                lost,
                stop.position,
                segment_name(seg.base_offset, ".log"),
                stop.reason,
                why,
            )
            os.ftruncate(seg.fd, stop.position)
            seg.size = stop.position
        seg.rewrite_indexes()
        return stop.clean

    # -- state ----------------------------------------------------------------------

    @property
    def first_segment_base(self) -> int:
        """The first segment's base offset: where the log starts, even when the cleaner
        removed the segment's first records (Kafka keeps logStartOffset; a reader at an
        offset the cleaner emptied is served the next record, not OFFSET_OUT_OF_RANGE)."""
        return self._segments[0].base_offset

    @property
    def log_start_offset(self) -> int:
        base = self.first_segment_base
        return base if self._start is None else max(base, self._start)

    @_guarded
    def advance_start(self, offset: int, now_ms: int) -> bool:
        """Move the log start offset up to ``offset`` (DeleteRecords, or a follower
        following its leader's): nothing below is served again, and the segments wholly
        below it are deleted. Past the end, the log starts over there, empty. True if
        the start moved."""
        if offset <= self.log_start_offset:
            return False
        if offset > self.log_end_offset:
            self.reset_to(offset, now_ms)
        self._start = offset
        self.delete_below_start()
        log.info("Moved the log start offset of %s to %d", self.dir.name, offset)
        return True

    def delete_below_start(self) -> int:
        """Delete the segments that hold nothing at or above the log start offset."""
        deleted = 0
        # (Kafka's rule: while the next segment starts at or below the start - a cleaned
        # segment can end well below the next one's base, and the start must not jump)
        while len(self._segments) > 1 and self._segments[1].base_offset <= self.log_start_offset:
            self._drop(self._segments.pop(0))
            self._bases.pop(0)
            deleted += 1
        if deleted:
            fsync_dir(self.dir)
        return deleted

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    def batch_headers(self, active_only: bool = False) -> Iterator[BatchHeader]:
        """Every batch header, oldest first (reads headers only)."""
        for seg in self._segments[-1:] if active_only else self._segments:
            pos = 0
            while pos < seg.size:
                h = read_header(os.pread(seg.fd, BATCH_HEADER_SIZE, pos))
                yield h
                pos += h.size

    def batches(
        self, start: int, end: int | None = None
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every whole batch holding an offset at or after ``start`` (and starting below
        ``end``), with its bytes: what a coordinator or the metadata log replays. Read in
        windows, whatever the batches' sizes; the log must not change meanwhile."""
        i = max(0, bisect.bisect_right(self._bases, start) - 1)
        for seg in self._segments[i:]:
            j = bisect.bisect_right(seg.index, (start, 2**62)) - 1
            pos = seg.index[j][1] if j >= 0 else 0
            for _, h, data in BatchScan(seg.fd, pos, seg.size, verify_crc=False, with_data=True):
                if end is not None and h.base_offset >= end:
                    return
                if h.last_offset >= start:
                    yield h, data

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- append ---------------------------------------------------------------------

    def _fail(self, error: OSError) -> LogDirFailure:
        self._failed = log_dir_failed(self.dir, error)
        return self._failed

    @property
    def closed(self) -> bool:
        """Closed (its partition deleted, or the broker stopping): nothing to read."""
        return not self._segments

    @property
    def writable(self) -> bool:
        return self._failed is None and not self.read_only

    def _check_writable(self) -> None:
        if self._failed is not None:
            raise self._failed

    def append(
        self, data: bytes | bytearray, headers: list[tuple[int, BatchHeader]], now_ms: int
    ) -> None:
        """Append batches (offsets already assigned) given with their parsed headers."""
        if not headers or headers[-1][0] + headers[-1][1].size != len(data):
            # an invariant: bytes the headers do not account for would be a torn batch
            # in the middle of the log
            raise ValueError(f"{len(data)} bytes to append do not end with their last batch")
        self._check_writable()
        seg = self._segments[-1]
        try:
            if seg.size > 0 and (
                seg.size + len(data) > self.config.segment_bytes
                or now_ms - seg.created_ms >= self.config.segment_ms
            ):
                seg = self._roll(now_ms)
            start = seg.size
            try:
                written = os.write(seg.fd, data)
                if written != len(data):
                    raise OSError(
                        errno.ENOSPC,
                        f"{os.strerror(errno.ENOSPC)} (a short write: {written} of "
                        f"{len(data)} bytes)",
                    )
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(seg.fd, start)  # leave no torn batch behind if we can
                raise
        except OSError as e:
            raise self._fail(e) from None
        seg.size += written
        interval = self.config.index_interval_bytes
        try:
            for rel, h in headers:
                seg.note_batch(start + rel, h, interval, persist=True)
                self._unflushed += h.record_count
        except OSError as e:  # (the index is rebuilt from the log at recovery)
            raise self._fail(e) from None
        if self._unflushed >= self.config.flush_interval_messages:
            self.flush()

    def _roll(self, now_ms: int) -> Segment:
        if self.dir_pending:
            self.sync_dir()
        old = self._segments[-1]
        seg = Segment(self.dir, old.next_offset, now_ms)
        seg.next_offset = old.next_offset
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        log.info(
            "Rolled partition log %s to segment %s",
            self.dir.name,
            segment_name(seg.base_offset, ".log"),
        )
        if self.on_roll is None:
            # (the Raft log: its flush, from a thread, fsyncs the active segment only)
            os.fsync(old.fd)
            old.sync_indexes()  # (loaded, not rebuilt, at the next start)
            fsync_dir(self.dir)  # the new segment's name survives a crash
        else:
            generation = self._generation
            self._sealing.seal(
                self.dir,
                old,
                self.on_roll(seg.base_offset),
                lambda: generation == self._generation and not self.closed and not self._failed,
                self._fail,  # (the next write raises it)
            )
        return seg

    # -- the aborted transactions' index (.txnindex beside each segment) -------------

    def append_aborted(self, entry: AbortedTxn) -> None:
        """An ABORT marker was just appended: index it beside the active segment."""
        path = self.dir / segment_name(self._segments[-1].base_offset, TXN_INDEX_SUFFIX)
        try:
            append_txn_index(path, entry)
        except OSError as e:
            raise self._fail(e) from None

    def aborted_txns(self) -> list[AbortedTxn]:
        """Every segment's indexed aborted transactions, by marker offset, each once (a
        crash amid a swap of cleaned segments can leave a segment the cleaned copy did
        not reach, beside the copy's merged index)."""
        out: dict[AbortedTxn, None] = {}
        for seg in self._segments:
            path = self.dir / segment_name(seg.base_offset, TXN_INDEX_SUFFIX)
            with contextlib.suppress(FileNotFoundError):
                out.update(dict.fromkeys(decode_txn_index(path.read_bytes())))
        return sorted(out, key=lambda a: a.last_offset)

    def rewrite_txn_indexes(self, entries: list[AbortedTxn], from_offset: int) -> None:
        """Make the indexes hold, from ``from_offset`` on, exactly ``entries`` (by the
        segment holding each marker); what a segment's index says of markers below
        ``from_offset`` stays (a recovery replaying from a snapshot inside a segment
        dropped the aborts indexed before it, and a later leader served their records
        as committed)."""
        for i, seg in enumerate(self._segments):
            end = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else 2**63
            if end <= from_offset:
                continue
            path = self.dir / segment_name(seg.base_offset, TXN_INDEX_SUFFIX)
            kept: list[AbortedTxn] = []
            if seg.base_offset < from_offset:
                with contextlib.suppress(FileNotFoundError):
                    kept = [
                        e
                        for e in decode_txn_index(path.read_bytes())
                        if e.last_offset < from_offset
                    ]
            ours = [e for e in entries if seg.base_offset <= e.last_offset < end]
            mine = b"".join(e.encode() for e in kept + ours)
            if mine:
                write_atomically(path, mine)
            elif path.exists():
                path.unlink()

    def sync_txn_indexes(self) -> None:
        """fsync the indexes of the last two segments (before a snapshot is written)."""
        for seg in self._segments[-2:]:
            fsync_file(self.dir / segment_name(seg.base_offset, TXN_INDEX_SUFFIX))

    def active_fd(self) -> int:
        """A duplicate of the active segment's descriptor, for the caller to fsync off
        the event loop (and close): the next flush then has little left to write."""
        return os.dup(self._segments[-1].fd)

    def flush(self, indexes: bool = False) -> None:
        """fsync the active segment (and its indexes: a clean stop's, loaded at start),
        and the rolled segments still being made durable."""
        self._check_writable()
        try:
            if self.dir_pending:
                self.sync_dir()
            self._sealing.flush(self.dir)
            os.fsync(self._segments[-1].fd)
            if indexes:
                self._segments[-1].sync_indexes()
        except OSError as e:
            raise self._fail(e) from None
        self._unflushed = 0

    # -- read -----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FileSlice | None:
        """The slice starting at the batch holding ``offset``: at least that whole batch
        (even if larger than ``max_bytes``), then up to ``max_bytes`` — which may end
        inside a batch, as Kafka's fetches do; readers drop the partial batch at the end.
        None at or past the end. An I/O error fails the log's directory, as a write's
        does (Kafka's maybeHandleIOException around reads)."""
        limit = self.log_end_offset if max_offset is None else max_offset
        if offset >= limit:
            return None
        try:
            return self._read(offset, max_bytes, max_offset)
        except LogDirFailure:
            raise
        except OSError as e:
            raise self._fail(e) from None

    def _read(self, offset: int, max_bytes: int, max_offset: int | None) -> FileSlice | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        while i < len(self._segments):
            seg = self._segments[i]
            if offset < seg.next_offset and seg.size > 0:
                break
            i += 1
        else:
            return None
        j = bisect.bisect_right(seg.index, (offset, 2**62)) - 1
        pos = seg.index[j][1] if j >= 0 else 0
        first_size = 0
        while pos < seg.size:
            h = read_header(os.pread(seg.fd, BATCH_HEADER_SIZE, pos))
            if h.last_offset >= offset:
                first_size = h.size
                break
            pos += h.size
        if first_size == 0:
            return None
        end = seg.size
        if max_offset is not None and max_offset < seg.next_offset:
            end = self._position_of(seg, max_offset, pos)
        length = max(first_size, min(max_bytes, end - pos))
        return FileSlice(seg.fd, pos, min(length, end - pos) if end > pos else first_size)

    def _position_of(self, seg: Segment, offset: int, start: int) -> int:
        pos = start
        while pos < seg.size:
            h = read_header(os.pread(seg.fd, BATCH_HEADER_SIZE, pos))
            if h.base_offset >= offset:
                return pos
            pos += h.size
        return seg.size

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= the target.

        The time index finds the batch; only that batch's records are decoded (Kafka's
        ListOffsets answers the exact record, not its batch).
        """
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            k = bisect.bisect_left(seg.time_index, (timestamp_ms, -1))
            start_offset = seg.time_index[k - 1][1] if k > 0 else seg.base_offset
            j = bisect.bisect_right(seg.index, (start_offset, 2**62)) - 1
            pos = seg.index[j][1] if j >= 0 else 0
            while pos < seg.size:
                h = read_header(os.pread(seg.fd, BATCH_HEADER_SIZE, pos))
                if h.max_timestamp >= timestamp_ms:
                    found = self._record_at_or_after(seg, pos, h, timestamp_ms)
                    if found is not None:
                        return found
                pos += h.size
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp (-3 lookup)."""
        best = max(self._segments, key=lambda sg: sg.max_timestamp, default=None)
        if best is None or best.max_timestamp < 0:
            return None
        pos = 0
        while pos < best.size:
            h = read_header(os.pread(best.fd, BATCH_HEADER_SIZE, pos))
            if h.max_timestamp == best.max_timestamp:
                return self._record_at_or_after(best, pos, h, best.max_timestamp)
            pos += h.size
        return None

    def _record_at_or_after(
        self, seg: Segment, pos: int, h: BatchHeader, timestamp_ms: int
    ) -> tuple[int, int] | None:
        if h.attributes & ATTR_TIMESTAMP_TYPE:  # LogAppendTime: every record has max_timestamp
            return max(h.base_offset, self.log_start_offset), h.max_timestamp
        for rec in decode_records(os.pread(seg.fd, h.size, pos)):
            if rec.timestamp >= timestamp_ms and rec.offset >= self.log_start_offset:
                return rec.offset, rec.timestamp
        return None

    # -- retention and deletion -----------------------------------------------------

    @_guarded
    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole old segments by time and size; return how many were deleted."""
        deleted = 0
        cfg = self.config
        while len(self._segments) > 1:
            seg = self._segments[0]
            total = self.size_bytes
            newest = seg.max_timestamp
            if seg.size == 0:  # (emptied by the cleaner: its file's time, as Kafka's)
                newest = int(os.fstat(seg.fd).st_mtime * 1000)
            by_time = cfg.retention_ms >= 0 and 0 <= newest < now_ms - cfg.retention_ms
            by_size = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
            if not (by_time or by_size):
                break
            seg.close()
            for p in seg.paths():
                p.unlink(missing_ok=True)
            self._segments.pop(0)
            self._bases.pop(0)
            deleted += 1
            log.info(
                "Deleted segment %s of %s by retention (%s)",
                segment_name(seg.base_offset, ".log"),
                self.dir.name,
                "time" if by_time else "size",
            )
        return deleted

    @_guarded
    def truncate_to(self, offset: int) -> None:
        """Remove every batch not wholly below ``offset`` (Raft log divergence)."""
        self._generation += 1
        dropped = False
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._drop(self._segments.pop())
            self._bases.pop()
            dropped = True
        if dropped:
            fsync_dir(self.dir)  # a removed segment must not come back after a crash
        seg = self._segments[-1]
        if offset >= seg.next_offset:
            return
        j = bisect.bisect_right(seg.index, (offset, 2**62)) - 1
        pos = seg.index[j][1] if j >= 0 else 0
        while pos < seg.size:
            h = read_header(os.pread(seg.fd, BATCH_HEADER_SIZE, pos))
            if h.last_offset >= offset:
                break
            pos += h.size
        os.ftruncate(seg.fd, pos)
        os.fsync(seg.fd)
        seg.size = pos
        seg.index = [(o, p) for o, p in seg.index if p < pos]
        seg.time_index = [(t, o) for t, o in seg.time_index if o < offset]
        seg.next_offset = seg.base_offset
        seg.max_timestamp = -1
        if pos:
            # the last remaining batch tells the next offset
            last = seg.index[-1][1] if seg.index else 0
            while last < pos:
                h = read_header(os.pread(seg.fd, BATCH_HEADER_SIZE, last))
                seg.next_offset = h.last_offset + 1
                last += h.size
        seg.max_timestamp = max((t for t, _ in seg.time_index), default=-1)
        seg.rewrite_indexes()

    @_guarded
    def delete_before(self, offset: int) -> None:
        """Delete whole segments that lie entirely below ``offset`` (after a snapshot)."""
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            self._drop(self._segments.pop(0))
            self._bases.pop(0)

    @_guarded
    def reset_to(self, offset: int, now_ms: int) -> None:
        """Drop everything and start an empty log at ``offset`` (a snapshot was installed)."""
        self._generation += 1
        for seg in self._segments:
            self._drop(seg)
        seg = Segment(self.dir, offset, now_ms)
        fsync_dir(self.dir)
        seg.next_offset = offset
        self._segments = [seg]
        self._bases = [offset]
        if self._start is not None and self._start < offset:
            self._start = None

    def _drop(self, seg: Segment) -> None:
        seg.close()
        for p in seg.paths():
            p.unlink(missing_ok=True)

    def relocate(self, directory: Path) -> None:
        """Its directory was renamed to ``directory`` (a moved replica's copy put in
        place): later files (rolled segments, indexes, swaps) go there; open files stay."""
        self.dir = directory
        for seg in self._segments:
            seg.dir = directory
        for _, seg in self._retired:
            seg.dir = directory

    def close(self) -> None:
        self._sealing.close()
        for seg in self._segments:
            seg.close()
        self._segments = []
        for _, seg in self._retired:
            seg.close()
        self._retired = []

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)
