"""The coordinator runtime: a shard is loaded from its partition's log, a write's records
are replayed only once committed, a write that cannot be confirmed has the shard read
again from the log, and the writes of one shard run one at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from keeperless.coordinator.outcome import Outcome, Record
from keeperless.coordinator.runtime import CoordinatorRuntime


class Counter:
    """A shard: how many records were replayed per key."""

    def __init__(self) -> None:
        self.seen: dict[bytes, int] = {}
        self.offsets: list[int] = []

    def replay(self, key: bytes, value: bytes | None, offset: int) -> None:
        self.seen[key] = self.seen.get(key, 0) + 1
        self.offsets.append(offset)

    def add(self, key: bytes) -> Outcome[int]:
        return Outcome([(key, b"1")], self.seen.get(key, 0) + 1)


class FakeLog:
    def __init__(self) -> None:
        self.logs: dict[int, list[Record]] = {0: [(b"a", b"1")]}
        self.leaders: dict[int, int] = {0: 3}
        self.commit: asyncio.Event | None = None
        self.fail_commit = False
        self.committed_at_replay: list[int] = []

    def led(self, topic: str) -> dict[int, int]:
        return dict(self.leaders)

    def records(self, topic: str, index: int) -> Iterable[tuple[int, bytes, bytes | None]]:
        return [(i, k, v) for i, (k, v) in enumerate(self.logs.get(index, []))]

    def append(
        self, topic: str, index: int, records: list[Record], leader_epoch: int
    ) -> ErrorCode | int:
        if self.leaders.get(index) != leader_epoch:
            return ErrorCode.not_coordinator
        log = self.logs.setdefault(index, [])
        log.extend(records)
        return len(log) - len(records)

    async def committed(
        self, topic: str, index: int, leader_epoch: int, timeout_s: float
    ) -> ErrorCode | None:
        if self.commit is not None:
            await self.commit.wait()
        return ErrorCode.coordinator_not_available if self.fail_commit else None


def runtime(log: FakeLog) -> CoordinatorRuntime[Counter]:
    return CoordinatorRuntime("test", "__t", log, Counter, 1.0, 1)


def test_load_replays_the_log_and_leadership_moves_unload() -> None:
    log = FakeLog()
    rt = runtime(log)
    assert rt.shard(0) is None
    rt.on_leadership()
    shard = rt.shard(0)
    assert shard is not None
    assert shard.seen == {b"a": 1}
    log.leaders = {0: 4}  # a new epoch: read again
    rt.on_leadership()
    assert rt.shard(0) is not shard
    log.leaders = {}
    rt.on_leadership()
    assert rt.shard(0) is None
    assert asyncio.run(rt.write(0, lambda s: s.add(b"a"))) == ErrorCode.not_coordinator


def test_records_are_replayed_once_committed_and_writes_run_one_at_a_time() -> None:
    async def go() -> None:
        log = FakeLog()
        log.commit = asyncio.Event()
        rt = runtime(log)
        rt.on_leadership()
        first = asyncio.create_task(rt.write(0, lambda s: s.add(b"a")))
        second = asyncio.create_task(rt.write(0, lambda s: s.add(b"a")))
        await asyncio.sleep(0.01)
        shard = rt.shard(0)
        assert shard is not None
        assert shard.seen == {b"a": 1}  # appended, not committed: not replayed
        assert len(log.logs[0]) == 2  # the second waits for the first
        log.commit.set()
        assert await first == 2
        assert await second == 3  # it saw the first's record
        assert shard.seen == {b"a": 3}
        assert shard.offsets == [0, 1, 2]  # each record replayed with its offset

    asyncio.run(go())


def test_a_write_not_committed_reads_the_shard_again_from_the_log() -> None:
    async def go() -> None:
        log = FakeLog()
        rt = runtime(log)
        rt.on_leadership()
        before = rt.shard(0)
        log.fail_commit = True
        assert await rt.write(0, lambda s: s.add(b"b")) == ErrorCode.coordinator_not_available
        after = rt.shard(0)
        assert after is not None
        assert after is not before
        assert after.seen == {b"a": 1, b"b": 1}  # what the log holds

    asyncio.run(go())


def test_the_runtime_counts_loads_writes_waits_and_failures() -> None:
    async def go() -> None:
        log = FakeLog()
        log.commit = asyncio.Event()
        rt = runtime(log)
        rt.on_leadership()
        assert (rt.stats.loads, rt.stats.writes) == (1, 0)
        first = asyncio.create_task(rt.write(0, lambda s: s.add(b"a")))
        second = asyncio.create_task(rt.write(0, lambda s: s.add(b"a")))
        await asyncio.sleep(0.01)
        assert rt.stats.queued == 1  # the second waits for its shard
        log.commit.set()
        await first
        await second
        assert (rt.stats.writes, rt.stats.queued, rt.stats.failed_writes) == (2, 0, 0)
        assert rt.stats.write_ms_max >= 5  # the first waited for the commit
        log.fail_commit = True
        await rt.write(0, lambda s: s.add(b"b"))
        assert (rt.stats.writes, rt.stats.failed_writes, rt.stats.loads) == (3, 1, 2)

    asyncio.run(go())
