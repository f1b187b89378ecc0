"""Classic consumer group membership: join, sync, heartbeat, leave, session expiry.

The rebalance protocol of Kafka's GroupCoordinator: a group goes Empty ->
PreparingRebalance (members (re)join) -> CompletingRebalance (leader computes the
assignment) -> Stable (SyncGroup delivered it). Waiting requests are deferred answers
that the transitions complete; the rebalance deadline is a timer of the coordinator's.
The rules do no I/O: the coordinator passes the time in and waits for the answers.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.coordinator.deferred import Deferred, Timer
from keeperless.coordinator.group_records import GroupSnapshot, MemberSnapshot

__all__ = ["VALID_PREVIOUS", "Group", "GroupState", "JoinResult", "Member"]

log = logging.getLogger(__name__)


class GroupState:
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
# state -> the states a classic group may come to it from (Kafka's ClassicGroupState
# validPreviousStates); any other transition is a bug, refused
VALID_PREVIOUS: dict[str, frozenset[str]] = {
    _S.EMPTY: frozenset({_S.PREPARING}),
    _S.PREPARING: frozenset({_S.STABLE, _S.COMPLETING, _S.EMPTY}),
    _S.COMPLETING: frozenset({_S.PREPARING}),
    _S.STABLE: frozenset({_S.COMPLETING}),
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING, _S.COMPLETING, _S.EMPTY, _S.DEAD}),
}


def _subscription_topics(meta: bytes) -> list[str]:
    try:
        (count,) = struct.unpack_from(">i", meta, 2)
        pos, out = 6, []
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", meta, pos)
            out.append(meta[pos + 2 : pos + 2 + n].decode())
            pos += 2 + n
        return out
    except (struct.error, UnicodeDecodeError):
        return []  # not a consumer's subscription


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False  # JoinGroup v9: a static leader rejoined, nothing to do


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = 0.0
    join_future: Deferred[JoinResult] | None = None
    sync_future: Deferred[tuple[ErrorCode, bytes]] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(slots=True)
class Group:
    group_id: str
    initial_delay_ms: int
    timer: Timer  # the coordinator's: the rebalance deadline
    node_id: int = -1
    state: str = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # member ids handed out with MEMBER_ID_REQUIRED, not joined yet: id -> expiry (a
    # client that never comes back must not hold every later rebalance)
    pending: dict[str, float] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    rebalance_deadline: float = 0.0
    # while the rebalance deadline's timer is set: when it fires (monotonic seconds)
    join_deadline: float | None = None
    # the coordinator stores each generation's assignment before it is handed out (and
    # restores the group from it after a failover); unset, it is handed out at once
    persist: bool = False
    # the generation whose assignment waits to be stored (the coordinator stores it,
    # then calls synced())
    store_due: int | None = None
    # called when the group empties (its empty state is stored too)
    on_empty: Callable[[Group], None] | None = None

    def become(self, state: str) -> None:
        """Move to ``state``, as Kafka's table allows (ValueError otherwise)."""
        if self.state not in VALID_PREVIOUS[state]:
            raise ValueError(
                f"Group {self.group_id} should be in one of {sorted(VALID_PREVIOUS[state])} "
                f"before moving to {state}; it is {self.state}"
            )
        self.state = state

    # -- join ---------------------------------------------------------------------------

    def join(
        self, req: Any, client_id: str, client_host: str, version: int, now: float
    ) -> Deferred[JoinResult] | JoinResult:
        """Kafka's GroupCoordinator.handleJoinGroup for the classic protocol."""
        session_ms = int(req.session_timeout.total_seconds() * 1000)
        rebalance_td = getattr(req, "rebalance_timeout", None)
        rebalance_ms = int(rebalance_td.total_seconds() * 1000) if rebalance_td else session_ms
        if rebalance_ms <= 0:
            rebalance_ms = session_ms
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        instance = getattr(req, "group_instance_id", None)
        if not self._supports(req.protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=req.member_id)
        spec = (client_id, client_host, session_ms, rebalance_ms, req.protocol_type, protocols)
        if not req.member_id:
            new_id = f"{client_id}-{uuid.uuid4()}"
            if instance is not None:
                old = self.static.get(instance)
                if old is not None and old in self.members:
                    return self._replace_static(old, new_id, instance, spec, version, now)
                return self._add(new_id, instance, spec, now)
            if version >= 4:  # KIP-394: the id first, the join with it next
                self.pending[new_id] = now + session_ms / 1000
                return JoinResult(ErrorCode.member_id_required, member_id=new_id)
            return self._add(new_id, None, spec, now)
        member_id = req.member_id
        if member_id in self.pending:
            del self.pending[member_id]
            return self._add(member_id, instance, spec, now)
        err = self._validate(member_id, instance)
        if err != ErrorCode.none:
            return JoinResult(err, member_id=member_id)
        m = self.members[member_id]
        m.last_heartbeat = now
        unchanged = m.protocols == protocols
        if self.state == GroupState.COMPLETING and unchanged:
            return self._join_result(m, version)  # a repeated join: the same answer
        if self.state == GroupState.STABLE and unchanged and member_id != self.leader:
            return self._join_result(m, version, stable=True)
        m.protocols = protocols
        m.session_timeout_ms, m.rebalance_timeout_ms = session_ms, rebalance_ms
        return self._await_join(m, now)

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if self.protocol_type is not None and protocol_type != self.protocol_type:
            return False
        names = {n for n, _ in protocols}
        return any(
            all(any(n == name for n, _ in m.protocols) for m in self.members.values())
            for name in names
        )

    def _validate(self, member_id: str, instance: str | None) -> ErrorCode:
        """KIP-345: a static member's id must be the one its instance id has now."""
        if instance is not None and self.static.get(instance) != member_id:
            return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def _add(
        self, member_id: str, instance: str | None, spec: tuple[Any, ...], now: float
    ) -> Deferred[JoinResult]:
        client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols = spec
        m = Member(
            member_id,
            instance,
            client_id,
            client_host,
            session_ms,
            rebalance_ms,
            protocol_type,
            protocols,
        )
        m.last_heartbeat = now
        if not self.members:
            self.protocol_type = protocol_type  # the first member sets it (Kafka's rule)
        self.members[member_id] = m
        if instance is not None:
            self.static[instance] = member_id
        log.info(
            "[node %d] Group %s: member %s joined%s",
            self.node_id,
            self.group_id,
            member_id,
            f" (static, instance {instance})" if instance else "",
        )
        return self._await_join(m, now)

    def _await_join(self, m: Member, now: float) -> Deferred[JoinResult]:
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(ErrorCode.rebalance_in_progress))
        fut: Deferred[JoinResult] = Deferred()
        m.join_future = fut
        if self.state != GroupState.PREPARING:
            self._prepare_rebalance(now, initial=self.state == GroupState.EMPTY)
        else:
            self._maybe_complete_join()
        return fut

    def _replace_static(
        self,
        old_id: str,
        new_id: str,
        instance: str,
        spec: tuple[Any, ...],
        version: int,
        now: float,
    ) -> Deferred[JoinResult] | JoinResult:
        """KIP-345: a restarted static member takes its instance's place and, in a stable
        group whose protocol it still shares, its assignment, without a rebalance; the
        old member id is fenced (FENCED_INSTANCE_ID)."""
        client_id, client_host, session_ms, rebalance_ms, _, protocols = spec
        old = self.members.pop(old_id)
        if old.join_future is not None and not old.join_future.done():
            old.join_future.set_result(JoinResult(ErrorCode.fenced_instance_id))
        if old.sync_future is not None and not old.sync_future.done():
            old.sync_future.set_result((ErrorCode.fenced_instance_id, b""))
        m = Member(
            new_id,
            instance,
            client_id,
            client_host,
            session_ms,
            rebalance_ms,
            old.protocol_type,
            protocols,
            assignment=old.assignment,
            last_heartbeat=now,
        )
        self.members[new_id] = m
        self.static[instance] = new_id
        old_leader = self.leader
        if self.leader == old_id:
            self.leader = new_id
        log.info(
            "[node %d] Group %s: static member %s (instance %s) replaced by %s",
            self.node_id,
            self.group_id,
            old_id,
            instance,
            new_id,
        )
        if self.state == GroupState.STABLE and self.protocol in {n for n, _ in protocols}:
            was_leader = old_leader == old_id
            if was_leader and version >= 9:
                return replace(self._join_result(m, version), skip_assignment=True)
            # before v9 the leader id stays the old one: the client does not assign
            return JoinResult(
                ErrorCode.none,
                self.generation,
                self.protocol_type,
                self.protocol,
                (old_leader if was_leader else self.leader) or "",
                new_id,
                (),
            )
        return self._await_join(m, now)

    def _prepare_rebalance(self, now: float, initial: bool = False) -> None:
        for m in self.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((ErrorCode.rebalance_in_progress, b""))
        prev = self.state
        self.become(GroupState.PREPARING)
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        delay = self.initial_delay_ms if initial else timeout
        self.rebalance_deadline = now + delay / 1000
        log.info(
            "[node %d] Group %s: preparing to rebalance (from %s, generation %d)",
            self.node_id,
            self.group_id,
            prev,
            self.generation,
        )
        self._schedule(self.rebalance_deadline, delay / 1000)
        if not initial:
            self._maybe_complete_join()

    @property
    def _timer_key(self) -> str:
        return f"classic-group-join:{self.group_id}"

    def _schedule(self, at: float, delay_s: float) -> None:
        self.join_deadline = at
        self.timer.schedule(self._timer_key, delay_s, self._on_join_deadline)

    def _cancel_timer(self) -> None:
        if self.join_deadline is not None:
            self.join_deadline = None
            self.timer.cancel(self._timer_key)

    def _on_join_deadline(self) -> None:
        """The rebalance timeout passed: dynamic members that did not rejoin are removed
        (static ones stay, to come back under their instance id), and so are member ids
        handed out and never used; the generation completes with who is there."""
        self.join_deadline = None
        if self.state != GroupState.PREPARING:
            return
        for mid, m in list(self.members.items()):
            if (m.join_future is None or m.join_future.done()) and m.group_instance_id is None:
                log.info(
                    "[node %d] Group %s: removing member %s, which did not rejoin in time",
                    self.node_id,
                    self.group_id,
                    mid,
                )
                del self.members[mid]
        self.pending.clear()
        self._complete_join()

    def _maybe_complete_join(self) -> None:
        if self.state != GroupState.PREPARING or self.pending:
            return
        if self.join_deadline is not None and self.generation == 0 and self.initial_delay_ms > 0:
            return  # the initial delay lets more members arrive before the first generation
        if all(
            m.join_future is not None and not m.join_future.done() for m in self.members.values()
        ):
            self._complete_join()

    def _complete_join(self) -> None:
        self._cancel_timer()
        if not self.members:
            self.become(GroupState.EMPTY)
            self.generation += 1
            self.protocol = None
            self.leader = None
            if self.on_empty is not None:
                self.on_empty(self)
            return
        self.generation += 1
        self.become(GroupState.COMPLETING)
        joined = [
            m
            for m in self.members.values()
            if m.join_future is not None and not m.join_future.done()
        ]
        first = joined[0] if joined else next(iter(self.members.values()))
        self.protocol_type = first.protocol_type
        self.protocol = self._select_protocol()
        if self.leader not in {m.member_id for m in joined}:
            self.leader = first.member_id  # the leader must be one that is waiting
        log.info(
            "[node %d] Group %s: generation %d with %d members, protocol %s",
            self.node_id,
            self.group_id,
            self.generation,
            len(self.members),
            self.protocol,
        )
        for m in self.members.values():
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(self._join_result(m))
            m.join_future = None

    def _select_protocol(self) -> str:
        candidates = None
        for m in self.members.values():
            names = {n for n, _ in m.protocols}
            candidates = names if candidates is None else candidates & names
        votes: Counter[str] = Counter()
        for m in self.members.values():
            for name, _ in m.protocols:
                if candidates and name in candidates:
                    votes[name] += 1
                    break
        return votes.most_common(1)[0][0] if votes else next(iter(candidates or {""}))

    def _join_result(self, m: Member, version: int = 0, stable: bool = False) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if m.member_id == self.leader and not stable:
            members = tuple(
                (o.member_id, o.group_instance_id, o.metadata_for(self.protocol or ""))
                for o in self.members.values()
            )
        return JoinResult(
            ErrorCode.none,
            self.generation,
            self.protocol_type,
            self.protocol,
            self.leader or "",
            m.member_id,
            members,
        )

    # -- sync, heartbeat, leave ---------------------------------------------------------

    def check_member(
        self, member_id: str, generation: int, instance: str | None = None
    ) -> ErrorCode:
        err = self._validate(member_id, instance)
        if err != ErrorCode.none:
            return err
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
        now: float,
        instance: str | None = None,
    ) -> Deferred[tuple[ErrorCode, bytes]] | tuple[ErrorCode, bytes]:
        err = self.check_member(member_id, generation, instance)
        if err != ErrorCode.none:
            return err, b""
        if self.state == GroupState.PREPARING:
            return ErrorCode.rebalance_in_progress, b""
        m = self.members[member_id]
        m.last_heartbeat = now
        if self.state == GroupState.STABLE:
            return ErrorCode.none, m.assignment
        fut: Deferred[tuple[ErrorCode, bytes]] = Deferred()
        m.sync_future = fut
        if member_id == self.leader and self.store_due != self.generation:
            for o in self.members.values():
                o.assignment = assignments.get(o.member_id, b"")
            if self.persist:
                self.store_due = self.generation
                return fut
            self._hand_out(ErrorCode.none, now)
        return fut

    def synced(self, generation: int, error: ErrorCode, now: float) -> None:
        """The assignment of ``generation`` was stored (``error`` none) or not: the group
        is stable and every member waiting gets its assignment, or each gets the error
        and the group rebalances (Kafka's SyncGroup). Nothing if the group moved on."""
        if generation != self.store_due:
            return
        self.store_due = None
        if self.state == GroupState.COMPLETING and generation == self.generation:
            self._hand_out(error, now)

    def _hand_out(self, error: ErrorCode, now: float) -> None:
        """The generation's assignment to every member waiting (stable), or ``error``
        to each and a rebalance."""
        if error == ErrorCode.none:
            self.become(GroupState.STABLE)
            log.info(
                "[node %d] Group %s: stable at generation %d",
                self.node_id,
                self.group_id,
                self.generation,
            )
        for o in self.members.values():
            if error != ErrorCode.none:
                o.assignment = b""
            if o.sync_future is not None and not o.sync_future.done():
                o.sync_future.set_result((error, o.assignment))
            o.sync_future = None
        if error != ErrorCode.none:
            self._prepare_rebalance(now)

    def snapshot(self, now_ms: int) -> GroupSnapshot:
        """What is stored of the group (GroupMetadataValue)."""
        return GroupSnapshot(
            self.protocol_type or "",
            self.generation,
            self.protocol,
            self.leader,
            now_ms,
            tuple(
                MemberSnapshot(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(self.protocol or ""),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def restore(
        cls,
        group_id: str,
        snap: GroupSnapshot,
        initial_delay_ms: int,
        timer: Timer,
        node_id: int,
        now: float,
    ) -> Group:
        """The group as its last stored generation left it: Stable with its members (each
        session counted from now), or Empty."""
        g = cls(group_id, initial_delay_ms, timer, node_id)
        g.generation = snap.generation
        g.protocol_type = snap.protocol_type or None
        if snap.members:
            g.state = GroupState.STABLE
            g.protocol = snap.protocol
            g.leader = snap.leader
        for ms in snap.members:
            g.members[ms.member_id] = Member(
                ms.member_id, ms.group_instance_id, ms.client_id, ms.client_host,
                ms.session_timeout_ms, ms.rebalance_timeout_ms, snap.protocol_type,
                [(snap.protocol or "", ms.subscription)], ms.assignment, now,
            )  # fmt: skip
            if ms.group_instance_id is not None:
                g.static[ms.group_instance_id] = ms.member_id
        return g

    def heartbeat(
        self, member_id: str, generation: int, now: float, instance: str | None = None
    ) -> ErrorCode:
        err = self.check_member(member_id, generation, instance)
        if err != ErrorCode.none:
            return err
        self.members[member_id].last_heartbeat = now
        if self.state == GroupState.PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, member_id: str, now: float, instance: str | None = None) -> ErrorCode:
        """A member leaves; a static one may be named by its instance id alone (an admin
        removing it), and a stale id of an instance is FENCED_INSTANCE_ID."""
        if instance is not None:
            current = self.static.get(instance)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != current:
                return ErrorCode.fenced_instance_id
            member_id = current
        m = self.members.pop(member_id, None)
        if m is None:
            return ErrorCode.unknown_member_id
        if m.group_instance_id is not None:
            self.static.pop(m.group_instance_id, None)
        log.info("[node %d] Group %s: member %s left", self.node_id, self.group_id, member_id)
        self._member_gone(m, now)
        return ErrorCode.none

    def _member_gone(self, m: Member, now: float) -> None:
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(ErrorCode.unknown_member_id))
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_result((ErrorCode.unknown_member_id, b""))
        if self.state == GroupState.PREPARING:
            self._maybe_complete_join()
        else:  # the last member gone: a rebalance of nobody, and the group is Empty
            self._prepare_rebalance(now)

    def subscribed_topics(self) -> set[str]:
        """The topics the members subscribe to (ConsumerProtocolSubscription: a version,
        then an array of topic names), for the chosen protocol."""
        out: set[str] = set()
        for m in self.members.values():
            meta = m.metadata_for(self.protocol or "") or (
                m.protocols[0][1] if m.protocols else b""
            )
            out.update(_subscription_topics(meta))
        return out

    def abandon(self) -> None:
        """This broker is no longer the group's coordinator: every waiting member is told
        so (NOT_COORDINATOR) and looks the coordinator up again."""
        self._cancel_timer()
        for m in self.members.values():
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(JoinResult(ErrorCode.not_coordinator))
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((ErrorCode.not_coordinator, b""))
        self.become(GroupState.DEAD)

    def expire_sessions(self, now: float) -> None:
        gone = [mid for mid, expiry in self.pending.items() if now > expiry]
        for mid in gone:
            del self.pending[mid]  # handed an id, never joined with it
        if gone and self.state == GroupState.PREPARING:
            self._maybe_complete_join()
        for mid, m in list(self.members.items()):
            waiting = m.join_future is not None and not m.join_future.done()
            if not waiting and now - m.last_heartbeat > m.session_timeout_ms / 1000:
                log.info(
                    "[node %d] Group %s: member %s session expired",
                    self.node_id,
                    self.group_id,
                    mid,
                )
                del self.members[mid]
                if m.group_instance_id is not None:
                    self.static.pop(m.group_instance_id, None)
                self._member_gone(m, now)
