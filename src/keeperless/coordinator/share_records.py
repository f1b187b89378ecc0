"""The records of the share coordinator in ``__share_group_state`` (KIP-932), laid out as
Kafka's share-coordinator module writes them: a key (int16 version, then the
non-flexible ShareSnapshotKey or ShareUpdateKey: group id, topic id, partition) and a
value (int16 version 0, then the flexible ShareSnapshotValue or ShareUpdateValue).

A ShareSnapshot is a share-partition's whole state; a ShareUpdate carries the state
batches that changed since, merged onto the snapshot when replayed. A null value is a
tombstone (the share group's state deleted).
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass

from keeperless.protocol.varint import VarintError, read_uvarint, skip_tagged_fields, uvarint

__all__ = [
    "SNAPSHOT",
    "UPDATE",
    "ShareKey",
    "ShareRecordError",
    "ShareSnapshot",
    "ShareUpdate",
    "StateBatch",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

SNAPSHOT = 0  # the key version of a ShareSnapshotKey (Kafka's record type 0)
UPDATE = 1  # of a ShareUpdateKey
_VALUE_VERSION = 0
_H, _I, _Q = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_HEAD = struct.Struct(">hH")  # value version, snapshot epoch (uint16)
_BATCH = struct.Struct(">qqbh")  # first, last offset, delivery state, delivery count


@dataclass(frozen=True, slots=True, order=True)
class ShareKey:
    """A share-partition: a share group's view of one partition (SharePartitionKey)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The key FindCoordinator takes (key type 2) and the partition is chosen by:
        ``group:topic id:partition`` with the topic id as Kafka writes a Uuid (base64)."""
        tid = base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("=")
        return f"{self.group_id}:{tid}:{self.partition}"


@dataclass(frozen=True, slots=True, order=True)
class StateBatch:
    """The persisted delivery state of a run of offsets: 0 available, 2 acknowledged,
    4 archived (an acquisition is never persisted)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: not changed
    batches: tuple[StateBatch, ...]


# -- encoding ------------------------------------------------------------------------------


def encode_key(kind: int, key: ShareKey) -> bytes:
    group = key.group_id.encode()
    return _H.pack(kind) + _H.pack(len(group)) + group + key.topic_id.bytes + _I.pack(key.partition)


def _batches(batches: tuple[StateBatch, ...]) -> bytes:
    out = bytearray(uvarint(len(batches) + 1))
    for b in batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out += b"\x00"  # no tagged fields
    return bytes(out)


def encode_value(value: ShareSnapshot | ShareUpdate) -> bytes:
    if isinstance(value, ShareSnapshot):
        body = (
            _I.pack(value.state_epoch) + _I.pack(value.leader_epoch) + _Q.pack(value.start_offset)
        )
    else:
        body = _I.pack(value.leader_epoch) + _Q.pack(value.start_offset)
    return (
        _HEAD.pack(_VALUE_VERSION, value.snapshot_epoch) + body + _batches(value.batches) + b"\x00"
    )


# -- decoding ------------------------------------------------------------------------------


class ShareRecordError(ValueError):
    """Bytes that are not a share coordinator record of a version this node reads."""


def decode_key(data: bytes) -> tuple[int, ShareKey]:
    """(record kind, share-partition) of a record key."""
    try:
        kind = _H.unpack_from(data, 0)[0]
        if kind not in (SNAPSHOT, UPDATE):
            raise ShareRecordError(f"unknown share coordinator record key version {kind}")
        n = _H.unpack_from(data, 2)[0]
        group = data[4 : 4 + n].decode()
        pos = 4 + n
        topic = uuid.UUID(bytes=bytes(data[pos : pos + 16]))
        partition = _I.unpack_from(data, pos + 16)[0]
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, ShareRecordError):
            raise
        raise ShareRecordError(f"damaged share coordinator record key: {e}") from None
    return kind, ShareKey(group, topic, partition)


def decode_value(kind: int, data: bytes) -> ShareSnapshot | ShareUpdate:
    try:
        version, snapshot_epoch = _HEAD.unpack_from(data, 0)
        if version != _VALUE_VERSION:
            raise ShareRecordError(f"unknown share coordinator record value version {version}")
        pos = _HEAD.size
        state_epoch = 0
        if kind == SNAPSHOT:
            state_epoch = _I.unpack_from(data, pos)[0]
            pos += 4
        leader_epoch = _I.unpack_from(data, pos)[0]
        start = _Q.unpack_from(data, pos + 4)[0]
        pos += 12
        n, pos = read_uvarint(data, pos)
        batches = []
        for _ in range(max(n - 1, 0)):
            first, last, state, count = _BATCH.unpack_from(data, pos)
            pos = skip_tagged_fields(data, pos + _BATCH.size)
            batches.append(StateBatch(first, last, state, count))
        skip_tagged_fields(data, pos)
    except (struct.error, IndexError, VarintError) as e:
        raise ShareRecordError(f"damaged share coordinator record value: {e}") from None
    if kind == SNAPSHOT:
        return ShareSnapshot(snapshot_epoch, state_epoch, leader_epoch, start, tuple(batches))
    return ShareUpdate(snapshot_epoch, leader_epoch, start, tuple(batches))
