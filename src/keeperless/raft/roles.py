"""What a RaftCore knows only while it holds one role, one object per role, as Kafka's
QuorumState holds one EpochState (UnattachedState, ProspectiveState, CandidateState,
LeaderState, FollowerState, ResignedState). A role change replaces the object: a vote
tally, a leader's view of its replicas or a fetch in flight cannot outlive the role it
belongs to. What every role shares (the epoch, the leader, the vote, the log and its
high watermark) stays on the core, in its durable ElectionState.

Plain data with no rules: the rules live in ``raft/election.py`` and
``raft/replication.py``, which find the state of the role they act in by its type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from keeperless.raft import messages as m
from keeperless.raft.messages import SnapshotId
from keeperless.raft.state import Progress, Role

__all__ = [
    "CandidateState",
    "FetchState",
    "FollowerState",
    "LeaderState",
    "NomineeState",
    "ProspectiveState",
    "ResignedState",
    "RoleState",
    "UnattachedState",
]

NEVER = -(2**62)


@dataclass(slots=True)
class FetchState:
    """A follower's or observer's one fetch (or snapshot fetch) in flight, and until when
    it may be answered (with none in flight: a backoff before the next); and the
    snapshot being fetched chunk by chunk, as Kafka's FollowerState holds it."""

    request: m.FetchRequest | m.FetchSnapshotRequest | None = None
    until_ms: int = -1
    snapshot: SnapshotId | None = None
    snapshot_buf: bytearray = field(default_factory=bytearray)

    def clear(self) -> None:
        """The fetch in flight is answered, or timed out: a late answer is dropped."""
        self.request = None
        self.until_ms = -1


@dataclass(slots=True)
class UnattachedState:
    """No leader known in this epoch. An observer (or a voter that may not stand) looks
    for the leader by fetching from the voters it knows."""

    role: ClassVar[Role] = Role.UNATTACHED
    fetch: FetchState = field(default_factory=FetchState)


@dataclass(slots=True)
class FollowerState:
    """Following a known leader of this epoch."""

    role: ClassVar[Role] = Role.FOLLOWER
    fetch: FetchState = field(default_factory=FetchState)
    # when the leader itself last answered a fetch or announced its epoch (not hearsay
    # about it): only that makes a follower refuse pre-votes (KIP-996), so a dead
    # leader cannot livelock an election
    leader_contact_ms: int = NEVER


@dataclass(slots=True)
class NomineeState:
    """Standing for election: the votes received, and the vote request in flight to
    each voter with when it times out (Kafka's EpochElection)."""

    votes: dict[int, bool] = field(default_factory=dict)
    requests: dict[int, tuple[m.VoteRequest, int]] = field(default_factory=dict)


@dataclass(slots=True)
class ProspectiveState(NomineeState):
    """Asking for pre-votes in the current epoch (KIP-996)."""

    role: ClassVar[Role] = Role.PROSPECTIVE


@dataclass(slots=True)
class CandidateState(NomineeState):
    """Asking for votes in a new epoch it has voted itself in."""

    role: ClassVar[Role] = Role.CANDIDATE


@dataclass(slots=True)
class LeaderState:
    """Leading the epoch: where it started (nothing commits below it until an entry of
    this epoch does), each replica's fetching, and the long-polling fetches parked until
    there is more to send or their wait ends."""

    role: ClassVar[Role] = Role.LEADER
    epoch_start_offset: int
    since_ms: int
    progress: dict[int, Progress] = field(default_factory=dict)
    parked: list[tuple[m.FetchRequest, int]] = field(default_factory=list)


@dataclass(slots=True)
class ResignedState:
    """A leader that stepped down (shutdown, lost its quorum, or removed itself): it
    answers no fetch and waits for the next election."""

    role: ClassVar[Role] = Role.RESIGNED


RoleState = (
    UnattachedState
    | FollowerState
    | ProspectiveState
    | CandidateState
    | LeaderState
    | ResignedState
)
