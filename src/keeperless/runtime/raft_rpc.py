"""Kafka's Raft RPCs (Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v17 and
FetchSnapshot v1 on `__cluster_metadata`) to and from the core's messages. The replicas'
directory ids (KIP-853) travel in Vote, Fetch and FetchSnapshot; Kafka's zero Uuid is
"unknown" (None in the core)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import request_class, response_class
from keeperless.protocol.records import complete_batches
from keeperless.raft import messages as m
from keeperless.raft.core import RaftConfig
from keeperless.raft.messages import Entry, SnapshotId

__all__ = [
    "FETCH_VERSION",
    "METADATA_TOPIC_ID",
    "RAFT_APIS",
    "directory_id",
    "request_of",
    "request_to_message",
    "response_of",
    "response_to_message",
    "wire_directory_id",
]

TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID
FETCH_VERSION = 17
_ZERO = uuid.UUID(int=0)
# api key -> version we speak
RAFT_APIS = {1: FETCH_VERSION, 52: 2, 53: 1, 54: 1, 59: 1}
_MAX_FETCH_BYTES = RaftConfig().max_fetch_bytes


def directory_id(wire: uuid.UUID | None) -> uuid.UUID | None:
    """A directory id from the wire (Kafka's zero Uuid: unknown)."""
    return None if wire is None or wire == _ZERO else wire


def wire_directory_id(d: uuid.UUID | None) -> uuid.UUID:
    return _ZERO if d is None else d


def _request_class(api_key: int) -> type:
    return request_class(api_key, RAFT_APIS[api_key])


def _entries(records: bytes | None) -> tuple[Entry, ...]:
    if not records:
        return ()
    return tuple(
        Entry(
            h.base_offset,
            h.last_offset,
            h.partition_leader_epoch,
            bytes(records[pos : pos + h.size]),
            h.is_control,
        )
        for pos, h in complete_batches(records)
    )


# -- requests -----------------------------------------------------------------------------


def request_of(msg: m.Message, cluster_id: str, endpoint: tuple[str, int]) -> tuple[int, Any]:
    """(api key, kio request) for a core request message."""
    host, port = endpoint
    leader_endpoints = [{"name": "CONTROLLER", "host": host, "port": port}]
    match msg:
        case m.VoteRequest():
            part: dict[str, Any] = {
                "partition_index": 0,
                "replica_epoch": msg.epoch,
                "replica_id": msg.src,
                "replica_directory_id": wire_directory_id(msg.candidate_dir),
                "voter_directory_id": wire_directory_id(msg.voter_dir),
                "last_offset_epoch": msg.last_epoch,
                "last_offset": msg.end_offset,
                "pre_vote": msg.pre_vote,
            }
            body: dict[str, Any] = {
                "cluster_id": cluster_id,
                "voter_id": msg.dst,
                "topics": [{"topic_name": TOPIC, "partitions": [part]}],
            }
            return 52, build(_request_class(ApiKey.VOTE), body)
        case m.BeginQuorumEpoch():
            part = {
                "partition_index": 0,
                "voter_directory_id": None,
                "leader_id": msg.leader_id,
                "leader_epoch": msg.epoch,
            }
            body = {
                "cluster_id": cluster_id,
                "voter_id": msg.dst,
                "topics": [{"topic_name": TOPIC, "partitions": [part]}],
                "leader_endpoints": leader_endpoints,
            }
            return 53, build(_request_class(ApiKey.BEGIN_QUORUM_EPOCH), body)
        case m.EndQuorumEpoch():
            part = {
                "partition_index": 0,
                "leader_id": msg.leader_id,
                "leader_epoch": msg.epoch,
                "preferred_candidates": [
                    {"candidate_id": c, "candidate_directory_id": None}
                    for c in msg.preferred_successors
                ],
            }
            body = {
                "cluster_id": cluster_id,
                "topics": [{"topic_name": TOPIC, "partitions": [part]}],
                "leader_endpoints": leader_endpoints,
            }
            return 54, build(_request_class(ApiKey.END_QUORUM_EPOCH), body)
        case m.FetchRequest():
            part = {
                "partition": 0,
                "current_leader_epoch": msg.epoch,
                "fetch_offset": msg.fetch_offset,
                "last_fetched_epoch": msg.last_fetched_epoch,
                "log_start_offset": -1,
                "partition_max_bytes": _MAX_FETCH_BYTES,
                "replica_directory_id": wire_directory_id(msg.replica_dir),
            }
            body = {
                "cluster_id": cluster_id,
                "replica_state": {"replica_id": msg.src, "replica_epoch": -1},
                "max_wait": datetime.timedelta(milliseconds=msg.max_wait_ms),
                "min_bytes": 1,
                "max_bytes": _MAX_FETCH_BYTES,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [{"topic_id": METADATA_TOPIC_ID, "partitions": [part]}],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            return 1, build(_request_class(ApiKey.FETCH), body)
        case m.FetchSnapshotRequest():
            part = {
                "partition": 0,
                "current_leader_epoch": msg.epoch,
                "snapshot_id": {"end_offset": msg.snapshot.end_offset, "epoch": msg.snapshot.epoch},
                "position": msg.position,
                "replica_directory_id": wire_directory_id(msg.replica_dir),
            }
            body = {
                "cluster_id": cluster_id,
                "replica_id": msg.src,
                "max_bytes": msg.max_bytes,
                "topics": [{"name": TOPIC, "partitions": [part]}],
            }
            return 59, build(_request_class(ApiKey.FETCH_SNAPSHOT), body)
    raise TypeError(f"not a request: {msg!r}")


def request_to_message(api_key: int, req: Any, dst: int, request_id: int = 0) -> m.Message:
    """The core message for an inbound Raft request addressed to ``dst`` (this node);
    ``request_id`` is the transport's name for it, which the core's answer echoes."""
    if api_key == ApiKey.VOTE:
        p = req.topics[0].partitions[0]
        return m.VoteRequest(
            p.replica_id,
            dst,
            p.replica_epoch,
            p.last_offset_epoch,
            p.last_offset,
            bool(getattr(p, "pre_vote", False)),
            request_id,
            directory_id(getattr(p, "replica_directory_id", None)),
            directory_id(getattr(p, "voter_directory_id", None)),
        )
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        p = req.topics[0].partitions[0]
        return m.BeginQuorumEpoch(p.leader_id, dst, p.leader_epoch, p.leader_id)
    if api_key == ApiKey.END_QUORUM_EPOCH:
        p = req.topics[0].partitions[0]
        return m.EndQuorumEpoch(
            p.leader_id,
            dst,
            p.leader_epoch,
            p.leader_id,
            tuple(c.candidate_id for c in p.preferred_candidates),
        )
    if api_key == ApiKey.FETCH:
        p = req.topics[0].partitions[0]
        wait = int(req.max_wait.total_seconds() * 1000)
        state = getattr(req, "replica_state", None)  # v15+
        return m.FetchRequest(
            state.replica_id if state is not None else req.replica_id,
            dst,
            p.current_leader_epoch,
            p.fetch_offset,
            p.last_fetched_epoch,
            wait,
            request_id,
            directory_id(getattr(p, "replica_directory_id", None)),
        )
    if api_key == ApiKey.FETCH_SNAPSHOT:
        p = req.topics[0].partitions[0]
        return m.FetchSnapshotRequest(
            req.replica_id,
            dst,
            p.current_leader_epoch,
            SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            p.position,
            req.max_bytes,
            request_id,
            directory_id(getattr(p, "replica_directory_id", None)),
        )
    raise TypeError(f"api key {api_key} is not a Raft request")


# -- responses ----------------------------------------------------------------------------


def response_of(
    api_key: int,
    version: int,
    msg: m.Message | None,
    leader_id: int,
    epoch: int,
    leader_endpoint: tuple[str, int] | None = None,
) -> Any:
    """The kio response for an inbound request, from the core's answer (None for the
    one-way BeginQuorumEpoch/EndQuorumEpoch, or when the core gave no answer); it names
    where the leader listens when that is known (Fetch v16+, FetchSnapshot, Vote: a
    controller that joined by bootstrap servers learns the leader's address so)."""
    nodes = (
        [{"node_id": leader_id, "host": leader_endpoint[0], "port": leader_endpoint[1]}]
        if leader_endpoint is not None and leader_id >= 0
        else []
    )
    cls = response_class(api_key, version)
    none = ErrorCode.none
    if api_key in (ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH) or msg is None:
        err = (
            none
            if msg is None and api_key in (ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH)
            else ErrorCode.not_leader_or_follower
        )
        part = {
            "partition_index": 0,
            "index": 0,
            "partition": 0,
            "error_code": err,
            "leader_id": leader_id,
            "leader_epoch": epoch,
            "vote_granted": False,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": None,
            "current_leader": {"leader_id": leader_id, "leader_epoch": epoch},
            "snapshot_id": {"end_offset": -1, "epoch": -1},
            "size": 0,
            "position": 0,
            "unaligned_records": b"",
            "partition_index_": 0,
        }
        return build(
            cls,
            {
                "error_code": none,
                "throttle_time": 0,
                "node_endpoints": nodes,
                "topics": [{"topic_name": TOPIC, "name": TOPIC, "partitions": [part]}],
                "responses": [
                    {"topic": TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [part]}
                ],
            },
        )
    match msg:
        case m.VoteResponse():
            part = {
                "partition_index": 0,
                "error_code": ErrorCode(msg.error),
                "leader_id": msg.leader_id,
                "leader_epoch": msg.epoch,
                "vote_granted": msg.granted,
            }
            return build(
                cls,
                {
                    "error_code": none,
                    "node_endpoints": nodes,
                    "topics": [{"topic_name": TOPIC, "partitions": [part]}],
                },
            )
        case m.FetchResponse():
            part = {
                "partition_index": 0,
                "error_code": ErrorCode(msg.error),
                "high_watermark": msg.high_watermark,
                "last_stable_offset": -1,
                "log_start_offset": msg.log_start_offset,
                "current_leader": {"leader_id": msg.leader_id, "leader_epoch": msg.epoch},
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": b"".join(e.data for e in msg.entries),
            }
            if msg.diverging is not None:
                part["diverging_epoch"] = {
                    "epoch": msg.diverging.epoch,
                    "end_offset": msg.diverging.end_offset,
                }
            if msg.snapshot is not None:
                part["snapshot_id"] = {
                    "end_offset": msg.snapshot.end_offset,
                    "epoch": msg.snapshot.epoch,
                }
            return build(
                cls,
                {
                    "throttle_time": 0,
                    "error_code": none,
                    "session_id": 0,
                    "responses": [
                        {"topic": TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [part]}
                    ],
                    "node_endpoints": nodes,
                },
            )
        case m.FetchSnapshotResponse():
            sid = msg.snapshot or SnapshotId(-1, -1)
            part = {
                "index": 0,
                "error_code": ErrorCode(msg.error),
                "snapshot_id": {"end_offset": sid.end_offset, "epoch": sid.epoch},
                "current_leader": {"leader_id": msg.leader_id, "leader_epoch": msg.epoch},
                "size": msg.size,
                "position": msg.position,
                "unaligned_records": msg.data,
            }
            return build(
                cls,
                {
                    "throttle_time": 0,
                    "error_code": none,
                    "node_endpoints": nodes,
                    "topics": [{"name": TOPIC, "partitions": [part]}],
                },
            )
    raise TypeError(f"not a response: {msg!r}")


def response_to_message(api_key: int, resp: Any, request: m.Message) -> m.Message | None:
    """The core message for the response to ``request`` (None if it carries nothing):
    the connection's correlation id tied it to ``request``, whose id and fields the
    message echoes for the core to match."""
    src, dst = request.dst, request.src
    if api_key == ApiKey.VOTE:
        assert isinstance(request, m.VoteRequest)
        p = resp.topics[0].partitions[0] if resp.topics else None
        if p is None:
            return None
        return m.VoteResponse(
            src,
            dst,
            p.leader_epoch,
            bool(p.vote_granted),
            p.leader_id,
            request.pre_vote,
            int(p.error_code),
            request.request_id,
        )
    if api_key == ApiKey.FETCH:
        assert isinstance(request, m.FetchRequest)
        if not resp.responses:
            return None
        p = resp.responses[0].partitions[0]
        div = p.diverging_epoch
        snap = p.snapshot_id
        return m.FetchResponse(
            src,
            dst,
            p.current_leader.leader_epoch,
            p.current_leader.leader_id,
            int(p.error_code),
            p.high_watermark,
            p.log_start_offset,
            _entries(p.records),
            SnapshotId(div.end_offset, div.epoch) if div.end_offset >= 0 else None,
            SnapshotId(snap.end_offset, snap.epoch) if snap.end_offset >= 0 else None,
            request.fetch_offset,
            request.last_fetched_epoch,
            request.request_id,
        )
    if api_key == ApiKey.FETCH_SNAPSHOT:
        assert isinstance(request, m.FetchSnapshotRequest)
        p = resp.topics[0].partitions[0] if resp.topics else None
        if p is None:
            return None
        sid = p.snapshot_id
        return m.FetchSnapshotResponse(
            src,
            dst,
            p.current_leader.leader_epoch,
            p.current_leader.leader_id,
            int(p.error_code),
            SnapshotId(sid.end_offset, sid.epoch) if sid.end_offset >= 0 else None,
            p.size,
            p.position,
            bytes(p.unaligned_records or b""),
            request.request_id,
        )
    return None  # BeginQuorumEpoch / EndQuorumEpoch responses carry nothing we need
