"""Classic and consumer-protocol members in one group, as Kafka 4 allows (KIP-848's
online migration, ``group.consumer.migration.policy=bidirectional``):

* a consumer-protocol member joining a classic group whose members all speak the
  consumer protocol type converts it to a consumer group (upgrade); the classic
  members keep their partitions and generation, now their member epoch;
* classic members of a consumer group keep using JoinGroup/SyncGroup/Heartbeat: the
  coordinator computes their assignment with the others' (the server assignor), the
  JoinGroup answers at once with their member epoch as generation and no members to
  assign, SyncGroup hands them their partitions, and Heartbeat answers
  REBALANCE_IN_PROGRESS when they must give some up or may take more;
* when the last consumer-protocol member leaves and classic members remain, the group
  becomes a classic group again (downgrade) and rebalances.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.coordinator.classic_group import Group, GroupState, JoinResult, Member
from keeperless.coordinator.consumer_group import (
    STATIC_LEAVE,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    HeartbeatError,
    Subscription,
    TopicsView,
)

__all__ = [
    "ClassicMeta",
    "MixedGroups",
    "decode_assignment",
    "encode_assignment",
    "parse_subscription",
]


class _Coordinator(Protocol):
    """What this needs of the group coordinator (coordinator.py), which holds it:
    a protocol, not an import, so the two modules do not import each other."""

    @property
    def broker(self) -> Any: ...
    @property
    def settings(self) -> Any: ...

    groups: dict[str, Group]
    consumer_groups: dict[str, ConsumerGroup]

    def new_group(self, group_id: str) -> Group: ...
    def store_later(self, group_id: str, snap: Any) -> None: ...
    def store_consumer_group_later(self, group_id: str) -> None: ...


log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class ClassicMeta:
    """What a classic member of a consumer group joined with."""

    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]


# -- ConsumerProtocolSubscription / ConsumerProtocolAssignment ------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, fmt: str) -> Any:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i16(self) -> int:
        return int(self._take(">h"))

    def i32(self) -> int:
        return int(self._take(">i"))

    def string(self) -> str:
        n = self.i16()
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += max(n, 0)
        return s

    def skip_bytes(self) -> None:
        n = self.i32()
        self.pos += max(n, 0)

    @property
    def more(self) -> bool:
        return self.pos < len(self.data)


def parse_subscription(meta: bytes) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """(topics, owned partitions) of a ConsumerProtocolSubscription (v0-v3)."""
    try:
        r = _Reader(meta)
        version = r.i16()
        topics = [r.string() for _ in range(max(r.i32(), 0))]
        r.skip_bytes()  # user data
        owned: list[tuple[str, list[int]]] = []
        if version >= 1 and r.more:
            for _ in range(max(r.i32(), 0)):
                t = r.string()
                owned.append((t, [r.i32() for _ in range(max(r.i32(), 0))]))
        return topics, owned
    except (struct.error, UnicodeDecodeError):
        return [], []


def encode_assignment(parts: Iterable[tuple[str, Iterable[int]]]) -> bytes:
    """A ConsumerProtocolAssignment v0: the topics and partitions, no user data."""
    rows = sorted((t, sorted(ps)) for t, ps in parts)
    out = bytearray(struct.pack(">hi", 0, len(rows)))
    for t, ps in rows:
        name = t.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    out += struct.pack(">i", -1)
    return bytes(out)


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    try:
        r = _Reader(data)
        r.i16()
        out = []
        for _ in range(max(r.i32(), 0)):
            t = r.string()
            out.append((t, [r.i32() for _ in range(max(r.i32(), 0))]))
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def _by_id(parts: Iterable[tuple[str, Iterable[int]]], view: TopicsView) -> Assignment:
    out: dict[UUID, frozenset[int]] = {}
    for t, ps in parts:
        if t in view:
            tid, count = view[t]
            kept = frozenset(p for p in ps if 0 <= p < count)
            if kept:
                out[tid] = out.get(tid, frozenset()) | kept
    return out


def _by_name(a: Assignment, view: TopicsView) -> list[tuple[str, list[int]]]:
    names = {tid: name for name, (tid, _) in view.items()}
    return [(names[t], sorted(ps)) for t, ps in a.items() if t in names]


def _flat(a: Mapping[UUID, Iterable[int]]) -> set[tuple[UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


# -- the coordinator's side ------------------------------------------------------------


class MixedGroups:
    def __init__(self, gc: _Coordinator, view: Any) -> None:
        self.gc = gc
        self.view: Any = view  # () -> TopicsView

    def hosts_classic(self, group_id: str, member_id: str) -> ConsumerGroup | None:
        """The consumer group if ``member_id`` is one of its classic members."""
        cg = self.gc.consumer_groups.get(group_id)
        if cg is None:
            return None
        m = cg.members.get(member_id)
        return cg if m is not None and m.classic is not None else None

    # -- classic members of a consumer group --------------------------------------------

    def join(
        self, cg: ConsumerGroup, req: Any, client_id: str, version: int, now: float
    ) -> JoinResult:
        """Kafka's classicGroupJoinToConsumerGroup."""
        protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=req.member_id)
        instance = getattr(req, "group_instance_id", None)
        member_id = req.member_id
        if not member_id:
            member_id = str(uuid.uuid4())
            if version >= 4 and instance is None:
                return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        session_ms = int(req.session_timeout.total_seconds() * 1000)
        rebalance_td = getattr(req, "rebalance_timeout", None)
        rebalance_ms = int(rebalance_td.total_seconds() * 1000) if rebalance_td else session_ms
        topics, owned = parse_subscription(protocols[0][1])
        subscription = Subscription(tuple(sorted(topics)), None)
        meta = ClassicMeta(session_ms, req.protocol_type, protocols)
        view = self.view()
        m = cg.members.get(member_id)
        if m is None:
            if instance is not None:
                old_id = cg.static.get(instance)
                old = cg.members.get(old_id) if old_id is not None else None
                if old is not None and old.classic is not None:
                    old.member_epoch = STATIC_LEAVE  # a classic static member is replaced
            spec = (None, client_id, "/127.0.0.1", rebalance_ms, subscription, None)
            try:
                m = cg.join(member_id, instance, spec, now)
            except HeartbeatError as e:
                return JoinResult(e.code, member_id=member_id)
            m.classic = meta
        else:
            if m.classic is None:
                return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
            m.classic = meta
            cg.update(m, subscription, None, rebalance_ms, now)
        cg.refresh(view)
        cg.compute_target(view)
        cg.reconcile(m, _by_id(owned, view), now)
        return JoinResult(
            ErrorCode.none,
            generation=m.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol=protocols[0][0],
            leader="",
            member_id=member_id,
        )

    def sync(
        self, cg: ConsumerGroup, member_id: str, generation: int, now: float
    ) -> tuple[ErrorCode, bytes]:
        m = cg.members[member_id]
        if generation != m.member_epoch:
            return ErrorCode.illegal_generation, b""
        m.last_heartbeat = now
        m.sent = dict(m.assigned)
        return ErrorCode.none, encode_assignment(_by_name(m.assigned, self.view()))

    def heartbeat(
        self, cg: ConsumerGroup, member_id: str, generation: int, now: float
    ) -> ErrorCode:
        m = cg.members[member_id]
        if generation != m.member_epoch:
            return ErrorCode.illegal_generation
        m.last_heartbeat = now
        view = self.view()
        cg.refresh(view)
        cg.compute_target(view)
        return ErrorCode.rebalance_in_progress if self._must_rejoin(cg, m) else ErrorCode.none

    @staticmethod
    def _must_rejoin(cg: ConsumerGroup, m: ConsumerMember) -> bool:
        """It must give partitions up, or may take partitions now free, or the group
        moved to a new epoch."""
        if m.member_epoch != cg.assignment_epoch:
            return True
        target = _flat(cg.target.get(m.member_id, {}))
        current = _flat(m.assigned) | _flat(m.pending_revocation)
        if current - target:
            return True
        missing = target - current
        if not missing:
            return False
        elsewhere: set[tuple[UUID, int]] = set()
        for other in cg.members.values():
            if other is not m:
                elsewhere |= _flat(other.assigned) | _flat(other.pending_revocation)
        return bool(missing - elsewhere)

    def leave(self, cg: ConsumerGroup, member_id: str, now: float) -> ErrorCode:
        cg.remove(member_id, "left the group")
        self.maybe_downgrade(cg.group_id, now)
        return ErrorCode.none

    # -- conversions ----------------------------------------------------------------------

    def upgrade(self, group_id: str) -> ConsumerGroup | None:
        """A consumer-protocol member joins the classic group ``group_id``: it becomes a
        consumer group if every member speaks the consumer protocol type and the group is
        stable (its assignment known). None if it cannot."""
        g = self.gc.groups.get(group_id)
        if g is None or not g.members:
            return None
        if g.state != GroupState.STABLE or any(
            m.protocol_type != CONSUMER_PROTOCOL_TYPE for m in g.members.values()
        ):
            return None
        view = self.view()
        cg = ConsumerGroup(group_id, self.gc.broker.node_id, self.gc.settings.consumer_assignors[0])
        cg.group_epoch = cg.assignment_epoch = g.generation
        for m in g.members.values():
            topics, _owned = parse_subscription(
                m.metadata_for(g.protocol or "") or m.protocols[0][1]
            )
            assigned = _by_id(decode_assignment(m.assignment), view)
            cm = ConsumerMember(
                m.member_id,
                m.group_instance_id,
                None,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                Subscription(tuple(sorted(topics)), None),
                None,
                member_epoch=g.generation,
                previous_epoch=g.generation - 1,
                assigned=assigned,
                last_heartbeat=m.last_heartbeat,
                classic=ClassicMeta(m.session_timeout_ms, m.protocol_type, tuple(m.protocols)),
            )
            cg.members[m.member_id] = cm
            cg.target[m.member_id] = assigned
            if m.group_instance_id is not None:
                cg.static[m.group_instance_id] = m.member_id
        cg.topics_seen = tuple(
            (t, view[t][0], view[t][1]) for t in sorted(cg.subscribed_topics(view))
        )
        g.abandon()
        del self.gc.groups[group_id]
        self.gc.store_later(group_id, None)  # no longer a classic group to restore
        self.gc.consumer_groups[group_id] = cg
        log.info(
            "[node %d] Group %s converted from the classic to the consumer protocol at "
            "generation %d (%d classic member(s) kept)",
            self.gc.broker.node_id,
            group_id,
            g.generation,
            len(cg.members),
        )
        return cg

    def maybe_downgrade(self, group_id: str, now: float) -> None:
        """The last consumer-protocol member left: the classic members remaining make a
        classic group again, which rebalances."""
        cg = self.gc.consumer_groups.get(group_id)
        if cg is None or not cg.members:
            return
        if any(m.classic is None for m in cg.members.values()):
            return
        view = self.view()
        g = self.gc.new_group(group_id)
        # their epochs: members at it are told to rejoin, the others that their generation
        # is gone (they rejoin too)
        g.generation = max(cm.member_epoch for cm in cg.members.values())
        g.protocol_type = CONSUMER_PROTOCOL_TYPE
        for cm in cg.members.values():
            assert cm.classic is not None
            m = Member(
                cm.member_id,
                cm.instance_id,
                cm.client_id,
                cm.client_host,
                cm.classic.session_timeout_ms,
                cm.rebalance_timeout_ms,
                cm.classic.protocol_type,
                list(cm.classic.protocols),
                assignment=encode_assignment(_by_name(cm.assigned, view)),
                last_heartbeat=now,
            )
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static[m.group_instance_id] = m.member_id
        names = [set(n for n, _ in m.protocols) for m in g.members.values()]
        common = set.intersection(*names) if names else set()
        first = next(iter(g.members.values()))
        g.protocol = next((n for n, _ in first.protocols if n in common), None)
        g.leader = first.member_id
        g.state = GroupState.STABLE
        del self.gc.consumer_groups[group_id]
        self.gc.store_consumer_group_later(group_id)  # its records: tombstones now
        self.gc.groups[group_id] = g
        log.info(
            "[node %d] Group %s converted back to the classic protocol: its last "
            "consumer-protocol member left (%d classic member(s))",
            self.gc.broker.node_id,
            group_id,
            len(g.members),
        )
        g._prepare_rebalance(now)
