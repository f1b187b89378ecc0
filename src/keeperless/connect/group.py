"""A worker's membership in its Connect group (Kafka's ``WorkerGroupMember`` and
``WorkerCoordinator``): find the coordinator, join with protocol type "connect", the
leader assigns connectors and tasks, everyone heartbeats; a rebalance (a worker joined,
left, was killed, or the connectors changed) revokes everything and assigns again (the
eager protocol). Requests go through the one network client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from keeperless.connect.protocol import (
    PROTOCOL_NAME,
    PROTOCOL_TYPE,
    Assignment,
    WorkerState,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
)
from keeperless.net.client import Destination, NetworkClient
from keeperless.protocol.apis import ApiKey

__all__ = ["Membership", "WorkerGroup"]

log = logging.getLogger(__name__)

_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_COORDINATOR_LOADING = 14
_ILLEGAL_GENERATION = 22
_UNKNOWN_MEMBER_ID = 25
_REBALANCE_IN_PROGRESS = 27
_MEMBER_ID_REQUIRED = 79
_RETRY_S = 0.5
# the versions the worker speaks (JoinGroup v4+ asks a new member to rejoin with its id)
_FIND_VERSION = 4
_JOIN_VERSION = 7
_SYNC_VERSION = 5
_HEARTBEAT_VERSION = 4
_LEAVE_VERSION = 4


@dataclass(frozen=True, slots=True)
class Membership:
    generation: int
    member_id: str
    leader: bool
    assignment: Assignment


class _Rejoin(Exception):
    pass


class _Rediscover(Exception):
    pass


class WorkerGroup:
    def __init__(
        self,
        client: NetworkClient,
        bootstrap: list[Destination],
        group_id: str,
        *,
        session_ms: int,
        rebalance_ms: int,
        heartbeat_ms: int,
    ) -> None:
        self.client = client
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.heartbeat_ms = heartbeat_ms
        self.member_id = ""
        self.generation = -1
        self.coordinator: Destination | None = None
        self._rejoin = asyncio.Event()
        self._last_trouble = ""
        self._trouble_logged = 0.0

    def request_rejoin(self) -> None:
        self._rejoin.set()

    async def run(
        self,
        state: Callable[[], WorkerState],
        revoke: Callable[[], Awaitable[None]],
        assigned: Callable[[Membership], Awaitable[None]],
        leader_assign: Callable[[str, dict[str, WorkerState]], dict[str, Assignment]],
    ) -> None:
        """Be a member until cancelled: each round revokes, joins, syncs, then heartbeats
        until the group rebalances."""
        while True:
            try:
                if self.coordinator is None:
                    self.coordinator = await self._find()
                await revoke()
                self._rejoin.clear()
                membership = await self._join(state, leader_assign)
                await assigned(membership)
                self.settled()
                await self._heartbeat()
            except _Rejoin:
                pass
            except Exception as e:
                # a coordinator gone or moved, a broker restarting, the config topic not
                # readable in time: the worker keeps trying, whatever failed (an exception
                # escaping here once left a worker out of its group until restarted)
                self._trouble(e)
                self.coordinator = None
                await asyncio.sleep(_RETRY_S)

    def _trouble(self, e: BaseException) -> None:
        """One line when the trouble starts or changes, then one every 30 s."""
        text = str(e) or type(e).__name__
        now = time.monotonic()
        if text != self._last_trouble or now - self._trouble_logged > 30:
            log.warning("Connect group %s: %s; retrying", self.group_id, text)
            self._last_trouble = text
            self._trouble_logged = now

    def settled(self) -> None:
        if self._last_trouble:
            log.info("Connect group %s: back in the group", self.group_id)
            self._last_trouble = ""

    async def leave(self) -> None:
        if self.coordinator is None or not self.member_id:
            return
        with contextlib.suppress(OSError, TimeoutError):
            await self.client.request(
                self.coordinator,
                ApiKey.LEAVE_GROUP,
                _LEAVE_VERSION,
                {"group_id": self.group_id, "members": [{"member_id": self.member_id}]},
                timeout_s=5,
            )

    async def _find(self) -> Destination:
        last = "no bootstrap server answered"
        for dest in self.bootstrap:
            try:
                resp = await self.client.request(
                    dest,
                    ApiKey.FIND_COORDINATOR,
                    _FIND_VERSION,
                    {"key_type": 0, "coordinator_keys": [self.group_id]},
                    timeout_s=10,
                )
            except (OSError, TimeoutError) as e:
                last = str(e)
                continue
            c = resp.coordinators[0]
            if c.error_code == 0:
                return (c.host, c.port)
            last = f"FindCoordinator answered error {c.error_code}"
        raise _Rediscover(last)

    async def _join(
        self,
        state: Callable[[], WorkerState],
        leader_assign: Callable[[str, dict[str, WorkerState]], dict[str, Assignment]],
    ) -> Membership:
        assert self.coordinator is not None
        while True:
            resp = await self.client.request(
                self.coordinator,
                ApiKey.JOIN_GROUP,
                _JOIN_VERSION,
                {
                    "group_id": self.group_id,
                    "session_timeout": self.session_ms,
                    "rebalance_timeout": self.rebalance_ms,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                    "protocol_type": PROTOCOL_TYPE,
                    "protocols": [{"name": PROTOCOL_NAME, "metadata": encode_metadata(state())}],
                },
                timeout_s=self.rebalance_ms / 1000 + 5,
                lane="join",
            )
            if resp.error_code == _MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            self._check(resp.error_code, "JoinGroup")
            break
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        leader = resp.leader == resp.member_id
        assignments = []
        if leader:
            members = {m.member_id: decode_metadata(m.metadata) for m in resp.members}
            plan = leader_assign(self.member_id, members)
            assignments = [
                {"member_id": m, "assignment": encode_assignment(a)} for m, a in plan.items()
            ]
        sync = await self.client.request(
            self.coordinator,
            ApiKey.SYNC_GROUP,
            _SYNC_VERSION,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": None,
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": PROTOCOL_NAME,
                "assignments": assignments,
            },
            timeout_s=self.rebalance_ms / 1000 + 5,
            lane="join",
        )
        self._check(sync.error_code, "SyncGroup")
        got = decode_assignment(bytes(sync.assignment))
        return Membership(self.generation, self.member_id, leader, got)

    async def _heartbeat(self) -> None:
        assert self.coordinator is not None
        while True:
            try:
                await asyncio.wait_for(self._rejoin.wait(), self.heartbeat_ms / 1000)
                raise _Rejoin()
            except TimeoutError:
                pass
            resp = await self.client.request(
                self.coordinator,
                ApiKey.HEARTBEAT,
                _HEARTBEAT_VERSION,
                {
                    "group_id": self.group_id,
                    "generation_id": self.generation,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                },
                timeout_s=self.session_ms / 1000,
            )
            self._check(resp.error_code, "Heartbeat")

    def _check(self, code: int, what: str) -> None:
        if code == 0:
            return
        if code in (_UNKNOWN_MEMBER_ID, _ILLEGAL_GENERATION):
            self.member_id = "" if code == _UNKNOWN_MEMBER_ID else self.member_id
            raise _Rejoin()
        if code == _REBALANCE_IN_PROGRESS:
            raise _Rejoin()
        if code in (_NOT_COORDINATOR, _COORDINATOR_NOT_AVAILABLE, _COORDINATOR_LOADING):
            raise _Rediscover(f"{what} answered error {code}")
        raise _Rediscover(f"{what} answered error {code}")
