"""The KRaft RPCs (KIP-595, KIP-996, KIP-630) as the core sees them: plain values.
The runtime maps them to Kafka's Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch
(54), Fetch (1) and FetchSnapshot (59) messages on the controller listener.

Every request carries a ``request_id`` that its response echoes (on the wire the
transport keeps it beside the correlation id). The core acts on a response only if it
answers the request it still has in flight, with the same id and the same echoed
fields; late, duplicated and stale responses are dropped (Kafka's RequestManager does
the same with one in-flight request per destination)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = [
    "BeginQuorumEpoch",
    "EndQuorumEpoch",
    "Entry",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "Message",
    "SnapshotId",
    "VoteRequest",
    "VoteResponse",
]

NONE = 0
REQUEST_TIMED_OUT = 7
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
INVALID_UPDATE_VERSION = 95
FENCED_LEADER_EPOCH = 74
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_LEADER_EPOCH = 76
OFFSET_OUT_OF_RANGE = 1
SNAPSHOT_NOT_FOUND = 98
INCONSISTENT_VOTER_SET = 71
INVALID_VOTER_KEY = 125
DUPLICATE_VOTER = 126
VOTER_NOT_FOUND = 127


@dataclass(frozen=True, slots=True)
class Entry:
    """A record batch of the replicated log, with its offsets assigned."""

    base_offset: int
    last_offset: int
    epoch: int
    data: bytes
    control: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotId:
    end_offset: int  # the snapshot holds every record below this offset
    epoch: int  # the epoch of the record at end_offset - 1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    src: int
    dst: int
    epoch: int  # the epoch the candidate stands in (current + 1 for a pre-vote)
    last_epoch: int
    end_offset: int
    pre_vote: bool = False
    request_id: int = 0
    candidate_dir: uuid.UUID | None = None  # the candidate's directory id
    voter_dir: uuid.UUID | None = None  # the recipient's, as the candidate's voter set has it


@dataclass(frozen=True, slots=True)
class VoteResponse:
    src: int
    dst: int
    epoch: int
    granted: bool
    leader_id: int = -1
    pre_vote: bool = False
    # INCONSISTENT_VOTER_SET: the candidate is not one of our (static) voters;
    # INVALID_VOTER_KEY: we are not the replica the candidate asked (another directory)
    error: int = 0
    request_id: int = 0


@dataclass(frozen=True, slots=True)
class BeginQuorumEpoch:
    src: int
    dst: int
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpoch:
    src: int
    dst: int
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    src: int
    dst: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int = 500
    request_id: int = 0
    replica_dir: uuid.UUID | None = None  # the fetching replica's directory id


@dataclass(frozen=True, slots=True)
class FetchResponse:
    src: int
    dst: int
    epoch: int
    leader_id: int
    error: int
    high_watermark: int = -1
    log_start_offset: int = 0
    entries: tuple[Entry, ...] = ()
    diverging: SnapshotId | None = None  # (end offset, epoch) to truncate to
    snapshot: SnapshotId | None = None  # fetch this snapshot first
    fetch_offset: int = -1  # echoes of the request, to match responses
    last_fetched_epoch: int = -1
    request_id: int = 0


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    src: int
    dst: int
    epoch: int
    snapshot: SnapshotId
    position: int
    max_bytes: int = 1 << 20
    request_id: int = 0
    replica_dir: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    src: int
    dst: int
    epoch: int
    leader_id: int
    error: int
    snapshot: SnapshotId | None = None
    size: int = 0
    position: int = 0
    data: bytes = b""
    request_id: int = 0


Message = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpoch
    | EndQuorumEpoch
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
)
