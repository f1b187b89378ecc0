"""A share group (KIP-932) as Kafka stores it in ``__consumer_offsets``: the group and its
epoch (ShareGroupMetadata, record type 11) and the topics whose share-partitions it has
state for (ShareGroupStatePartitionMetadata, type 15: initialized topics with their
partitions, and topics whose state is being deleted); keys not flexible, values flexible
(version 0). Members are not stored: a member of a group whose coordinator moved joins
again, as Kafka's share consumers do."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from uuid import UUID

from keeperless.coordinator.consumer_group_records import _carray, _key, _Reader, _value
from keeperless.protocol.varint import compact_string as _cstr

__all__ = [
    "SHARE_GROUP_KEY_TYPES",
    "SHARE_METADATA",
    "SHARE_STATE_PARTITIONS",
    "StoredShareGroup",
    "decode",
    "group_of",
    "share_group_records",
]

SHARE_METADATA, SHARE_STATE_PARTITIONS = 11, 15
SHARE_GROUP_KEY_TYPES = frozenset({SHARE_METADATA, SHARE_STATE_PARTITIONS})
_I32 = struct.Struct(">i")


@dataclass
class StoredShareGroup:
    """What the records of one share group say."""

    epoch: int = 0
    # topic name -> (topic id, partitions with state)
    initialized: dict[str, tuple[UUID, tuple[int, ...]]] = field(default_factory=dict)
    deleting: dict[str, UUID] = field(default_factory=dict)


def share_group_records(group_id: str, stored: StoredShareGroup) -> dict[bytes, bytes]:
    """Both records of a share group, key -> value."""
    topics = [
        tid.bytes + _cstr(name) + _carray([_I32.pack(p) for p in parts]) + b"\x00"
        for name, (tid, parts) in sorted(stored.initialized.items())
    ]
    deleting = [tid.bytes + _cstr(name) + b"\x00" for name, tid in sorted(stored.deleting.items())]
    return {
        _key(SHARE_METADATA, group_id): _value(_I32.pack(stored.epoch)),
        _key(SHARE_STATE_PARTITIONS, group_id): _value(_carray(topics) + _carray(deleting)),
    }


def decode(key: bytes, value: bytes, into: StoredShareGroup) -> None:
    """Apply one record of the group (its key type is 11 or 15) to ``into``."""
    kind = _Reader(key).i16()
    r = _Reader(value)
    if r.i16() != 0:
        raise ValueError("unknown share group record value version")
    if kind == SHARE_METADATA:
        into.epoch = r.i32()
        return
    initialized: dict[str, tuple[UUID, tuple[int, ...]]] = {}
    for _ in range(r.count()):
        tid = UUID(bytes=bytes(r.buf[r.pos : r.pos + 16]))
        r.pos += 16
        name = r.cstr() or ""
        initialized[name] = (tid, tuple(r.i32() for _ in range(r.count())))
        r.skip_tags()
    deleting: dict[str, UUID] = {}
    for _ in range(r.count()):
        tid = UUID(bytes=bytes(r.buf[r.pos : r.pos + 16]))
        r.pos += 16
        deleting[r.cstr() or ""] = tid
        r.skip_tags()
    into.initialized, into.deleting = initialized, deleting


def group_of(key: bytes) -> str:
    r = _Reader(key)
    r.i16()
    return r.string()
