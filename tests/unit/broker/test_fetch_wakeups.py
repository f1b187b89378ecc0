"""Fetches waiting for data are woken by their own partitions (Kafka's fetch purgatory,
keyed by partition): an append to one partition of a broker with many wakes the fetches
reading it, not every fetch parked there, which then scanned all their partitions at
every append anywhere (issue 30: at 1,000 records/s into 100 partitions of replication
factor 3, every broker's CPU went to that)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from keeperless.broker.partition_manager import PartitionManager
from keeperless.storage.log import LogConfig


def _waiter(pm: PartitionManager, keys: list[tuple[str, int]]) -> asyncio.Task[float]:
    async def wait() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await pm.wait_for_data(5.0, keys)
        return loop.time() - t0

    return asyncio.get_running_loop().create_task(wait())


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_an_append_wakes_only_the_fetches_reading_its_partition(tmp_path: Path) -> None:
    async def main() -> None:
        pm = PartitionManager(1, tmp_path, LogConfig())
        a = _waiter(pm, [("t", 0), ("t", 1)])
        b = _waiter(pm, [("t", 2)])
        await _settle()
        pm.notify_append(("t", 1))
        await _settle()
        assert a.done()
        assert not b.done()
        pm.notify_append(("u", 2))  # another topic's partition 2
        await _settle()
        assert not b.done()
        pm.notify_append()  # no keys: everyone (a metadata change, a stop)
        await _settle()
        assert b.done()
        assert pm._waiting == {}  # nothing left behind

    asyncio.run(main())


def test_a_fetch_that_times_out_or_is_cancelled_leaves_nothing_behind(tmp_path: Path) -> None:
    async def main() -> None:
        pm = PartitionManager(1, tmp_path, LogConfig())
        await pm.wait_for_data(0.01, [("t", 0)])
        assert pm._waiting == {}
        c = _waiter(pm, [("t", 0), ("t", 1)])
        await _settle()
        assert set(pm._waiting) == {("t", 0), ("t", 1)}
        c.cancel()
        await _settle()
        assert pm._waiting == {}

    asyncio.run(main())


def test_a_leadership_or_isr_change_wakes_the_fetches_of_that_partition(tmp_path: Path) -> None:
    """A fetch parked on a partition answers when the metadata moves its leadership or
    its ISR (NOT_LEADER_OR_FOLLOWER at once, or a high watermark the shrink raised), not
    at the end of its wait; the same metadata again wakes nobody."""
    import uuid

    from keeperless.metadata.image import PartitionInfo

    async def main() -> None:
        pm = PartitionManager(1, tmp_path, LogConfig())
        tid = uuid.uuid4()
        pm.ensure("t", 0, tid, PartitionInfo((1, 2), (1, 2), 1, 0, 0), LogConfig(), 0)
        w = _waiter(pm, [("t", 0)])
        await _settle()
        pm.ensure("t", 0, tid, PartitionInfo((1, 2), (1, 2), 1, 0, 0), LogConfig(), 0)
        await _settle()
        assert not w.done()  # nothing changed
        pm.ensure("t", 0, tid, PartitionInfo((1, 2), (1,), 1, 0, 0), LogConfig(), 0)
        await _settle()
        assert w.done()  # the ISR shrank
        w = _waiter(pm, [("t", 0)])
        await _settle()
        pm.ensure("t", 0, tid, PartitionInfo((1, 2), (1,), 2, 1, 0), LogConfig(), 0)
        await _settle()
        assert w.done()  # another leader
        pm.close()

    asyncio.run(main())
