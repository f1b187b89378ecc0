"""`metadata-quorum describe --status | --replication` and `cluster cluster-id`, as Kafka's
kafka-metadata-quorum.sh and kafka-cluster.sh print them."""

from __future__ import annotations

import time
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import ToolError, call

__all__ = [
    "QUORUM_TIMEOUT_S",
    "cluster_id",
    "describe_quorum",
    "print_replication",
    "print_status",
]

_TOPIC = "__cluster_metadata"


QUORUM_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.25


def describe_quorum(servers: list[tuple[str, int]], timeout_s: float = QUORUM_TIMEOUT_S) -> Any:
    """The DescribeQuorum answer of the active controller, asked directly or through a
    broker (which forwards it). Every bootstrap address is tried, and a controller that
    does not lead names the leader, whose address its answer (v2) carries. While some
    server answers but none leads (an election after the active controller died), ask
    again, as Kafka's admin client does, for up to ``timeout_s``; when no server answers
    at all, fail at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        p, last, answered = _ask_quorum(servers)
        if p is not None:
            return p
        if not answered or time.monotonic() + RETRY_BACKOFF_S > deadline:
            raise ToolError(f"no active controller answered DescribeQuorum: {last}")
        time.sleep(RETRY_BACKOFF_S)


def _ask_quorum(servers: list[tuple[str, int]]) -> tuple[Any, str, bool]:
    """One round over the servers (and the leaders they name): (the leader's answer or
    None, why not, whether any server answered)."""
    body = {"topics": [{"topic_name": _TOPIC, "partitions": [{"partition_index": 0}]}]}
    last = "no server answered"
    answered = False
    queue = list(servers)
    seen: set[tuple[str, int]] = set()
    while queue:
        server = queue.pop(0)
        if server in seen:
            continue
        seen.add(server)
        try:
            resp = call([server], ApiKey.DESCRIBE_QUORUM, 2, body)
        except ToolError as e:
            if not answered:
                last = str(e)
            continue
        answered = True
        if int(resp.error_code) == 31:  # CLUSTER_AUTHORIZATION_FAILED: no use asking again
            why = resp.error_message or "DESCRIBE on the cluster is denied"
            raise ToolError(f"{server[0]}:{server[1]}: Cluster authorization failed ({why})")
        p = resp.topics[0].partitions[0] if resp.topics else None
        if p is not None and int(p.error_code) == 0:
            return p, "", True
        if p is not None and p.leader_id >= 0:
            last = f"{server[0]}:{server[1]} is not the leader (leader is node {p.leader_id})"
            for node in resp.nodes:
                if node.node_id == p.leader_id:
                    queue[:0] = [(lst.host, lst.port) for lst in node.listeners]
        elif p is None:
            last = f"{server[0]}:{server[1]}: {resp.error_message or resp.error_code}"
        else:
            last = f"{server[0]}:{server[1]} knows no leader: the quorum may have no majority"
    return None, last, answered


def cluster_id(servers: list[tuple[str, int]]) -> str:
    resp = call(
        servers,
        ApiKey.DESCRIBE_CLUSTER,
        1,
        {"include_cluster_authorized_operations": False, "endpoint_type": 1},
    )
    return str(resp.cluster_id)


def print_status(servers: list[tuple[str, int]], out: TextIO) -> None:
    p = describe_quorum(servers)
    cid = cluster_id(servers)
    now = int(time.time() * 1000)
    leader_end = next(
        (v.log_end_offset for v in p.current_voters if v.replica_id == p.leader_id),
        p.high_watermark,
    )
    followers = [v for v in p.current_voters if v.replica_id != p.leader_id]
    max_lag = max((leader_end - v.log_end_offset for v in followers), default=0)
    lag_times = [
        now - v.last_caught_up_timestamp for v in followers if v.last_caught_up_timestamp >= 0
    ]
    rows = [
        ("ClusterId", cid),
        ("LeaderId", p.leader_id),
        ("LeaderEpoch", p.leader_epoch),
        ("HighWatermark", p.high_watermark),
        ("MaxFollowerLag", max_lag),
        ("MaxFollowerLagTimeMs", max(lag_times, default=-1) if followers else 0),
        ("CurrentVoters", "[" + ",".join(str(v.replica_id) for v in p.current_voters) + "]"),
        ("CurrentObservers", "[" + ",".join(str(o.replica_id) for o in p.observers) + "]"),
    ]
    for k, v in rows:
        print(f"{k + ':':<24}{v}", file=out)


def print_replication(
    servers: list[tuple[str, int]], out: TextIO, human_readable: bool = False
) -> None:
    p = describe_quorum(servers)
    now = int(time.time() * 1000)

    def when(ts: int) -> str:
        if not human_readable:
            return str(ts)
        return f"{max(now - ts, 0)} ms ago" if ts >= 0 else "-"

    leader_end = next(
        (v.log_end_offset for v in p.current_voters if v.replica_id == p.leader_id),
        p.high_watermark,
    )
    print(
        f"{'NodeId':<8}{'LogEndOffset':<16}{'Lag':<8}{'LastFetchTimestamp':<24}"
        f"{'LastCaughtUpTimestamp':<24}Status",
        file=out,
    )
    rows = [
        (v, "Leader" if v.replica_id == p.leader_id else "Follower") for v in p.current_voters
    ] + [(o, "Observer") for o in p.observers]
    rows.sort(key=lambda r: (r[1] != "Leader", r[1] == "Observer", r[0].replica_id))
    for r, status in rows:
        print(
            f"{r.replica_id:<8}{r.log_end_offset:<16}{max(leader_end - r.log_end_offset, 0):<8}"
            f"{when(r.last_fetch_timestamp):<24}{when(r.last_caught_up_timestamp):<24}{status}",
            file=out,
        )
