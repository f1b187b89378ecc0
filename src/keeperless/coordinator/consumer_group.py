"""The consumer group protocol of KIP-848: the coordinator computes the assignment.

Members heartbeat (ConsumerGroupHeartbeat) with their subscription and the partitions
they own. A change of membership, subscription or the subscribed topics' partitions
bumps the group epoch; the target assignment for that epoch is computed by the server
assignor (``uniform`` or ``range``); each member is then reconciled towards its target:
it first gives up what it must revoke (its epoch stays), then moves to the target epoch
with the partitions that are free, and gets the ones still owned by others once they
are released. A member that misses its session, or does not revoke within its rebalance
timeout, is removed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.metadata.admin import INTERNAL_TOPICS

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "ConsumerGroup",
    "ConsumerMember",
    "HeartbeatError",
    "HeartbeatReply",
    "Subscription",
    "TopicsView",
]

log = logging.getLogger(__name__)

Assignment = dict[UUID, frozenset[int]]
# what the coordinator knows of the topics: name -> (topic id, partition count)
TopicsView = Mapping[str, tuple[UUID, int]]

STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked_partitions", "unreleased_partitions"
LEAVE, STATIC_LEAVE = -1, -2


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Subscription:
    names: tuple[str, ...] = ()
    regex: str | None = None

    def topics(self, view: TopicsView) -> list[str]:
        out = set(self.names) & set(view)
        if self.regex:
            try:
                pattern = re.compile(self.regex)
            except re.error:
                pattern = None
            if pattern is not None:
                out |= {t for t in view if t not in INTERNAL_TOPICS and pattern.fullmatch(t)}
        return sorted(out)


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscription: Subscription
    assignor: str | None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: str = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    last_heartbeat: float = 0.0
    revoke_by: float | None = None
    sent: Assignment | None = None  # the assignment last sent to the member
    # a classic-protocol member of this group (mixed_groups.ClassicMeta), else None
    classic: Any = None


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: unchanged since the last answer


def _flat(a: Mapping[UUID, Iterable[int]]) -> set[tuple[UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _group(pairs: Iterable[tuple[UUID, int]]) -> Assignment:
    out: dict[UUID, set[int]] = {}
    for t, p in pairs:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


# -- assignors -------------------------------------------------------------------------


def _uniform(
    members: Mapping[str, list[str]], view: TopicsView, current: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    """Partitions spread as evenly as the subscriptions allow, keeping each member's
    current partitions where that stays balanced (Kafka's uniform assignor, sticky)."""
    out: dict[str, set[tuple[UUID, int]]] = {m: set() for m in members}
    every = sorted(
        {(view[t][0], p) for ts in members.values() for t in ts for p in range(view[t][1])},
        key=lambda tp: (str(tp[0]), tp[1]),
    )
    subscribers: dict[UUID, list[str]] = {}
    by_id = {tid: name for name, (tid, _) in view.items()}
    for m, ts in sorted(members.items()):
        for t in ts:
            subscribers.setdefault(view[t][0], []).append(m)
    # as Kafka's UniformHomogeneousAssignmentBuilder: every member gets at least
    # ``least``, and only ``over`` of them one more (a member keeping a ceil(P/M) quota
    # of its partitions left 4 partitions at 2/2/0 when a third member joined two)
    least, over = divmod(len(every), max(len(members), 1))
    taken: set[tuple[UUID, int]] = set()
    for m in sorted(members):  # stickiness first, within the quotas
        kept = [
            tp
            for tp in sorted(_flat(current.get(m, {})), key=lambda tp: (str(tp[0]), tp[1]))
            if tp[0] in by_id
            and m in subscribers.get(tp[0], ())
            and tp not in taken
            and tp[1] < view[by_id[tp[0]]][1]
        ]
        quota = least
        if len(kept) > least and over > 0:
            quota, over = least + 1, over - 1
        for tp in kept[:quota]:
            out[m].add(tp)
            taken.add(tp)
    for tp in every:  # the rest to the least loaded subscriber
        if tp in taken:
            continue
        m = min(subscribers[tp[0]], key=lambda x: (len(out[x]), x))
        out[m].add(tp)
    return {m: _group(ps) for m, ps in out.items()}


def _range(
    members: Mapping[str, list[str]], view: TopicsView, current: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    """Per topic, contiguous ranges of partitions to its subscribers in member order
    (co-partitioned topics land together, as Kafka's range assignor)."""
    out: dict[str, set[tuple[UUID, int]]] = {m: set() for m in members}
    topics = sorted({t for ts in members.values() for t in ts})
    for t in topics:
        subs = sorted(m for m, ts in members.items() if t in ts)
        tid, count = view[t]
        per, extra = divmod(count, len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = per + (1 if i < extra else 0)
            out[m].update((tid, p) for p in range(start, start + n))
            start += n
    return {m: _group(ps) for m, ps in out.items()}


ASSIGNORS = {"uniform": _uniform, "range": _range}


# -- the group -------------------------------------------------------------------------


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    node_id: int = -1
    default_assignor: str = "uniform"
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)
    topics_seen: tuple[tuple[str, UUID, int], ...] = ()  # subscribed topics' metadata

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch != self.group_epoch:
            return "Assigning"
        if any(
            m.member_epoch != self.assignment_epoch or m.state != STABLE
            for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def assignor_name(self) -> str:
        chosen = {m.assignor for m in self.members.values() if m.assignor}
        return sorted(chosen)[0] if len(chosen) == 1 else self.default_assignor

    def subscribed_topics(self, view: TopicsView) -> set[str]:
        return {t for m in self.members.values() for t in m.subscription.topics(view)}

    # -- membership ----------------------------------------------------------------------

    def join(
        self,
        member_id: str,
        instance_id: str | None,
        spec: tuple[str | None, str, str, int, Subscription, str | None],
        now: float,
    ) -> ConsumerMember:
        """A member (re)joins with epoch 0. A static member whose instance left for a
        while (epoch -2) takes its place and assignment."""
        subscription, assignor = spec[4], spec[5]
        if instance_id is not None:
            old_id = self.static.get(instance_id)
            old = self.members.get(old_id) if old_id is not None else None
            if old is not None and old_id is not None and old_id != member_id:
                if old.member_epoch != STATIC_LEAVE:
                    raise HeartbeatError(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {old_id} with instance id {instance_id} is still "
                        "present in the group",
                    )
                del self.members[old_id]
                m = self._new_member(member_id, instance_id, spec, now)
                m.member_epoch = m.previous_epoch = old.previous_epoch
                m.assigned = old.assigned
                self.static[instance_id] = member_id
                self.target[member_id] = self.target.pop(old_id, {})
                if subscription != old.subscription or assignor != old.assignor:
                    self._bump("a static member came back with another subscription")
                return m
        existing = self.members.pop(member_id, None)
        if existing is not None:
            self.target.pop(member_id, None)  # rejoining after being fenced: anew
        m = self._new_member(member_id, instance_id, spec, now)
        if instance_id is not None:
            self.static[instance_id] = member_id
        log.info(
            "[node %d] Consumer group %s: member %s joined%s",
            self.node_id,
            self.group_id,
            member_id,
            f" (instance {instance_id})" if instance_id else "",
        )
        self._bump("a member joined")
        return m

    def _new_member(
        self,
        member_id: str,
        instance_id: str | None,
        spec: tuple[str | None, str, str, int, Subscription, str | None],
        now: float,
    ) -> ConsumerMember:
        rack, client_id, client_host, rebalance_ms, subscription, assignor = spec
        m = ConsumerMember(
            member_id,
            instance_id,
            rack,
            client_id,
            client_host,
            rebalance_ms,
            subscription,
            assignor,
            last_heartbeat=now,
        )
        self.members[member_id] = m
        return m

    def leave(self, member_id: str, static: bool) -> None:
        m = self.members.get(member_id)
        if m is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not in group {self.group_id}"
            )
        if static and m.instance_id is not None:
            # a static member leaves for a while: its place and assignment wait
            m.previous_epoch, m.member_epoch = m.member_epoch, STATIC_LEAVE
            return
        self.remove(member_id, "left the group")

    def remove(self, member_id: str, why: str) -> None:
        m = self.members.pop(member_id, None)
        if m is None:
            return
        if m.instance_id is not None and self.static.get(m.instance_id) == member_id:
            del self.static[m.instance_id]
        self.target.pop(member_id, None)
        log.info(
            "[node %d] Consumer group %s: member %s %s", self.node_id, self.group_id, member_id, why
        )
        self._bump(why)

    def _bump(self, why: str) -> None:
        self.group_epoch += 1

    # -- heartbeat -----------------------------------------------------------------------

    def validate_epoch(self, m: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
        """Kafka's rule: the member's current epoch; its previous one only while the
        answer that moved it on may have been lost (it owns nothing it should not)."""
        if epoch == m.member_epoch:
            return
        if (
            epoch == m.previous_epoch
            and owned is not None
            and _flat(owned) <= _flat(m.assigned) | _flat(m.pending_revocation)
        ):
            return
        raise HeartbeatError(
            ErrorCode.fenced_member_epoch,
            f"The member epoch {epoch} of {m.member_id} is fenced (the group has it at "
            f"{m.member_epoch}); rejoin with epoch 0",
        )

    def update(
        self,
        m: ConsumerMember,
        subscription: Subscription | None,
        assignor: str | None,
        rebalance_ms: int,
        now: float,
    ) -> None:
        m.last_heartbeat = now
        if rebalance_ms > 0:
            m.rebalance_timeout_ms = rebalance_ms
        if subscription is not None and subscription != m.subscription:
            m.subscription = subscription
            self._bump("a subscription changed")
        if assignor is not None and assignor != m.assignor:
            m.assignor = assignor
            self._bump("an assignor changed")

    def refresh(self, view: TopicsView) -> None:
        """The subscribed topics' partitions changed (created, deleted, grown): a new
        target assignment is due."""
        seen = tuple((t, view[t][0], view[t][1]) for t in sorted(self.subscribed_topics(view)))
        if seen != self.topics_seen:
            self.topics_seen = seen
            self._bump("the subscribed topics changed")

    def compute_target(self, view: TopicsView) -> None:
        if self.assignment_epoch == self.group_epoch:
            return
        live = {k: m for k, m in self.members.items()}
        subs = {k: m.subscription.topics(view) for k, m in live.items()}
        current = {k: m.assigned for k, m in live.items()}
        assignor = ASSIGNORS[self.assignor_name()]
        self.target = assignor(subs, view, current)
        self.assignment_epoch = self.group_epoch
        log.info(
            "[node %d] Consumer group %s: epoch %d, %d member(s), target assignment by %s",
            self.node_id,
            self.group_id,
            self.group_epoch,
            len(live),
            self.assignor_name(),
        )

    def reconcile(self, m: ConsumerMember, owned: Assignment | None, now: float) -> None:
        """Move ``m`` towards its target: revoke first, then the target epoch with the
        partitions no one else still owns (Kafka's CurrentAssignmentBuilder)."""
        target = _flat(self.target.get(m.member_id, {}))
        if m.state == UNREVOKED:
            still = _flat(m.pending_revocation)
            if owned is None or still & _flat(owned):
                return  # waiting for the member to give them up
            m.pending_revocation = {}
            m.revoke_by = None
        current = _flat(m.assigned)
        revoke = current - target
        if revoke:
            m.assigned = _group(current - revoke)
            m.pending_revocation = _group(revoke)
            m.state = UNREVOKED
            m.revoke_by = now + m.rebalance_timeout_ms / 1000
            return
        owned_elsewhere = set()
        for other in self.members.values():
            if other is not m:
                owned_elsewhere |= _flat(other.assigned) | _flat(other.pending_revocation)
        free = target - owned_elsewhere
        m.assigned = _group(free)
        if m.member_epoch != self.assignment_epoch:
            m.previous_epoch, m.member_epoch = m.member_epoch, self.assignment_epoch
        m.state = UNRELEASED if target - free else STABLE

    def heartbeat_reply(self, m: ConsumerMember, full: bool) -> HeartbeatReply:
        changed = full or m.sent is None or _flat(m.sent) != _flat(m.assigned)
        if changed:
            m.sent = dict(m.assigned)
        return HeartbeatReply(m.member_id, m.member_epoch, dict(m.assigned) if changed else None)

    def expire(self, now: float, session_timeout_ms: int) -> None:
        for mid, m in list(self.members.items()):
            session_ms = m.classic.session_timeout_ms if m.classic else session_timeout_ms
            if now - m.last_heartbeat > session_ms / 1000:
                self.remove(mid, "missed its session")
            elif m.revoke_by is not None and now > m.revoke_by:
                self.remove(mid, "did not revoke its partitions within its rebalance timeout")
