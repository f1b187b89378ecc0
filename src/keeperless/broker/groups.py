"""Classic consumer group membership: join, sync, heartbeat, leave, session expiry.

The rebalance protocol of Kafka's GroupCoordinator: a group goes Empty ->
PreparingRebalance (members (re)join) -> CompletingRebalance (leader computes the
assignment) -> Stable (SyncGroup delivered it). Waiting requests are futures that the
transitions resolve.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

__all__ = ["Group", "GroupState", "JoinResult", "Member"]

log = logging.getLogger(__name__)


class GroupState:
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


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
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[ErrorCode, bytes]] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(slots=True)
class Group:
    group_id: str
    initial_delay_ms: int
    node_id: int = -1
    state: str = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # ids handed out, not yet joined
    rebalance_deadline: float = 0.0
    _timer: asyncio.TimerHandle | None = None

    # -- join ---------------------------------------------------------------------------

    def join(
        self, req: Any, client_id: str, client_host: str, version: int, now: float
    ) -> asyncio.Future[JoinResult] | JoinResult:
        loop = asyncio.get_running_loop()
        session_ms = int(req.session_timeout.total_seconds() * 1000)
        rebalance_td = getattr(req, "rebalance_timeout", None)
        rebalance_ms = int(rebalance_td.total_seconds() * 1000) if rebalance_td else session_ms
        if rebalance_ms <= 0:
            rebalance_ms = session_ms
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        if (
            self.protocol_type is not None
            and self.members
            and req.protocol_type != self.protocol_type
        ):
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        if (
            self.members
            and self.protocol
            and not any(
                all(any(n == name for n, _ in m.protocols) for m in self.members.values())
                for name, _ in protocols
            )
        ):
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        member_id = req.member_id
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if version >= 4:
                self.pending.add(member_id)
                return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        elif member_id not in self.members and member_id not in self.pending:
            return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
        self.pending.discard(member_id)
        m = self.members.get(member_id)
        if m is None:
            m = Member(
                member_id,
                getattr(req, "group_instance_id", None),
                client_id,
                client_host,
                session_ms,
                rebalance_ms,
                req.protocol_type,
                protocols,
            )
            self.members[member_id] = m
            log.info("[node %d] Group %s: member %s joined", self.node_id, self.group_id, member_id)
        else:
            changed = m.protocols != protocols
            m.protocols = protocols
            m.session_timeout_ms, m.rebalance_timeout_ms = session_ms, rebalance_ms
            if self.state == GroupState.STABLE and not changed and m.member_id != self.leader:
                # Rejoin without change in a stable group: hand back the current state.
                return self._join_result(m)
        m.last_heartbeat = now
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(ErrorCode.rebalance_in_progress))
        fut: asyncio.Future[JoinResult] = loop.create_future()
        m.join_future = fut
        if self.state != GroupState.PREPARING:
            self._prepare_rebalance(now, initial=self.state == GroupState.EMPTY)
        else:
            self._maybe_complete_join()
        return fut

    def _prepare_rebalance(self, now: float, initial: bool = False) -> None:
        for m in self.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((ErrorCode.rebalance_in_progress, b""))
        prev = self.state
        self.state = GroupState.PREPARING
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
        self._schedule(delay / 1000)
        if not initial:
            self._maybe_complete_join()

    def _schedule(self, delay_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_join_deadline)

    def _on_join_deadline(self) -> None:
        self._timer = None
        if self.state != GroupState.PREPARING:
            return
        for mid in [
            mid for mid, m in self.members.items() if m.join_future is None or m.join_future.done()
        ]:
            log.info(
                "[node %d] Group %s: removing member %s, which did not rejoin in time",
                self.node_id,
                self.group_id,
                mid,
            )
            del self.members[mid]
        self._complete_join()

    def _maybe_complete_join(self) -> None:
        if self.state != GroupState.PREPARING or self.pending:
            return
        if self._timer is not None and self.generation == 0 and self.initial_delay_ms > 0:
            return  # the initial delay lets more members arrive before the first generation
        if all(
            m.join_future is not None and not m.join_future.done() for m in self.members.values()
        ):
            self._complete_join()

    def _complete_join(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.members:
            self.state = GroupState.EMPTY
            self.generation += 1
            self.protocol = None
            self.leader = None
            return
        self.generation += 1
        self.state = GroupState.COMPLETING
        first = next(iter(self.members.values()))
        self.protocol_type = first.protocol_type
        self.protocol = self._select_protocol()
        if self.leader not in self.members:
            self.leader = first.member_id
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

    def _join_result(self, m: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if m.member_id == self.leader:
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

    def check_member(self, member_id: str, generation: int) -> ErrorCode:
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes], now: float
    ) -> asyncio.Future[tuple[ErrorCode, bytes]] | tuple[ErrorCode, bytes]:
        err = self.check_member(member_id, generation)
        if err != ErrorCode.none:
            return err, b""
        if self.state == GroupState.PREPARING:
            return ErrorCode.rebalance_in_progress, b""
        m = self.members[member_id]
        m.last_heartbeat = now
        if self.state == GroupState.STABLE:
            return ErrorCode.none, m.assignment
        fut: asyncio.Future[tuple[ErrorCode, bytes]] = asyncio.get_running_loop().create_future()
        m.sync_future = fut
        if member_id == self.leader:
            for o in self.members.values():
                o.assignment = assignments.get(o.member_id, b"")
            self.state = GroupState.STABLE
            log.info(
                "[node %d] Group %s: stable at generation %d",
                self.node_id,
                self.group_id,
                self.generation,
            )
            for o in self.members.values():
                if o.sync_future is not None and not o.sync_future.done():
                    o.sync_future.set_result((ErrorCode.none, o.assignment))
                o.sync_future = None
        return fut

    def heartbeat(self, member_id: str, generation: int, now: float) -> ErrorCode:
        err = self.check_member(member_id, generation)
        if err != ErrorCode.none:
            return err
        self.members[member_id].last_heartbeat = now
        if self.state == GroupState.PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, member_id: str, now: float) -> ErrorCode:
        m = self.members.pop(member_id, None)
        if m is None:
            return ErrorCode.unknown_member_id
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
        elif self.members:
            self._prepare_rebalance(now)
        else:
            self.state = GroupState.EMPTY
            self.protocol = None
            self.leader = None
            self.generation += 1

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
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for m in self.members.values():
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(JoinResult(ErrorCode.not_coordinator))
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((ErrorCode.not_coordinator, b""))
        self.state = GroupState.DEAD

    def expire_sessions(self, now: float) -> None:
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
                self._member_gone(m, now)
