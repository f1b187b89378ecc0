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
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import (
    NodeStopping,
    RequestHeader,
    decode_response,
    encode_request,
    response_class,
)
from keeperless.raft import messages as m
from keeperless.runtime.raft_rpc import (
    RAFT_APIS,
    request_of,
    request_to_message,
    response_of,
    response_to_message,
)
from keeperless.security.listeners import ClientSecurity, connect

_NO_DIRECTORY = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: the directory is unknown

__all__ = ["RaftTransport"]

log = logging.getLogger(__name__)

_EXPECTED: dict[int, type] = {52: m.VoteResponse, 1: m.FetchResponse, 59: m.FetchSnapshotResponse}
_RESPONSES = tuple(_EXPECTED.values())
_RECONNECT_BACKOFF_S = 0.2
UNREACHABLE_GRACE_S = 2.0  # a peer starting up is not worth a warning


class _Lane:
    """One outbound connection to a peer's controller listener."""

    def __init__(self, transport: RaftTransport, peer: int, addr: tuple[str, int]) -> None:
        self.t = transport
        self.peer = peer
        self.addr = addr
        self.writer: asyncio.StreamWriter | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.queue: list[bytes] = []
        self.pending: dict[int, tuple[int, int, m.Message]] = {}
        self.retry_at = 0.0

    def send(self, msg: m.Message) -> None:
        key, obj = request_of(msg, self.t.cluster_id, self.t.endpoint)
        corr = next(self.t.correlation)
        version = RAFT_APIS[key]
        frame = encode_request(key, version, corr, f"raft-{self.t.node_id}", obj)
        self.pending[corr] = (key, version, msg)
        if self.writer is not None:
            self.writer.write(frame)
            return
        if time.monotonic() < self.retry_at:
            self.pending.pop(corr, None)  # peer down: the core retries after its timeout
            return
        self.queue.append(frame)
        if self.connecting is None:
            self.connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                connect(*self.addr, self.t.security, f"raft-{self.t.node_id}"),
                self.t.request_timeout_s,
            )
        except (OSError, TimeoutError) as e:
            self.retry_at = time.monotonic() + _RECONNECT_BACKOFF_S
            self.queue.clear()
            self.pending.clear()
            self.connecting = None
            self.t.unreachable(self.peer, self.addr, str(e) or type(e).__name__)
            return
        self.connecting = None
        self.writer = writer
        self.t.reachable(self.peer)
        for frame in self.queue:
            writer.write(frame)
        self.queue.clear()
        try:
            await self._read(reader)
        finally:
            self.writer = None
            self.pending.clear()
            writer.close()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                frame = memoryview(await reader.readexactly(size))
            except (asyncio.IncompleteReadError, OSError):
                return
            (corr,) = struct.unpack_from(">i", frame, 0)
            entry = self.pending.pop(corr, None)
            if entry is None:
                continue
            key, version, request = entry
            try:
                _, resp = decode_response(frame, key, version)
                if getattr(resp, "error_code", None) == ErrorCode.inconsistent_cluster_id:
                    self.t.foreign(
                        self.peer,
                        "refused-us",
                        f"node {self.peer} refused our {type(request).__name__} as coming "
                        f"from another cluster: this node is formatted for cluster "
                        f"{self.t.cluster_id}",
                    )
                    continue
                msg = response_to_message(key, resp, request)
            except Exception:
                log.exception("[node %d] Bad Raft response from node %d", self.t.node_id, self.peer)
                return
            if msg is not None and self.t.step is not None:
                self.t.step(msg)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.connecting is not None:
            self.connecting.cancel()


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
        self.security: ClientSecurity | None = None  # that listener's TLS and SASL
        self.correlation = itertools.count(1)
        self._inbound_ids = itertools.count(1)  # names inbound requests for the core
        self.step: Callable[[m.Message], None] | None = None
        self.state: Callable[[], tuple[int, int]] = lambda: (-1, 0)  # (leader id, epoch)
        self.describe: Callable[[], dict[str, Any] | None] = lambda: None
        self._lanes: dict[tuple[int, str], _Lane] = {}
        self._inbound: dict[tuple[int, type], list[tuple[m.Message, asyncio.Future[Any]]]] = {}
        self._down: dict[int, float] = {}  # peer -> since when it has been unreachable
        self._warned: set[int] = set()  # peers a warning named
        self._last_warning = -1e9
        self._foreign_warnings: dict[tuple[int, str], float] = {}

    # -- the core's outbound messages ---------------------------------------------------

    def send(self, msg: m.Message) -> None:
        if isinstance(msg, _RESPONSES):
            self._answer(msg)
            return
        addr = self.voters.get(msg.dst)
        if addr is None:
            return  # not a voter: an observer is only ever answered, never called
        lane_name = (
            "fetch" if isinstance(msg, m.FetchRequest | m.FetchSnapshotRequest) else "control"
        )
        lane = self._lanes.get((msg.dst, lane_name))
        if lane is None:
            lane = self._lanes[(msg.dst, lane_name)] = _Lane(self, msg.dst, addr)
        lane.send(msg)

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
        if key == 1 and (not req.topics or req.topics[0].topic != "__cluster_metadata"):
            leader, epoch = self.state()
            return response_of(1, header.api_version, None, leader, epoch)
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
        return response_of(key, header.api_version, answer, leader, epoch)

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
            for key in ("current_voters", "observers"):  # v2: no directory ids (KIP-853)
                part[key] = [{**r, "replica_directory_id": _NO_DIRECTORY} for r in part[key]]
        return build(
            response_class(ApiKey.DESCRIBE_QUORUM, header.api_version),
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                # v2: where the voters listen (KIP-853)
                "nodes": [
                    {
                        "node_id": v,
                        "listeners": [{"name": self.listener_name, "host": h, "port": p}],
                    }
                    for v, (h, p) in sorted(self.voters.items())
                ],
                "topics": [{"topic_name": "__cluster_metadata", "partitions": [part]}],
            },
        )

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

    def reachable(self, peer: int) -> None:
        self._down.pop(peer, None)
        if peer in self._warned:
            self._warned.discard(peer)
            log.info("[node %d] Reached voter %d again", self.node_id, peer)

    def close(self) -> None:
        self._closed = True
        for lane in self._lanes.values():
            lane.close()
        for waiting in self._inbound.values():
            for _, fut in waiting:
                if not fut.done():
                    fut.cancel()
