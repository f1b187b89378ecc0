"""Topics created on a client's behalf, in the background (Kafka's AutoTopicCreationManager).

A Metadata request naming a missing topic (with auto-creation on) or a FindCoordinator
before `__consumer_offsets` exists is answered at once (LEADER_NOT_AVAILABLE,
COORDINATOR_NOT_AVAILABLE) while the creation goes to the controller; the client asks
again. Nothing waits on the controller, so a refused creation (a replication factor
larger than the cluster) never holds a connection's requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from keeperless.broker.controller_channel import ControllerUnavailableError
from keeperless.broker.controller_rpcs import ControllerRpcs
from keeperless.metadata.admin import NewTopic

__all__ = ["AutoTopicCreator"]

log = logging.getLogger(__name__)
WARN_INTERVAL_S = 60.0
HINTS = {
    "__consumer_offsets": " (check offsets.topic.replication.factor)",
    "__transaction_state": " (check transaction.state.log.replication.factor)",
    "__share_group_state": " (check share.coordinator.state.topic.replication.factor)",
}


class AutoTopicCreator:
    def __init__(self, node_id: int, controller: ControllerRpcs) -> None:
        self.node_id = node_id
        self.controller = controller
        self.in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned: dict[str, float] = {}

    def create(self, topics: Sequence[NewTopic]) -> None:
        """Ask the controller for these topics unless a request for them is in flight."""
        new = [t for t in topics if t.name not in self.in_flight]
        if not new:
            return
        self.in_flight.update(t.name for t in new)
        task = asyncio.get_running_loop().create_task(self._create(new))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create(self, topics: list[NewTopic]) -> None:
        try:
            results = await self.controller.create_topics(topics, False)
        except ControllerUnavailableError as e:
            self._warn("controller", "Cannot create %s: %s", [t.name for t in topics], e)
            return
        finally:
            self.in_flight.difference_update(t.name for t in topics)
        for r in results:
            if r.error.code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                hint = HINTS.get(r.name, "")
                self._warn(r.name, "Cannot create topic %s: %s%s", r.name, r.error.message, hint)

    def _warn(self, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._warned.get(key, -1e9) >= WARN_INTERVAL_S:
            self._warned[key] = now
            log.warning("[node %d] " + msg, self.node_id, *args)

    def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
