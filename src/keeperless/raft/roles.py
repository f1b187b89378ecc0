"""What a Raft replica knows only while it holds one role, one object per role, as
Kafka's QuorumState holds one EpochState (UnattachedState, ProspectiveState,
CandidateState, LeaderState, FollowerState, ResignedState). A role change replaces the
object (``RaftNode._transition``): a vote tally, a leader's view of its replicas, a
fetch in flight or a snapshot half fetched cannot outlive the role it belongs to. What
every role shares stays on the RaftNode: the durable ElectionState (epoch, leader,
vote), the log, the high watermark and the one timer whose meaning the role gives
(``_deadline``: a follower's fetch timeout, a nominee's election timeout, a leader's
check-quorum).

Plain data with no rules: the rules that find the state of the role they act in by its
type are in election.py, replication.py, membership.py and core.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from keeperless.raft import messages as m
from keeperless.raft.messages import SnapshotId
from keeperless.raft.state import Role

__all__ = [
    "CandidateState",
    "FetchState",
    "FollowerState",
    "LeaderState",
    "NomineeState",
    "Progress",
    "ProspectiveState",
    "ResignedState",
    "RoleState",
    "UnattachedState",
]

NEVER = -(2**62)


@dataclass(slots=True)
class FetchState:
    """A follower's or observer's one fetch (or snapshot fetch) in flight, and until when
    it may be answered (with none in flight: a backoff before the next)."""

    request: m.FetchRequest | m.FetchSnapshotRequest | None = None
    until_ms: int = -1

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
    # when the leader itself last answered a fetch or announced its epoch: only that
    # makes a follower refuse pre-votes (KIP-996), not contact with an earlier leader
    # nor hearsay about this one, so a dead leader cannot livelock an election
    leader_contact_ms: int = NEVER
    # the snapshot the leader sent us to, fetched chunk by chunk (as Kafka's
    # FollowerState holds it): a role change starts it over, so that chunks of two
    # leaders' copies are never spliced together
    snapshot: SnapshotId | None = None
    snapshot_buf: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class Progress:
    """What a leader knows of one replica's fetching (Kafka's LeaderState.ReplicaState)."""

    fetch_offset: int = -1
    last_fetch_ms: int = NEVER
    caught_up_ms: int = -1
    directory_id: uuid.UUID | None = None  # of the replica that fetched last


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
