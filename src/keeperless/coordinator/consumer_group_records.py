"""A consumer-protocol group (KIP-848) as Kafka stores it in ``__consumer_offsets``: the
group epoch (record type 3), each member's metadata (5) and current assignment (8), the
target assignment's epoch (6) and each member's target (7); keys not flexible, values
flexible (version 0). ``group_records`` gives the records a group is now, so that the
coordinator writes what changed since it last stored them (and tombstones for what is
gone), and ``restore`` builds the group back from what it read on load."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from uuid import UUID

from keeperless.coordinator.consumer_group import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    Subscription,
    TopicsView,
)
from keeperless.protocol.varint import compact_string as _cstr
from keeperless.protocol.varint import read_uvarint
from keeperless.protocol.varint import uvarint as _uvarint

__all__ = ["CONSUMER_GROUP_KEY_TYPES", "group_records", "key_group", "restore"]

METADATA, MEMBER, TARGET_METADATA, TARGET_MEMBER, CURRENT = 3, 5, 6, 7, 8
# the key types of a consumer group's records (4, ConsumerGroupPartitionMetadata, is
# read and ignored: the subscribed topics are looked up again on load)
CONSUMER_GROUP_KEY_TYPES = frozenset({3, 4, 5, 6, 7, 8})
_STATES = {STABLE: 0, UNREVOKED: 1, UNRELEASED: 2}
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


# -- encoding ------------------------------------------------------------------------------


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def _carray(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


def _partitions(a: Mapping[UUID, Iterable[int]]) -> bytes:
    return _carray(
        [
            t.bytes + _carray([_I32.pack(p) for p in sorted(ps)]) + b"\x00"
            for t, ps in sorted(a.items(), key=lambda kv: str(kv[0]))
        ]
    )


def _key(kind: int, *parts: str) -> bytes:
    return _I16.pack(kind) + b"".join(_str(p) for p in parts)


def _value(body: bytes) -> bytes:
    return _I16.pack(0) + body + b"\x00"  # version 0, then no tagged fields


def group_records(g: ConsumerGroup, member: str | None = None) -> dict[bytes, bytes]:
    """Every record the group is now, key -> value (``member``: only the group's own and
    that member's). A group with classic members (a KIP-848 migration in progress) is
    not stored: it is rebuilt by rejoining."""
    if not g.members and g.group_epoch == 0:
        return {}
    if any(m.classic is not None for m in g.members.values()):
        return {}
    gid = g.group_id
    out = {_key(METADATA, gid): _value(_I32.pack(g.group_epoch))}
    out[_key(TARGET_METADATA, gid)] = _value(_I32.pack(g.assignment_epoch))
    members = g.members.items() if member is None else [(member, g.members[member])]
    for mid, m in members:
        out[_key(MEMBER, gid, mid)] = _value(
            _cstr(m.instance_id) + _cstr(m.rack_id) + _cstr(m.client_id)
            + _cstr(m.client_host) + _carray([_cstr(t) for t in m.subscription.names])
            + _cstr(m.subscription.regex) + _I32.pack(m.rebalance_timeout_ms)
            + _cstr(m.assignor)
        )  # fmt: skip
        out[_key(CURRENT, gid, mid)] = _value(
            _I32.pack(m.member_epoch) + _I32.pack(m.previous_epoch)
            + bytes([_STATES.get(m.state, 127)]) + _partitions(m.assigned)
            + _partitions(m.pending_revocation)
        )  # fmt: skip
    for mid, target in g.target.items():
        if member is None or mid == member:
            out[_key(TARGET_MEMBER, gid, mid)] = _value(_partitions(target))
    return out


# -- decoding ------------------------------------------------------------------------------


class _Reader:
    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf, self.pos = buf, pos

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def i8(self) -> int:
        self.pos += 1
        return self.buf[self.pos - 1]

    def string(self) -> str:
        n = self.i16()
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def uvarint(self) -> int:
        n, self.pos = read_uvarint(self.buf, self.pos)
        return n

    def cstr(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        s = self.buf[self.pos : self.pos + n - 1].decode()
        self.pos += n - 1
        return s

    def count(self) -> int:
        return max(self.uvarint() - 1, 0)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def partitions(self) -> Assignment:
        out: Assignment = {}
        for _ in range(self.count()):
            topic = UUID(bytes=bytes(self.buf[self.pos : self.pos + 16]))
            self.pos += 16
            out[topic] = frozenset(self.i32() for _ in range(self.count()))
            self.skip_tags()
        return out


def key_group(key: bytes) -> tuple[int, str, str | None]:
    """(key type, group id, member id or None) of a consumer group record's key."""
    r = _Reader(key)
    kind = r.i16()
    gid = r.string()
    member = r.string() if kind in (MEMBER, TARGET_MEMBER, CURRENT) else None
    return kind, gid, member


def restore(
    group_id: str,
    records: Mapping[bytes, bytes],
    node_id: int,
    default_assignor: str,
    view: TopicsView,
    now: float,
) -> ConsumerGroup | None:
    """The group its stored records describe (None without its metadata record, or if
    a record cannot be read): members at their epochs and assignments, each session
    counted from ``now``."""
    g = ConsumerGroup(group_id, node_id, default_assignor)
    meta: dict[str, ConsumerMember] = {}  # each member as its metadata record says
    current: dict[str, tuple[int, int, int, Assignment, Assignment]] = {}
    seen_metadata = False
    try:
        for key, value in records.items():
            kind, _gid, mid = key_group(key)
            r = _Reader(value, 2)  # (after the value's version)
            if kind == METADATA:
                g.group_epoch, seen_metadata = r.i32(), True
            elif kind == TARGET_METADATA:
                g.assignment_epoch = r.i32()
            elif kind == TARGET_MEMBER and mid is not None:
                g.target[mid] = r.partitions()
            elif kind == MEMBER and mid is not None:
                instance, rack, client, host = r.cstr(), r.cstr(), r.cstr(), r.cstr()
                names = tuple(r.cstr() or "" for _ in range(r.count()))
                regex, rebalance, assignor = r.cstr(), r.i32(), r.cstr()
                meta[mid] = ConsumerMember(
                    mid, instance, rack, client or "", host or "", rebalance,
                    Subscription(names, regex), assignor, last_heartbeat=now,
                )  # fmt: skip
            elif kind == CURRENT and mid is not None:
                epochs = r.i32(), r.i32(), r.i8()
                current[mid] = (*epochs, r.partitions(), r.partitions())
    except (struct.error, IndexError, UnicodeDecodeError, ValueError):
        return None
    if not seen_metadata:
        return None
    states = {v: k for k, v in _STATES.items()}
    for mid, m in meta.items():
        if mid not in current:
            continue  # half a member: it rejoins
        m.member_epoch, m.previous_epoch, state, m.assigned, m.pending_revocation = current[mid]
        m.state = states.get(state, STABLE)
        if m.state == UNREVOKED:
            m.revoke_by = now + m.rebalance_timeout_ms / 1000
        g.members[mid] = m
        if m.instance_id is not None:
            g.static[m.instance_id] = mid
    g.topics_seen = tuple(
        (t, view[t][0], view[t][1]) for t in sorted(g.subscribed_topics(view))
    )  # fmt: skip
    return g
