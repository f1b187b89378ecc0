"""How a request reaches the active controller over the network: sent to the listener
of whichever voter leads the quorum, retried across leader changes until a deadline.
Nothing here knows what a request means (the broker's own RPCs are built and read in
controller_rpcs.py, clients' admin requests forwarded as they are by forwarder.py)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from keeperless.protocol.framing import decode_response, encode_request

__all__ = [
    "ControllerUnavailableError",
    "RemoteController",
    "not_controller",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class ControllerUnavailableError(RuntimeError):
    """No active controller answered within the deadline."""


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
    """Requests sent over the network to whichever voter leads the quorum."""

    def __init__(
        self,
        node_id: int,
        voters: dict[int, tuple[str, int]],
        leader: Callable[[], int],
        timeout_ms: int,
    ) -> None:
        self.node_id = node_id
        # how to reach a controller listener (its TLS and SASL): set by the node
        self.connect: Callable[[str, int], Awaitable[tuple[Any, Any]]] | None = None
        self.voters = voters
        self.leader = leader
        self.timeout_s = timeout_ms / 1000
        self._corr = itertools.count(1)
        self._conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

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
