"""The replicated log as the Raft core reads and changes it, and an in-memory
implementation (tests, simulation). Appends are buffered; the driver makes them
durable and reports it with ``RaftCore.on_persisted``."""

from __future__ import annotations

import bisect
from typing import Protocol

from keeperless.raft.messages import Entry, SnapshotId

__all__ = ["CorruptSnapshotError", "MemoryLog", "RaftLog"]


class CorruptSnapshotError(ValueError):
    """A fetched snapshot's bytes are not whole, valid batches: it is not installed."""


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def snapshot_id(self) -> SnapshotId | None: ...
    def last_epoch(self) -> int: ...
    def end_offset_for_epoch(self, epoch: int) -> SnapshotId:
        """(end offset, epoch) of the largest epoch <= ``epoch`` in the log."""
        ...

    def read(self, offset: int, max_entries: int) -> list[Entry]: ...
    def append(self, entries: list[Entry]) -> None: ...
    def truncate_to(self, offset: int) -> None:
        """Remove every entry not wholly below ``offset``."""
        ...

    def snapshot_data(self) -> bytes: ...
    def snapshot_chunk(self, position: int, max_bytes: int) -> tuple[bytes, int]:
        """Up to ``max_bytes`` of the snapshot from ``position``, and its whole size."""
        ...

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Replace the log by a snapshot (the log then starts at its end offset); raises
        CorruptSnapshotError, changing nothing, if ``data`` is damaged."""
        ...

    def take_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Record a snapshot of the committed prefix and drop the entries it covers."""
        ...


class MemoryLog:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._bases: list[int] = []
        self._snapshot: SnapshotId | None = None
        self._snapshot_data = b""

    @property
    def start_offset(self) -> int:
        return self._snapshot.end_offset if self._snapshot else 0

    @property
    def end_offset(self) -> int:
        return self.entries[-1].last_offset + 1 if self.entries else self.start_offset

    @property
    def snapshot_id(self) -> SnapshotId | None:
        return self._snapshot

    def last_epoch(self) -> int:
        if self.entries:
            return self.entries[-1].epoch
        return self._snapshot.epoch if self._snapshot else 0

    def end_offset_for_epoch(self, epoch: int) -> SnapshotId:
        for e in reversed(self.entries):
            if e.epoch <= epoch:
                return SnapshotId(e.last_offset + 1, e.epoch)
        if self._snapshot is not None and self._snapshot.epoch <= epoch:
            return self._snapshot
        return SnapshotId(self.start_offset, 0)

    def read(self, offset: int, max_entries: int) -> list[Entry]:
        i = bisect.bisect_right(self._bases, offset) - 1
        i = max(i, 0)
        out: list[Entry] = []
        while i < len(self.entries) and len(out) < max_entries:
            if self.entries[i].last_offset >= offset:
                out.append(self.entries[i])
            i += 1
        return out

    def append(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.base_offset != self.end_offset:
                raise ValueError(f"append at {e.base_offset}, log ends at {self.end_offset}")
            self.entries.append(e)
            self._bases.append(e.base_offset)

    def truncate_to(self, offset: int) -> None:
        while self.entries and self.entries[-1].last_offset >= offset:
            self.entries.pop()
            self._bases.pop()

    def snapshot_data(self) -> bytes:
        return self._snapshot_data

    def snapshot_chunk(self, position: int, max_bytes: int) -> tuple[bytes, int]:
        return self._snapshot_data[position : position + max_bytes], len(self._snapshot_data)

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        self.entries = []
        self._bases = []
        self._snapshot = snapshot
        self._snapshot_data = data

    def take_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        self._snapshot = snapshot
        self._snapshot_data = data
        while self.entries and self.entries[0].last_offset < snapshot.end_offset:
            self.entries.pop(0)
            self._bases.pop(0)
