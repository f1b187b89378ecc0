"""`metadata-quorum describe --status | --replication`, `add-controller`,
`remove-controller` and `cluster cluster-id`, as Kafka's kafka-metadata-quorum.sh and
kafka-cluster.sh print them."""

from __future__ import annotations

import time
import uuid
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.storage.meta_properties import uuid_to_kafka
from keeperless.tools.client import ToolError, call

__all__ = [
    "QUORUM_TIMEOUT_S",
    "add_controller",
    "cluster_id",
    "describe_quorum",
    "print_replication",
    "print_status",
    "remove_controller",
]

_TOPIC = "__cluster_metadata"


QUORUM_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.25


def describe_quorum(servers: list[tuple[str, int]], timeout_s: float = QUORUM_TIMEOUT_S) -> Any:
    return describe_quorum_nodes(servers, timeout_s)[0]


def describe_quorum_nodes(
    servers: list[tuple[str, int]], timeout_s: float = QUORUM_TIMEOUT_S
) -> tuple[Any, dict[int, list[str]]]:
    """The DescribeQuorum answer of the active controller, asked directly or through a
    broker (which forwards it). Every bootstrap address is tried, and a controller that
    does not lead names the leader, whose address its answer (v2) carries. While some
    server answers but none leads (an election after the active controller died), ask
    again, as Kafka's admin client does, for up to ``timeout_s``; when no server answers
    at all, fail at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        p, nodes, last, answered = _ask_quorum(servers)
        if p is not None:
            return p, nodes
        if not answered or time.monotonic() + RETRY_BACKOFF_S > deadline:
            raise ToolError(f"no active controller answered DescribeQuorum: {last}")
        time.sleep(RETRY_BACKOFF_S)


def _ask_quorum(servers: list[tuple[str, int]]) -> tuple[Any, dict[int, list[str]], str, bool]:
    """One round over the servers (and the leaders they name): (the leader's answer or
    None, where each node listens, why not, whether any server answered)."""
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
            nodes = {
                n.node_id: [f"{li.name}://{li.host}:{li.port}" for li in n.listeners]
                for n in resp.nodes
            }
            return p, nodes, "", True
        if p is not None and p.leader_id >= 0:
            last = f"{server[0]}:{server[1]} is not the leader (leader is node {p.leader_id})"
            for node in resp.nodes:
                if node.node_id == p.leader_id:
                    queue[:0] = [(lst.host, lst.port) for lst in node.listeners]
        elif p is None:
            last = f"{server[0]}:{server[1]}: {resp.error_message or resp.error_code}"
        else:
            last = f"{server[0]}:{server[1]} knows no leader: the quorum may have no majority"
    return None, {}, last, answered


def _dir(d: Any) -> str:
    """A directory id as Kafka prints it (its zero Uuid: unknown)."""
    if d is None or d == uuid.UUID(int=0):
        return "AAAAAAAAAAAAAAAAAAAAAA"
    return uuid_to_kafka(d)


def _replica_json(r: Any, nodes: dict[int, list[str]]) -> str:
    d = r.replica_directory_id
    directory = "null" if d is None or d == uuid.UUID(int=0) else f'"{uuid_to_kafka(d)}"'
    out = f'{{"id": {r.replica_id}, "directoryId": {directory}'
    if nodes.get(r.replica_id):
        out += ', "endpoints": [' + ", ".join(f'"{e}"' for e in nodes[r.replica_id]) + "]"
    return out + "}"


def cluster_id(servers: list[tuple[str, int]]) -> str:
    resp = call(
        servers,
        ApiKey.DESCRIBE_CLUSTER,
        1,
        {"include_cluster_authorized_operations": False, "endpoint_type": 1},
    )
    return str(resp.cluster_id)


def print_status(servers: list[tuple[str, int]], out: TextIO) -> None:
    p, nodes = describe_quorum_nodes(servers)
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
        # Kafka 3.9+: [{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://h:p"]}]
        ("CurrentVoters", "[" + ", ".join(_replica_json(v, nodes) for v in p.current_voters) + "]"),
        ("CurrentObservers", "[" + ", ".join(_replica_json(o, nodes) for o in p.observers) + "]"),
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
        f"{'NodeId':<8}{'DirectoryId':<24}{'LogEndOffset':<16}{'Lag':<8}"
        f"{'LastFetchTimestamp':<24}{'LastCaughtUpTimestamp':<24}Status",
        file=out,
    )
    rows = [
        (v, "Leader" if v.replica_id == p.leader_id else "Follower") for v in p.current_voters
    ] + [(o, "Observer") for o in p.observers]
    rows.sort(key=lambda r: (r[1] != "Leader", r[1] == "Observer", r[0].replica_id))
    for r, status in rows:
        print(
            f"{r.replica_id:<8}{_dir(r.replica_directory_id):<24}{r.log_end_offset:<16}"
            f"{max(leader_end - r.log_end_offset, 0):<8}"
            f"{when(r.last_fetch_timestamp):<24}{when(r.last_caught_up_timestamp):<24}{status}",
            file=out,
        )


# -- voter changes (KIP-853) ------------------------------------------------------------

_NOT_LEADER = (6, 41)  # NOT_LEADER_OR_FOLLOWER, NOT_CONTROLLER: ask the leader


def _at_leader(
    servers: list[tuple[str, int]],
    key: ApiKey,
    version: int,
    body: dict[str, Any],
    via_brokers: bool = False,
) -> Any:
    """Send a voter change to the active controller (found by DescribeQuorum, whose
    answer names where the leader listens), again while leadership moves; or, given
    brokers (--bootstrap-server), to a broker, which forwards it as Kafka's do."""
    deadline = time.monotonic() + QUORUM_TIMEOUT_S
    while True:
        leader: list[tuple[str, int]] = []
        if not via_brokers:
            p, nodes = describe_quorum_nodes(servers, max(deadline - time.monotonic(), 1.0))
            leader = [(a.host, a.port) for e in nodes.get(p.leader_id, ()) if (a := _addr(e))]
        resp = call(leader or servers, key, version, body, timeout_s=QUORUM_TIMEOUT_S + 5)
        code = int(resp.error_code)
        if code not in _NOT_LEADER or time.monotonic() > deadline:
            return resp
        time.sleep(RETRY_BACKOFF_S)


class _Addr:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port


def _addr(endpoint: str) -> _Addr | None:
    """'NAME://host:port' as an address."""
    _, _, hostport = endpoint.rpartition("://")
    host, _, port = hostport.rpartition(":")
    return _Addr(host.strip("[]"), int(port)) if port.isdigit() else None


def _fail(resp: Any, what: str) -> None:
    code = int(resp.error_code)
    if code:
        from kio.schema.errors import ErrorCode

        name = ErrorCode(code).name.upper()
        raise ToolError(f"{what} failed: {name}: {resp.error_message or ''}".rstrip(": "))


def add_controller(
    servers: list[tuple[str, int]],
    config_path: str | None,
    dry_run: bool,
    out: TextIO,
    via_brokers: bool = False,
) -> int:
    """`add-controller --command-config controller.properties`: the controller that the
    file configures (its node.id, its metadata directory's directory id, its controller
    listeners' advertised endpoints) becomes a voter, once it is a caught-up observer."""
    if not config_path:
        raise ToolError(
            "You must supply the configuration file of the controller you are adding when "
            "using add-controller."
        )
    from keeperless.server.config import ConfigError, load_config
    from keeperless.storage.meta_properties import read_meta_properties, uuid_from_kafka

    try:
        cfg = load_config(config_path, ())
    except (ConfigError, OSError) as e:
        raise ToolError(f"{config_path}: {e}") from None
    meta = read_meta_properties(cfg.metadata_log_dir)
    if meta is None:
        raise ToolError(f"Unable to read meta.properties from {cfg.metadata_log_dir}")
    if not meta.directory_id:
        raise ToolError(f"No directory id found in {cfg.metadata_log_dir}")
    directory = uuid_from_kafka(meta.directory_id)
    names = list(cfg.controller_listener_names)
    advertised = {e.listener: e for e in (cfg["advertised.listeners"] or ())}
    endpoints: list[tuple[str, str, int]] = []
    for name in names:
        ep = advertised.get(name) or next((x for x in cfg.listeners if x.listener == name), None)
        if ep is None:
            raise ToolError(f"Cannot find information about controller listener name: {name}")
        endpoints.append((name, ep.host or "localhost", ep.port))
    text = ", ".join(f"{n}://{f'[{h}]' if ':' in h else h}:{p}" for n, h, p in endpoints)
    if not dry_run:
        body = {
            "cluster_id": None,
            "timeout": int(QUORUM_TIMEOUT_S * 1000),
            "voter_id": cfg.node_id,
            "voter_directory_id": directory,
            "listeners": [{"name": n, "host": h, "port": p} for n, h, p in endpoints],
            "ack_when_committed": True,
        }
        resp = _at_leader(servers, ApiKey.ADD_RAFT_VOTER, 0, body, via_brokers)
        _fail(resp, "add-controller")
    verb = "DRY RUN of adding" if dry_run else "Added"
    print(
        f"{verb} controller {cfg.node_id} with directory id {meta.directory_id} and "
        f"endpoints: {text}",
        file=out,
    )
    return 0


def remove_controller(
    servers: list[tuple[str, int]],
    controller_id: int,
    directory: str,
    dry_run: bool,
    out: TextIO,
    via_brokers: bool = False,
) -> int:
    """`remove-controller --controller-id N --controller-directory-id D`."""
    from keeperless.storage.meta_properties import uuid_from_kafka

    if controller_id < 0:
        raise ToolError(f"Invalid negative --controller-id: {controller_id}")
    try:
        d = uuid_from_kafka(directory)
    except ValueError as e:
        raise ToolError(f"Failed to parse --controller-directory-id: {e}") from None
    if not dry_run:
        body = {"cluster_id": None, "voter_id": controller_id, "voter_directory_id": d}
        resp = _at_leader(servers, ApiKey.REMOVE_RAFT_VOTER, 0, body, via_brokers)
        _fail(resp, "remove-controller")
    verb = "DRY RUN of removing " if dry_run else "Removed "
    print(f"{verb} KRaft controller {controller_id} with directory id {directory}", file=out)
    return 0
