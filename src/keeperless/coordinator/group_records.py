"""A classic group's membership as Kafka stores it in ``__consumer_offsets``: a
GroupMetadataKey (version 2: the group id) and a GroupMetadataValue (version 3: protocol
type, generation, protocol, leader, and each member with its subscription and
assignment), written when a generation's assignment is stored and when the group
empties; a null value (a tombstone) when the group is deleted. A coordinator that loads
the partition restores the groups from them, so that a failover keeps members, their
ids, generation and assignment (Kafka's GroupMetadataManager)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GROUP_KEY_VERSION",
    "GroupSnapshot",
    "MemberSnapshot",
    "decode_group_value",
    "encode_group_value",
    "group_key",
]

GROUP_KEY_VERSION = 2
_VALUE_VERSION = 3
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[MemberSnapshot, ...]


def _str(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode()
    return _I16.pack(len(b)) + b


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def group_key(group_id: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _str(group_id)


def encode_group_value(g: GroupSnapshot) -> bytes:
    out = bytearray(_I16.pack(_VALUE_VERSION))
    out += _str(g.protocol_type) + _I32.pack(g.generation) + _str(g.protocol) + _str(g.leader)
    out += _I64.pack(g.state_timestamp_ms) + _I32.pack(len(g.members))
    for m in g.members:
        out += _str(m.member_id) + _str(m.group_instance_id) + _str(m.client_id)
        out += _str(m.client_host) + _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms) + _bytes(m.subscription) + _bytes(m.assignment)
    return bytes(out)


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def _unpack(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return int(v)

    def i16(self) -> int:
        return self._unpack(_I16)

    def i32(self) -> int:
        return self._unpack(_I32)

    def i64(self) -> int:
        return self._unpack(_I64)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def blob(self) -> bytes:
        n = self.i32()
        b = self.buf[self.pos : self.pos + max(n, 0)]
        self.pos += max(n, 0)
        return bytes(b)


def decode_group_value(value: bytes) -> GroupSnapshot | None:
    """A GroupMetadataValue of versions 0-3; None for a version this cannot read (4, the
    flexible one, is not written here) or a damaged one."""
    r = _Reader(value)
    try:
        version = r.i16()
        if not 0 <= version <= 3:
            return None
        protocol_type = r.string() or ""
        generation = r.i32()
        protocol = r.string()
        leader = r.string()
        ts = r.i64() if version >= 2 else -1
        members = []
        for _ in range(max(r.i32(), 0)):
            member_id = r.string() or ""
            instance = r.string() if version >= 3 else None
            client_id = r.string() or ""
            client_host = r.string() or ""
            rebalance = r.i32() if version >= 1 else -1
            session = r.i32()
            members.append(
                MemberSnapshot(
                    member_id,
                    instance,
                    client_id,
                    client_host,
                    rebalance if rebalance > 0 else session,
                    session,
                    r.blob(),
                    r.blob(),
                )
            )
    except (struct.error, UnicodeDecodeError):
        return None
    return GroupSnapshot(protocol_type, generation, protocol, leader, ts, tuple(members))
