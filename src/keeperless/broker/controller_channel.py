"""How a broker reaches the active controller: in process when this node's controller is
the active one, otherwise with Kafka's controller RPCs (CreateTopics, DeleteTopics,
CreatePartitions, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds) sent to the
active controller's listener, retried across leader changes until a deadline."""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar
from uuid import UUID

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from keeperless.metadata.admin import ApiError, CreateTopicResult, IsrChange, IsrResult, NewTopic
from keeperless.metadata.features import SUPPORTED_FEATURES
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.build import build
from keeperless.protocol.framing import decode_response, encode_request

__all__ = [
    "ControllerChannel",
    "ControllerUnavailableError",
    "RemoteController",
    "not_controller",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class ControllerUnavailableError(RuntimeError):
    """No active controller answered within the deadline."""


class ControllerChannel(Protocol):
    def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> Awaitable[list[CreateTopicResult]]: ...

    def register_broker(
        self,
        broker_id: int,
        incarnation_id: UUID,
        endpoints: Sequence[tuple[str, str, int]],
        rack: str | None,
    ) -> Awaitable[tuple[ApiError, int]]: ...

    def broker_heartbeat(
        self,
        broker_id: int,
        epoch: int,
        want_fence: bool,
        metadata_offset: int,
        want_shut_down: bool = False,
    ) -> Awaitable[tuple[ApiError, bool, bool]]:
        """(error, is fenced, should shut down)"""
        ...

    def allocate_producer_ids(
        self, broker_id: int, epoch: int
    ) -> Awaitable[tuple[ApiError, int, int]]: ...

    def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> Awaitable[tuple[ApiError, list[IsrResult]]]: ...


_VERSIONS = {
    19: 7,
    20: 6,
    30: 3,
    31: 3,
    37: 3,
    43: 2,
    44: 1,
    49: 1,
    51: 0,
    56: 3,
    57: 1,
    62: 3,
    63: 1,
    64: 0,
    67: 0,
}


def not_controller(resp: Any) -> bool:
    """NOT_CONTROLLER at the top or in any per-item result (CreateTopics, CreateAcls...)."""
    if getattr(resp, "error_code", ErrorCode.none) == ErrorCode.not_controller:
        return True
    for name in ("topics", "results", "responses", "entries", "filter_results"):
        for item in getattr(resp, name, None) or ():
            if getattr(item, "error_code", ErrorCode.none) == ErrorCode.not_controller:
                return True
            if type(resp).__name__ == "DescribeQuorumResponse":
                # a voter that does not lead the quorum cannot describe it
                for part in getattr(item, "partitions", ()):
                    if part.error_code == ErrorCode.not_leader_or_follower:
                        return True
    return False


class RemoteController:
    """ControllerChannel over the network to whichever voter leads the quorum."""

    def __init__(
        self,
        node_id: int,
        voters: dict[int, tuple[str, int]],
        leader: Callable[[], int],
        timeout_ms: int,
        cluster_id: str = "",
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id  # sent where the RPC carries it (registration)
        # how to reach a controller listener (its TLS and SASL): set by the node
        self.connect: Callable[[str, int], Awaitable[tuple[Any, Any]]] | None = None
        self.voters = voters
        self.leader = leader
        self.timeout_s = timeout_ms / 1000
        self._corr = itertools.count(1)
        self._conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def _rpc(self, api_key: int, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        version = _VERSIONS[api_key]
        req = build(load_request_schema(api_key, version), body)
        return await self.forward(api_key, version, req, timeout_s)

    async def forward(
        self, api_key: int, version: int, req: Any, timeout_s: float | None = None
    ) -> Any:
        """Send a request to the active controller; retried across leader changes."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        last_error = "no leader known"
        tried: set[int] = set()
        while time.monotonic() < deadline:
            target = self.leader()
            if target < 0 or target not in self.voters or target in tried:
                # No leader known yet (an election, or this observer has not heard):
                # ask the voters in turn; only the active controller answers.
                untried = [v for v in sorted(self.voters) if v not in tried]
                if not untried:
                    tried.clear()
                    await asyncio.sleep(0.05)
                    continue
                target = untried[0]
            tried.add(target)
            try:
                resp = await asyncio.wait_for(
                    self._call(target, api_key, version, req),
                    max(deadline - time.monotonic(), 0.01),
                )
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
                last_error = f"node {target}: {e or type(e).__name__}"
                self._drop(target)
                await asyncio.sleep(0.05)
                continue
            if not_controller(resp):
                last_error = f"node {target} is not the active controller"
                await asyncio.sleep(0.05)
                continue
            return resp
        raise ControllerUnavailableError(
            f"no active controller answered within {timeout_s or self.timeout_s:.1f} s "
            f"({last_error})"
        )

    async def _call(self, target: int, api_key: int, version: int, req: Any) -> Any:
        lock = self._locks.setdefault(target, asyncio.Lock())
        async with lock:  # one request at a time per connection keeps it simple
            conn = self._conns.get(target)
            if conn is None:
                if self.connect is not None:
                    conn = await self.connect(*self.voters[target])
                else:
                    conn = await asyncio.open_connection(*self.voters[target])
                self._conns[target] = conn
            reader, writer = conn
            corr = next(self._corr)
            writer.write(encode_request(api_key, version, corr, f"broker-{self.node_id}", req))
            await writer.drain()
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = memoryview(await reader.readexactly(size))
            got, resp = decode_response(frame, api_key, version)
            if got != corr:
                raise OSError(f"correlation id {got} != {corr}")
            return resp

    def _drop(self, target: int) -> None:
        conn = self._conns.pop(target, None)
        if conn is not None:
            conn[1].close()

    def close(self) -> None:
        for target in list(self._conns):
            self._drop(target)

    # -- ControllerChannel --------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[CreateTopicResult]:
        body = {
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "assignments": [
                        {"partition_index": p, "broker_ids": list(b)}
                        for p, b in t.assignments.items()
                    ],
                    "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
                }
                for t in topics
            ],
            "timeout": 30000,
            "validate_only": validate_only,
        }
        resp = await self._rpc(19, body)
        return [
            CreateTopicResult(
                r.name,
                ApiError(r.error_code, r.error_message),
                r.topic_id,
                r.num_partitions,
                r.replication_factor,
                {
                    c.name: c.value
                    for c in (r.configs or ())
                    if c.value is not None and c.config_source == 1
                },
            )
            for r in resp.topics
        ]

    async def register_broker(
        self,
        broker_id: int,
        incarnation_id: UUID,
        endpoints: Sequence[tuple[str, str, int]],
        rack: str | None,
    ) -> tuple[ApiError, int]:
        body = {
            "broker_id": broker_id,
            "cluster_id": self.cluster_id,
            "incarnation_id": incarnation_id,
            "listeners": [
                {"name": n, "host": h, "port": p, "security_protocol": 0} for n, h, p in endpoints
            ],
            "features": [
                {"name": name, "min_supported_version": lo, "max_supported_version": hi}
                for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items())
            ],
            "rack": rack,
            "log_dirs": [],
            "previous_broker_epoch": -1,
        }
        resp = await self._rpc(62, body)
        return ApiError(resp.error_code), resp.broker_epoch

    async def broker_heartbeat(
        self,
        broker_id: int,
        epoch: int,
        want_fence: bool,
        metadata_offset: int,
        want_shut_down: bool = False,
    ) -> tuple[ApiError, bool, bool]:
        body = {
            "broker_id": broker_id,
            "broker_epoch": epoch,
            "current_metadata_offset": metadata_offset,
            "want_fence": want_fence,
            "want_shut_down": want_shut_down,
            "offline_log_dirs": [],
        }
        resp = await self._rpc(63, body)
        return ApiError(resp.error_code), bool(resp.is_fenced), bool(resp.should_shut_down)

    async def allocate_producer_ids(self, broker_id: int, epoch: int) -> tuple[ApiError, int, int]:
        resp = await self._rpc(67, {"broker_id": broker_id, "broker_epoch": epoch})
        return ApiError(resp.error_code), resp.producer_id_start, resp.producer_id_len

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> tuple[ApiError, list[IsrResult]]:
        by_topic: dict[UUID, list[IsrChange]] = {}
        for ch in changes:
            by_topic.setdefault(ch.topic_id, []).append(ch)
        body = {
            "broker_id": broker_id,
            "broker_epoch": broker_epoch,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [
                        {
                            "partition_index": ch.partition,
                            "leader_epoch": ch.leader_epoch,
                            "new_isr_with_epochs": [
                                {"broker_id": x, "broker_epoch": -1} for x in ch.new_isr
                            ],
                            "leader_recovery_state": 0,
                            "partition_epoch": ch.partition_epoch,
                        }
                        for ch in chs
                    ],
                }
                for tid, chs in by_topic.items()
            ],
        }
        resp = await self._rpc(56, body)
        return ApiError(resp.error_code), [
            IsrResult(
                t.topic_id,
                p.partition_index,
                ApiError(p.error_code),
                PartitionInfo((), tuple(p.isr), p.leader_id, p.leader_epoch, p.partition_epoch),
            )
            for t in resp.topics
            for p in t.partitions
        ]
