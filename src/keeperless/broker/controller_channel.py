"""How a request reaches the active controller over the network: sent to the listener
of whichever voter leads the quorum, retried across leader changes until a deadline.
Nothing here knows what a request means (the broker's own RPCs are built and read in
controller_rpcs.py, clients' admin requests forwarded as they are by forwarder.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from keeperless.net.client import NetworkClient

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
        # the controller listener's TLS and SASL are set on it by the node
        self.client = NetworkClient(f"broker-{node_id}")
        self.voters = voters
        self.leader = leader
        self.timeout_s = timeout_ms / 1000

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
                resp = await self.client.request(
                    self.voters[target], api_key, version, req,
                    timeout_s=max(deadline - time.monotonic(), 0.01),
                )  # fmt: skip
            except (OSError, TimeoutError) as e:
                last_error = f"node {target}: {e or type(e).__name__}"
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

    def close(self) -> None:
        self.client.close()
