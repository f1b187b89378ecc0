"""Carries the Raft core's messages between nodes as Kafka RPCs on the controller
listener. Outbound requests go over two connections per peer (fetches long-poll, so
votes get their own lane); an inbound request is stepped into the core and answered
with the core's matching response message.

Every Raft RPC carries the cluster id (KIP-595): a request from a node formatted for
another cluster is refused with INCONSISTENT_CLUSTER_ID and never reaches the core,
and such a refusal is logged by the requester too (rate-limited on both sides)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.net.client import Backoff, NetworkClient
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import (
    NodeStopping,
    RequestHeader,
    response_class,
)
from keeperless.raft import messages as m
from keeperless.raft.voters import VoterSet
from keeperless.runtime.raft_rpc import (
    METADATA_TOPIC_ID,
    RAFT_APIS,
    request_of,
    request_to_message,
    response_of,
    response_to_message,
    wire_directory_id,
)

__all__ = ["RaftTransport"]

log = logging.getLogger(__name__)

_EXPECTED: dict[int, type] = {52: m.VoteResponse, 1: m.FetchResponse, 59: m.FetchSnapshotResponse}
_RESPONSES = tuple(_EXPECTED.values())
_RECONNECT_BACKOFF_S = 0.2
UNREACHABLE_GRACE_S = 2.0  # a peer starting up is not worth a warning


class RaftTransport:
    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        voters: dict[int, tuple[str, int]],
        endpoint: tuple[str, int],
        request_timeout_ms: int = 2000,
    ) -> None:
        self.node_id = node_id
        self._closed = False  # stopping: requests still arriving are not served
        self.cluster_id = cluster_id
        self.voters = voters
        self.endpoint = endpoint
        self.request_timeout_s = request_timeout_ms / 1000
        self.listener_name = "CONTROLLER"  # the first of controller.listener.names
        # the controller listener's TLS and SASL are set on it by the node
        self.client = NetworkClient(
            f"raft-{node_id}",
            connect_timeout_s=self.request_timeout_s,
            backoff=Backoff(_RECONNECT_BACKOFF_S, _RECONNECT_BACKOFF_S, jitter=0),
        )
        self.client.on_unreachable = self._unreachable_at
        self.client.on_reachable = self._reachable_at
        self._inbound_ids = itertools.count(1)  # names inbound requests for the core
        self.step: Callable[[m.Message], None] | None = None
        self.state: Callable[[], tuple[int, int]] = lambda: (-1, 0)  # (leader id, epoch)
        self.describe: Callable[[], dict[str, Any] | None] = lambda: None
        # a dynamic quorum's voters and where they listen (KIP-853): from the log
        self.voter_set: Callable[[], VoterSet] = VoterSet
        self._voters_seen: VoterSet | None = None
        self._inbound: dict[tuple[int, type], list[tuple[m.Message, asyncio.Future[Any]]]] = {}
        self._down: dict[int, float] = {}  # peer -> since when it has been unreachable
        self._warned: set[int] = set()  # peers a warning named
        self._last_warning = -1e9
        self._foreign_warnings: dict[tuple[int, str], float] = {}

    # -- the core's outbound messages ---------------------------------------------------

    def _refresh_addresses(self) -> None:
        """Learn where the voters of the log's voter set listen (the controller
        listener's endpoint of each): a dynamic quorum's addresses come from there."""
        vs = self.voter_set()
        if vs is self._voters_seen:
            return
        self._voters_seen = vs
        for v in vs:
            for e in v.endpoints:
                if e.name == self.listener_name and v.id != self.node_id:
                    self.voters[v.id] = (e.host, e.port)

    def learn(self, node_id: int, host: str, port: int) -> None:
        """Where a node (the leader) listens, as a peer's answer named it."""
        if node_id >= 0 and node_id != self.node_id and host:
            self.voters[node_id] = (host, port)

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        if node_id == self.node_id:
            return self.endpoint
        self._refresh_addresses()
        return self.voters.get(node_id)

    def send(self, msg: m.Message) -> None:
        if isinstance(msg, _RESPONSES):
            self._answer(msg)
            return
        self._refresh_addresses()
        addr = self.voters.get(msg.dst)
        if addr is None:
            return  # not a voter: an observer is only ever answered, never called
        lane = "fetch" if isinstance(msg, m.FetchRequest | m.FetchSnapshotRequest) else "control"
        key, obj = request_of(msg, self.cluster_id, self.endpoint)
        fut = self.client.send(addr, key, RAFT_APIS[key], obj, lane=lane)
        fut.add_done_callback(lambda f: self._response(msg, key, f))

    def _response(self, request: m.Message, key: int, fut: asyncio.Future[Any]) -> None:
        """A peer's answer stepped into the core; no answer (peer down, connection lost)
        is nothing to step: the core retries after its own timeout."""
        if fut.cancelled() or fut.exception() is not None:
            return
        resp = fut.result()
        if getattr(resp, "error_code", None) == ErrorCode.inconsistent_cluster_id:
            self.foreign(
                request.dst,
                "refused-us",
                f"node {request.dst} refused our {type(request).__name__} as coming from "
                f"another cluster: this node is formatted for cluster {self.cluster_id}",
            )
            return
        for ne in getattr(resp, "node_endpoints", None) or ():
            self.learn(int(ne.node_id), ne.host, int(ne.port))
        try:
            msg = response_to_message(key, resp, request)
        except Exception:
            log.exception("[node %d] Bad Raft response from node %d", self.node_id, request.dst)
            return
        if msg is not None and self.step is not None:
            self.step(msg)

    def _answer(self, msg: m.Message) -> None:
        waiting = self._inbound.get((msg.dst, type(msg)))
        if not waiting:
            return
        for i, (req, fut) in enumerate(waiting):
            if getattr(req, "request_id", None) != getattr(msg, "request_id", None):
                continue
            del waiting[i]
            if not fut.done():
                fut.set_result(msg)
            return

    # -- inbound requests (controller listener) -----------------------------------------

    async def handle(self, header: RequestHeader, req: Any) -> Any:
        if self._closed:  # the node is stopping: its metadata log may be closed already
            raise NodeStopping
        key = header.api_key
        if key == 55:
            return self.describe_quorum_response(header)
        if key == 1 and (
            not req.topics
            or getattr(req.topics[0], "topic", None) not in (None, "__cluster_metadata")
            or getattr(req.topics[0], "topic_id", None) not in (None, METADATA_TOPIC_ID)
        ):
            leader, epoch = self.state()
            return response_of(1, header.api_version, None, leader, epoch)
        if key == 53:  # BeginQuorumEpoch: where the new leader listens
            p0 = req.topics[0].partitions[0] if req.topics and req.topics[0].partitions else None
            for le in req.leader_endpoints:
                if p0 is not None and le.name == self.listener_name:
                    self.learn(int(p0.leader_id), le.host, int(le.port))
        msg = request_to_message(key, req, self.node_id, next(self._inbound_ids))
        theirs = getattr(req, "cluster_id", None)
        if theirs is not None and theirs != self.cluster_id:  # (null: an old client)
            self.foreign(
                msg.src,
                "refused-them",
                f"refused {type(msg).__name__} from node {msg.src} of cluster {theirs}: "
                f"this node belongs to cluster {self.cluster_id}",
            )
            leader, epoch = self.state()
            refusal = response_of(key, header.api_version, None, leader, epoch)
            return dataclasses.replace(refusal, error_code=ErrorCode.inconsistent_cluster_id)
        expected = _EXPECTED.get(key)
        fut: asyncio.Future[Any] | None = None
        if expected is not None:
            fut = asyncio.get_running_loop().create_future()
            self._inbound.setdefault((msg.src, expected), []).append((msg, fut))
        assert self.step is not None
        self.step(msg)
        answer = None
        if fut is not None:
            timeout = self.request_timeout_s
            if isinstance(msg, m.FetchRequest):
                timeout = msg.max_wait_ms / 1000 + self.request_timeout_s
            try:
                answer = await asyncio.wait_for(asyncio.shield(fut), timeout)
            except TimeoutError:
                waiting = self._inbound.get((msg.src, expected or object), [])
                with contextlib.suppress(ValueError):
                    waiting.remove((msg, fut))
        leader, epoch = self.state()
        return response_of(key, header.api_version, answer, leader, epoch, self.address_of(leader))

    def describe_quorum_response(self, header: RequestHeader) -> Any:
        info = self.describe()
        leader, epoch = self.state()
        part: dict[str, Any] = {
            "partition_index": 0,
            "error_message": None,
            "leader_id": leader,
            "leader_epoch": epoch,
            "high_watermark": -1,
            "current_voters": [],
            "observers": [],
        }
        if info is None:
            part["error_code"] = ErrorCode.not_leader_or_follower
        else:
            part["error_code"] = ErrorCode.none
            part.update(info)
            for key in ("current_voters", "observers"):  # v2: directory ids (KIP-853)
                part[key] = [
                    {**r, "replica_directory_id": wire_directory_id(r.get("replica_directory_id"))}
                    for r in part[key]
                ]
        return build(
            response_class(ApiKey.DESCRIBE_QUORUM, header.api_version),
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                # v2: where the voters listen (KIP-853)
                "nodes": self._nodes(),
                "topics": [{"topic_name": "__cluster_metadata", "partitions": [part]}],
            },
        )

    def _nodes(self) -> list[dict[str, Any]]:
        """DescribeQuorum v2's nodes: where each voter (and this node) listens."""
        self._refresh_addresses()
        book = {v: a for v, a in self.voters.items() if v >= 0}
        if self.endpoint[1]:
            book[self.node_id] = self.endpoint
        listeners: dict[int, list[dict[str, Any]]] = {
            v: [{"name": self.listener_name, "host": h, "port": p}] for v, (h, p) in book.items()
        }
        for v in self.voter_set():  # a dynamic quorum's voters name their own endpoints
            if v.endpoints:
                listeners[v.id] = [
                    {"name": e.name, "host": e.host, "port": e.port} for e in v.endpoints
                ]
        return [{"node_id": v, "listeners": ls} for v, ls in sorted(listeners.items())]

    # -- reachability, for operators ----------------------------------------------------

    def unreachable(self, peer: int, addr: tuple[str, int], why: str) -> None:
        """Warn (every 10 s at most) about voters unreachable for a while: not about a
        peer that is starting at the same moment (a warning, then 'reached again')."""
        now = time.monotonic()
        self._down.setdefault(peer, now)
        down = sorted(p for p, since in self._down.items() if now - since >= UNREACHABLE_GRACE_S)
        if down and now - self._last_warning >= 10:
            self._last_warning = now
            self._warned.update(down)
            log.warning(
                "[node %d] Cannot reach voter(s) %s (last: node %d at %s:%d: %s)",
                self.node_id,
                ",".join(map(str, down)),
                peer,
                addr[0],
                addr[1],
                why,
            )

    def foreign(self, peer: int, direction: str, what: str) -> None:
        """A node of another cluster: say so once a minute per peer and direction (we
        refused it, or it refused us; both are worth a line)."""
        now = time.monotonic()
        if now - self._foreign_warnings.get((peer, direction), -1e9) >= 60:
            self._foreign_warnings[(peer, direction)] = now
            log.error("[node %d] INCONSISTENT_CLUSTER_ID: %s", self.node_id, what)

    def _peer_at(self, addr: tuple[str, int]) -> int | None:
        return next((p for p, a in self.voters.items() if tuple(a) == tuple(addr)), None)

    def _unreachable_at(self, addr: tuple[str, int], why: str) -> None:
        if (peer := self._peer_at(addr)) is not None:
            self.unreachable(peer, addr, why)

    def _reachable_at(self, addr: tuple[str, int]) -> None:
        if (peer := self._peer_at(addr)) is not None:
            self.reachable(peer)

    def reachable(self, peer: int) -> None:
        self._down.pop(peer, None)
        if peer in self._warned:
            self._warned.discard(peer)
            log.info("[node %d] Reached voter %d again", self.node_id, peer)

    def close(self) -> None:
        self._closed = True
        self.client.close()
        for waiting in self._inbound.values():
            for _, fut in waiting:
                if not fut.done():
                    fut.cancel()
