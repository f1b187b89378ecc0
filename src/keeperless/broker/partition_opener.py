"""New partitions opened in slices, so that a metadata update making thousands of them
does not hold the event loop. Opening one makes its directory and files (0.5-1 ms here):
a CreateTopics of 10,000 partitions held a node's loop for seconds, every connection,
replica fetch and Raft timer waiting. Kafka's metadata publisher runs on a thread of its
own while request handlers serve; here a publication opens new partitions until its
budget (``SLICE_S``) is spent, and a task opens the rest, a slice per turn of the loop.

A queued partition is opened as the image is when its turn comes: one deleted, moved
away or re-created meanwhile is opened as the image then says, or not at all. Until it
is opened, the broker answers for it as for a partition it does not host yet
(NOT_LEADER_OR_FOLLOWER, which clients and followers retry), as Kafka's does between its
metadata cache's update and its replica manager's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from uuid import UUID

__all__ = ["SLICE_S", "PartitionOpener"]

SLICE_S = 0.004  # the loop's time a publication or a slice spends opening partitions
# a publication opens at least these at once, however long they take: a topic of a few
# partitions is served as soon as its creation is published, on a busy machine too
AT_ONCE = 8

Key = tuple[str, int]


class PartitionOpener:
    """``open_one(key, topic_id)`` opens a partition as the image says now (False if it
    says not to); ``opened(keys)`` tells the broker's listeners about each slice."""

    def __init__(
        self, open_one: Callable[[Key, UUID], bool], opened: Callable[[list[Key]], None]
    ) -> None:
        self._open_one = open_one
        self._opened = opened
        self._queue: dict[Key, UUID] = {}  # in the order they came
        self._task: asyncio.Task[None] | None = None
        self._deadline = 0.0
        self._admitted = 0

    def begin(self) -> None:
        """A publication starts: its own budget for opening partitions."""
        self._deadline = time.perf_counter() + SLICE_S
        self._admitted = 0

    def admit(self, key: Key, topic_id: UUID) -> bool:
        """Whether the publication opens ``key`` now (the first ``AT_ONCE``, then while
        its budget lasts); if not, it is queued. Without a running loop (tools, tests)
        everything opens now."""
        if not self._queue and (self._admitted < AT_ONCE or time.perf_counter() < self._deadline):
            self._admitted += 1
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return True
        self._queue[key] = topic_id
        if self._task is None:
            self._task = loop.create_task(self._run())
        return False

    @property
    def queued(self) -> int:
        return len(self._queue)

    async def _run(self) -> None:
        try:
            while self._queue:
                await asyncio.sleep(0)  # (the loop's other work between slices)
                end = time.perf_counter() + SLICE_S
                opened: list[Key] = []
                while self._queue and (not opened or time.perf_counter() < end):
                    key = next(iter(self._queue))
                    if self._open_one(key, self._queue.pop(key)):
                        opened.append(key)
                if opened:
                    self._opened(opened)
        finally:
            self._task = None

    def close(self) -> None:
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None
