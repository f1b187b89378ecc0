"""A share group's membership (KIP-932) on its coordinator: members join, heartbeat and
leave with ShareGroupHeartbeat, and each is assigned partitions of the topics it
subscribes to. Records are shared per record, not per partition, so every member is
assigned every partition of its subscribed topics (Kafka's simple assignor gives each
partition to every member when there are more members than partitions; here always,
so that no partition waits for a member).

Pure rules: no asyncio, no clock (the caller passes ``now``), no I/O.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

__all__ = [
    "VALID_GROUP_TRANSITIONS",
    "Assignment",
    "ShareGroup",
    "ShareGroupError",
    "ShareGroupState",
    "ShareMember",
]

# topic id -> partitions
Assignment = dict[uuid.UUID, tuple[int, ...]]
# topic name -> (topic id, partitions)
TopicsView = Mapping[str, tuple[uuid.UUID, int]]

JOIN, LEAVE = 0, -1


class ShareGroupState(enum.Enum):
    """Kafka's ``ShareGroup.ShareGroupState``."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


G = ShareGroupState
VALID_GROUP_TRANSITIONS: dict[ShareGroupState, frozenset[ShareGroupState]] = {
    G.EMPTY: frozenset({G.STABLE, G.DEAD}),
    G.STABLE: frozenset({G.EMPTY}),
    G.DEAD: frozenset(),
}


class ShareGroupError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    assignment: Assignment = field(default_factory=dict)
    last_heartbeat: float = 0.0
    sent: Assignment | None = None  # the assignment the member was last answered with


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    state: ShareGroupState = ShareGroupState.EMPTY
    members: dict[str, ShareMember] = field(default_factory=dict)
    # every topic a member subscribed to (the share-partitions the group may have state
    # for, deleted with the group)
    topics_read: set[str] = field(default_factory=set)

    def _become(self, to: ShareGroupState) -> None:
        if to is self.state:
            return
        if to not in VALID_GROUP_TRANSITIONS[self.state]:
            raise ValueError(f"share group state {self.state.value} cannot become {to.value}")
        self.state = to

    def heartbeat(
        self,
        member_id: str,
        member_epoch: int,
        subscribed: Sequence[str] | None,
        topics: TopicsView,
        now: float,
        rack_id: str | None = None,
        client: tuple[str, str] = ("", ""),
    ) -> tuple[ShareMember | None, Assignment | None]:
        """One ShareGroupHeartbeat: (the member, the assignment to send or None when
        unchanged since it was last sent). A leaving member gets (None, None)."""
        if not member_id:
            raise ShareGroupError(ErrorCode.invalid_request, "MemberId can't be empty.")
        m = self.members.get(member_id)
        if member_epoch == LEAVE:
            if m is not None:
                del self.members[member_id]
                self.epoch += 1
                if not self.members:
                    self._become(G.EMPTY)
            return None, None
        if member_epoch == JOIN:
            if not subscribed:
                raise ShareGroupError(
                    ErrorCode.invalid_request,
                    "SubscribedTopicNames must be set in first request.",
                )
            if m is None:
                m = self.members[member_id] = ShareMember(member_id)
                self.epoch += 1
            m.sent = None  # (re)joined: send the assignment again
        elif m is None:
            raise ShareGroupError(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of share group {self.group_id}.",
            )
        elif member_epoch != m.epoch:
            raise ShareGroupError(
                ErrorCode.fenced_member_epoch,
                f"The share group member has an epoch {member_epoch} other than "
                f"{m.epoch}: it must rejoin.",
            )
        self._become(G.STABLE)
        m.last_heartbeat = now
        m.client_id, m.client_host = client
        if rack_id is not None:
            m.rack_id = rack_id
        if subscribed is not None and tuple(sorted(set(subscribed))) != m.subscribed:
            m.subscribed = tuple(sorted(set(subscribed)))
            self.epoch += 1
        target = self._target(m, topics)
        if target != m.assignment or m.epoch == 0:
            if target != m.assignment:
                self.epoch += 1
            m.assignment = target
            m.epoch = self.epoch
        if m.sent != m.assignment:
            m.sent = dict(m.assignment)
            return m, m.assignment
        return m, None

    @staticmethod
    def _target(m: ShareMember, topics: TopicsView) -> Assignment:
        out: Assignment = {}
        for name in m.subscribed:
            found = topics.get(name)
            if found is not None and found[1] > 0:
                out[found[0]] = tuple(range(found[1]))
        return out

    def expire(self, now: float, session_timeout_s: float) -> list[str]:
        """Remove members silent longer than the session timeout; their ids."""
        gone = [i for i, m in self.members.items() if now - m.last_heartbeat > session_timeout_s]
        for i in gone:
            del self.members[i]
        if gone:
            self.epoch += 1
            if not self.members:
                self._become(G.EMPTY)
        return gone

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def remember_topics(self) -> None:
        self.topics_read |= self.subscribed_topics()
