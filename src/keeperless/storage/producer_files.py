"""Kafka's files of a partition's producer state, byte for byte:

- ``<offset>.snapshot`` — the producers' state as of ``offset`` (written when a segment
  rolls and at a clean shutdown): version int16 (1), CRC-32C uint32 of what follows,
  then an int32-counted array of entries (producer id int64, epoch int16, last sequence
  int32, last offset int64, offset delta int32, timestamp int64, coordinator epoch
  int32, first offset of the open transaction int64 or -1). keeperless writes a
  producer's entry once per batch of its deduplication window (the last 5), oldest
  first, so that a retry of any of them after a restart is still known for a
  duplicate; Kafka writes only the last, and its reader, keeping a producer's last
  entry, reads these files as Kafka's.
- ``<base>.txnindex`` — beside each segment, the transactions aborted by a marker in
  that segment: entries of version int16 (0), producer id int64, first offset int64,
  last offset (the marker's) int64, last stable offset after it int64.

A snapshot whose CRC or length does not check is corrupt: it is deleted and an older
one (or the log itself) is used instead. A torn last entry of a transaction index is
ignored (the log's recovery re-derives the entries past the snapshot it starts from)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from keeperless.storage.durable import write_atomically

__all__ = [
    "SNAPSHOT_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "CorruptSnapshotError",
    "SnapshotEntry",
    "append_txn_index",
    "decode_snapshot",
    "decode_txn_index",
    "delete_snapshots",
    "encode_snapshot",
    "read_snapshot",
    "snapshot_offsets",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_VERSION = 1

_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ABORTED = struct.Struct(">hqqqq")


class CorruptSnapshotError(ValueError):
    """A producer snapshot file that cannot be trusted."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ABORTED.pack(
            0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshot files in ``directory``, lowest first."""
    found = []
    for p in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        stem = p.name[: -len(SNAPSHOT_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    body = _COUNT.pack(len(entries)) + b"".join(
        _ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    return _HEAD.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a snapshot")
    version, crc = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    body = data[_HEAD.size :]
    if crc32c.crc32c(body) != crc:
        raise CorruptSnapshotError("the CRC does not match the content")
    (count,) = _COUNT.unpack_from(body, 0)
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fill {len(body)} bytes")
    return [
        SnapshotEntry(*_ENTRY.unpack_from(body, _COUNT.size + i * _ENTRY.size))
        for i in range(count)
    ]


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptSnapshotError(str(e)) from None
    return decode_snapshot(data)


def write_snapshot(directory: Path, offset: int, data: bytes) -> None:
    """Write the snapshot at ``offset`` (``encode_snapshot``'s bytes) whole or not at all."""
    write_atomically(snapshot_path(directory, offset), data)


def delete_snapshots(
    directory: Path, above: int | None = None, below: int | None = None, keep_latest: bool = False
) -> None:
    """Delete the snapshots past ``above`` and those under ``below`` (all with neither);
    ``keep_latest`` spares the newest one."""
    offsets = snapshot_offsets(directory)
    latest = offsets[-1] if offsets and keep_latest else None
    for o in offsets:
        doomed = (above is None and below is None) or (
            (above is not None and o > above) or (below is not None and o < below)
        )
        if doomed and o != latest:
            snapshot_path(directory, o).unlink(missing_ok=True)


def decode_txn_index(data: bytes) -> list[AbortedTxn]:
    """The whole entries of a transaction index (a torn tail is left out)."""
    out = []
    for pos in range(0, len(data) - _ABORTED.size + 1, _ABORTED.size):
        version, pid, first, last, lso = _ABORTED.unpack_from(data, pos)
        if version != 0:
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def append_txn_index(path: Path, entry: AbortedTxn) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, entry.encode())
    finally:
        os.close(fd)
