"""The metadata log on disk, as the Raft core's RaftLog: segments of record batches in
`__cluster_metadata-0/` plus snapshots `<20-digit end offset>-<10-digit epoch>.checkpoint`
(KIP-630). Appends are buffered by the OS; ``flush`` makes them durable."""

from __future__ import annotations

import bisect
import logging
import os
import time
from pathlib import Path

from keeperless.protocol.records import BatchHeader, CorruptBatchError, iter_batches
from keeperless.raft.log import CorruptSnapshotError
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.storage.durable import fsync_dir
from keeperless.storage.log import LogConfig, PartitionLog

__all__ = ["FileRaftLog", "snapshot_file_name"]

log = logging.getLogger(__name__)
SUFFIX = ".checkpoint"


def snapshot_file_name(sid: SnapshotId) -> str:
    return f"{sid.end_offset:020d}-{sid.epoch:010d}{SUFFIX}"


def _now_ms() -> int:
    return int(time.time() * 1000)


class FileRaftLog:
    def __init__(
        self, directory: Path, segment_bytes: int = 8 * 1024 * 1024, read_only: bool = False
    ) -> None:
        self.dir = directory
        self.read_only = read_only
        if not read_only:
            directory.mkdir(parents=True, exist_ok=True)
        # (base offset, last offset, epoch) of every batch, for epoch lookups: noted as
        # the segments are scanned on opening
        self._index: list[tuple[int, int, int]] = []
        self._bases: list[int] = []
        self.plog = PartitionLog(
            directory,
            LogConfig(segment_bytes=segment_bytes),
            _now_ms(),
            on_recovered_batch=self._remember_header,
            read_only=read_only,
        )
        self._snapshot = self._latest_snapshot()
        self._staged: SnapshotId | None = None
        self.truncations = 0  # lets an in-flight fsync tell that the log was cut
        if (
            not read_only
            and self._snapshot is not None
            and self.plog.log_end_offset < self._snapshot.end_offset
        ):
            # the snapshot is ahead of the segments (it was installed): start after it
            self.plog.reset_to(self._snapshot.end_offset, _now_ms())
            self._index, self._bases = [], []

    def _latest_snapshot(self) -> SnapshotId | None:
        found = []
        for p in self.dir.glob(f"*{SUFFIX}"):
            name = p.name[: -len(SUFFIX)]
            off, _, ep = name.partition("-")
            if off.isdigit() and ep.isdigit() and p.stat().st_size > 0:
                found.append(SnapshotId(int(off), int(ep)))
        if not self.read_only:
            for p in self.dir.glob(f"*{SUFFIX}.tmp"):
                p.unlink()  # a snapshot half-written at a crash is discarded
        return max(found, key=lambda s: s.end_offset) if found else None

    def _remember_header(self, h: BatchHeader) -> None:
        self._index.append((h.base_offset, h.last_offset, h.partition_leader_epoch))
        self._bases.append(h.base_offset)

    def _remember(self, e: Entry) -> None:
        self._index.append((e.base_offset, e.last_offset, e.epoch))
        self._bases.append(e.base_offset)

    # -- RaftLog --------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        if self._snapshot is not None:
            return max(self._snapshot.end_offset, self.plog.log_start_offset)
        return self.plog.log_start_offset

    @property
    def end_offset(self) -> int:
        return max(self.plog.log_end_offset, self.start_offset)

    @property
    def snapshot_id(self) -> SnapshotId | None:
        return self._snapshot

    def last_epoch(self) -> int:
        if self._index and self._index[-1][1] >= self.start_offset:
            return self._index[-1][2]
        return self._snapshot.epoch if self._snapshot else 0

    def end_offset_for_epoch(self, epoch: int) -> SnapshotId:
        start = self.start_offset
        for _base, last, ep in reversed(self._index):
            if last < start:
                break
            if ep <= epoch:
                return SnapshotId(last + 1, ep)
        if self._snapshot is not None and self._snapshot.epoch <= epoch:
            return self._snapshot
        return SnapshotId(start, 0)

    def read(self, offset: int, max_entries: int) -> list[Entry]:
        return self._read_from(max(offset, self.start_offset), max_entries)

    def _read_from(self, offset: int, max_entries: int) -> list[Entry]:
        out: list[Entry] = []
        if max_entries <= 0:
            return out
        for h, data in self.plog.batches(offset):
            out.append(
                Entry(h.base_offset, h.last_offset, h.partition_leader_epoch, bytes(data),
                      h.is_control)
            )  # fmt: skip
            if len(out) >= max_entries:
                break
        return out

    def append(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.base_offset != self.end_offset:
                raise ValueError(f"append at {e.base_offset}, log ends at {self.end_offset}")
            self.plog.append(e.data, list(iter_batches(e.data, verify_crc=False)), _now_ms())
            self._remember(e)

    def flush(self) -> None:
        self.plog.flush()

    def truncate_to(self, offset: int) -> None:
        self.truncations += 1
        self.plog.truncate_to(offset)
        while self._index and self._index[-1][1] >= offset:
            self._index.pop()
            self._bases.pop()
        log.info("Truncated the metadata log to offset %d", self.plog.log_end_offset)

    def snapshot_data(self) -> bytes:
        if self._snapshot is None:
            return b""
        return (self.dir / snapshot_file_name(self._snapshot)).read_bytes()

    def snapshot_chunk(self, position: int, max_bytes: int) -> tuple[bytes, int]:
        """A piece of the snapshot file (a FetchSnapshot answer), read at its position:
        the whole file is not read for every chunk."""
        if self._snapshot is None:
            return b"", 0
        with open(self.dir / snapshot_file_name(self._snapshot), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return os.pread(f.fileno(), max(0, min(max_bytes, size - position)), position), size

    def stage_snapshot(self, sid: SnapshotId, data: bytes) -> None:
        """Write and fsync a snapshot's file under a temporary name — from a worker thread,
        since at a million partitions that is 100+ MB — so that ``take_snapshot`` on the
        event loop only renames it."""
        self._write_tmp(sid, data)
        self._staged = sid

    def _write_tmp(self, sid: SnapshotId, data: bytes) -> Path:
        tmp = self.dir / (snapshot_file_name(sid) + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def _write_snapshot(self, sid: SnapshotId, data: bytes) -> None:
        path = self.dir / snapshot_file_name(sid)
        tmp = path.with_name(path.name + ".tmp")
        if self._staged != sid or not tmp.exists():
            self._write_tmp(sid, data)
        self._staged = None
        os.replace(tmp, path)
        fsync_dir(self.dir)
        for p in [*self.dir.glob(f"*{SUFFIX}"), *self.dir.glob(f"*{SUFFIX}.tmp")]:
            if p.name != path.name:
                p.unlink()  # only the newest snapshot is needed (and no abandoned ones)
        self._snapshot = sid

    def take_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        self._write_snapshot(snapshot, data)
        self.plog.delete_before(snapshot.end_offset)
        i = bisect.bisect_left(self._bases, self.plog.log_start_offset)
        del self._index[:i]
        del self._bases[:i]

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        try:
            for _ in iter_batches(data, verify_crc=True):
                pass
        except CorruptBatchError as e:
            raise CorruptSnapshotError(str(e)) from None
        self.truncations += 1
        self._write_snapshot(snapshot, data)
        self.plog.reset_to(snapshot.end_offset, _now_ms())
        self._index, self._bases = [], []

    def close(self) -> None:
        self.plog.close()
