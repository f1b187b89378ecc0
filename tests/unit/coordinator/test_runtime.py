"""The coordinator runtime: a shard is loaded from its partition's log, a write's records
are replayed as they are appended and answered only once committed, writes are
pipelined (each rule sees every write appended before it), reads and answers without
records wait for the writes before them, and a write that cannot be confirmed has the
shard read again from the log."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from keeperless.coordinator.outcome import Outcome, Record
from keeperless.coordinator.runtime import CoordinatorRuntime, LogRecord, TxnMarker


class Counter:
    """A shard: how many records were replayed per key."""

    def __init__(self) -> None:
        self.seen: dict[bytes, int] = {}
        self.offsets: list[int] = []
        self.markers: list[tuple[int, bool]] = []

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int,
        producer_id: int = -1,
        transactional: bool = False,
    ) -> None:
        self.seen[key] = self.seen.get(key, 0) + 1
        self.offsets.append(offset)

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        self.markers.append((producer_id, commit))

    def carry_over(self, previous: Counter) -> None:
        self.carried = previous

    def add(self, key: bytes) -> Outcome[int]:
        return Outcome([(key, b"1")], self.seen.get(key, 0) + 1)


class FakeLog:
    def __init__(self) -> None:
        self.logs: dict[int, list[Record]] = {0: [(b"a", b"1")]}
        self.leaders: dict[int, int] = {0: 3}
        self.commit: asyncio.Event | None = None
        self.fail_commit = False
        self.fail_append: ErrorCode | None = None
        self.producers: list[tuple[int, int] | None] = []
        self.waits = 0  # waits for the replicas

    def led(self, topic: str) -> dict[int, int]:
        return dict(self.leaders)

    def records(self, topic: str, index: int) -> Iterable[LogRecord | TxnMarker]:
        return [LogRecord(i, k, v) for i, (k, v) in enumerate(self.logs.get(index, []))]

    def append(
        self,
        topic: str,
        index: int,
        records: list[Record],
        leader_epoch: int,
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode | int:
        if self.leaders.get(index) != leader_epoch:
            return ErrorCode.not_coordinator
        if self.fail_append is not None:
            return self.fail_append
        log = self.logs.setdefault(index, [])
        log.extend(records)
        self.producers.append(producer)
        return len(log) - len(records)

    async def committed(
        self, topic: str, index: int, leader_epoch: int, timeout_s: float
    ) -> ErrorCode | None:
        self.waits += 1
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


def test_records_are_replayed_as_appended_and_answered_once_committed() -> None:
    """Writes are pipelined, as Kafka's runtime: the second rule runs while the first
    write waits for its replicas, and sees its record; neither is answered before the
    records are committed."""

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
        assert len(log.logs[0]) == 3  # both appended: the second did not wait
        assert shard.seen == {b"a": 3}  # and replayed at once, in log order
        assert shard.offsets == [0, 1, 2]  # each record replayed with its offset
        assert not first.done()
        assert not second.done()
        assert rt.stats.inflight == 2
        log.commit.set()
        assert await first == 2
        assert await second == 3  # its rule saw the first's record
        assert rt.stats.inflight == 0

    asyncio.run(go())


def test_reads_and_answers_without_records_wait_for_the_writes_before_them() -> None:
    """An answer must not rest on records the replicas may not have (an offset fetched,
    an EndTxn retried over a completion not yet committed): Kafka's runtime defers it
    to the last written offset. With nothing in flight, no wait."""

    async def go() -> None:
        log = FakeLog()
        rt = runtime(log)
        rt.on_leadership()
        assert await rt.read_committed(0, lambda s: dict(s.seen)) == {b"a": 1}
        assert await rt.write(0, lambda s: Outcome([], len(s.seen))) == 1
        assert log.waits == 0  # nothing in flight: answered at once
        log.commit = asyncio.Event()
        w = asyncio.create_task(rt.write(0, lambda s: s.add(b"b")))
        await asyncio.sleep(0.01)
        read = asyncio.create_task(rt.read_committed(0, lambda s: dict(s.seen)))
        empty = asyncio.create_task(rt.write(0, lambda s: Outcome([], s.seen.get(b"b"))))
        await asyncio.sleep(0.01)
        assert rt.read(0, lambda s: s.seen.get(b"b")) == 1  # a plain read sees it now
        assert not read.done()
        assert not empty.done()
        log.commit.set()
        assert await w == 1
        assert await read == {b"a": 1, b"b": 1}
        assert await empty == 1
        # a wait that fails answers its error
        log.commit = asyncio.Event()
        log.fail_commit = True
        w = asyncio.create_task(rt.write(0, lambda s: s.add(b"c")))
        await asyncio.sleep(0.01)
        read = asyncio.create_task(rt.read_committed(0, lambda s: dict(s.seen)))
        await asyncio.sleep(0.01)
        log.commit.set()
        assert await w == ErrorCode.coordinator_not_available
        assert await read == ErrorCode.coordinator_not_available
        rt.close()

    asyncio.run(go())


def test_an_append_refused_leaves_the_shard_as_it_was() -> None:
    async def go() -> None:
        log = FakeLog()
        rt = runtime(log)
        rt.on_leadership()
        shard = rt.shard(0)
        log.fail_append = ErrorCode.coordinator_not_available  # too few in-sync replicas
        assert await rt.write(0, lambda s: s.add(b"b")) == ErrorCode.coordinator_not_available
        assert rt.shard(0) is shard  # nothing appended: still served
        assert shard is not None
        assert shard.seen == {b"a": 1}
        assert rt.stats.failed_writes == 1
        log.fail_append = None
        assert await rt.write(0, lambda s: s.add(b"b")) == 1

    asyncio.run(go())


def test_a_transactional_write_is_appended_and_replayed_as_its_producers() -> None:
    """The group coordinator's offsets of a transaction (TxnOffsetCommit)."""
    seen: list[tuple[int, bool]] = []

    class Txn(Counter):
        def replay(
            self,
            key: bytes,
            value: bytes | None,
            offset: int,
            producer_id: int = -1,
            transactional: bool = False,
        ) -> None:
            seen.append((producer_id, transactional))

    async def go() -> None:
        log = FakeLog()
        rt = CoordinatorRuntime("test", "__t", log, Txn, 1.0, 1)
        rt.on_leadership()
        seen.clear()
        await rt.write(0, lambda s: Outcome([(b"o", b"1")], None, producer=(7, 2)))
        await rt.write(0, lambda s: Outcome([(b"o", b"2")], None))
        assert log.producers == [(7, 2), None]
        assert seen == [(7, True), (-1, False)]

    asyncio.run(go())


def test_a_write_not_committed_reads_the_shard_again_once_the_log_is_committed() -> None:
    """The shard is dropped; its log's tail (the write's record, maybe truncated later)
    is read only once committed - a transaction's markers must never follow a
    PrepareCommit no other replica has. Until then: COORDINATOR_LOAD_IN_PROGRESS."""

    async def go() -> None:
        log = FakeLog()
        rt = runtime(log)
        rt.on_leadership()
        before = rt.shard(0)
        log.fail_commit = True
        assert await rt.write(0, lambda s: s.add(b"b")) == ErrorCode.coordinator_not_available
        assert rt.shard(0) is None
        rt.on_leadership()  # the same leadership: not read while the tail is uncertain
        assert rt.shard(0) is None
        assert await rt.write(0, lambda s: s.add(b"c")) == ErrorCode.coordinator_load_in_progress
        log.fail_commit = False  # the replicas caught up
        for _ in range(100):
            if rt.shard(0) is not None:
                break
            await asyncio.sleep(0.01)
        after = rt.shard(0)
        assert after is not None
        assert after is not before
        assert after.seen == {b"a": 1, b"b": 1}  # what the log holds
        rt.close()

    asyncio.run(go())


def test_a_new_leadership_loads_a_shard_whose_write_was_not_committed() -> None:
    async def go() -> None:
        log = FakeLog()
        loaded: list[int] = []
        rt = CoordinatorRuntime("test", "__t", log, Counter, 1.0, 1,
                                on_load=lambda i, _s: loaded.append(i))  # fmt: skip
        rt.on_leadership()
        log.fail_commit = True
        await rt.write(0, lambda s: s.add(b"b"))
        assert rt.shard(0) is None
        log.logs[0].pop()  # the new leader's log does not have it
        log.leaders = {0: 4}
        rt.on_leadership()
        shard = rt.shard(0)
        assert shard is not None
        assert shard.seen == {b"a": 1}
        assert loaded == [0, 0]  # the load hook ran for each load
        rt.close()

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
        assert rt.stats.inflight == 2  # both wait for the replicas
        log.commit.set()
        await first
        await second
        assert (rt.stats.writes, rt.stats.inflight, rt.stats.failed_writes) == (2, 0, 0)
        assert rt.stats.write_ms_max >= 5  # the first waited for the commit
        log.fail_commit = True
        await rt.write(0, lambda s: s.add(b"b"))
        assert (rt.stats.writes, rt.stats.failed_writes, rt.stats.loads) == (3, 1, 1)
        rt.close()

    asyncio.run(go())


def test_a_load_replays_transactional_records_and_markers_in_log_order() -> None:
    """Kafka's coordinators see the producer of each record and the transactions'
    markers (the group coordinator's offsets of a transaction wait for theirs)."""

    class WithTxns(FakeLog):
        def records(self, topic: str, index: int) -> Iterable[LogRecord | TxnMarker]:
            return [
                LogRecord(0, b"a", b"1"),
                LogRecord(1, b"t", b"2", producer_id=7, transactional=True),
                TxnMarker(2, 7, commit=False),
                LogRecord(3, b"b", b"3"),
            ]

    seen: list[tuple[str, object]] = []

    class Recording(Counter):
        def replay(
            self,
            key: bytes,
            value: bytes | None,
            offset: int,
            producer_id: int = -1,
            transactional: bool = False,
        ) -> None:
            seen.append(("record", (offset, producer_id, transactional)))

        def replay_marker(self, producer_id: int, commit: bool) -> None:
            seen.append(("marker", (producer_id, commit)))

    unloaded: list[int] = []
    rt = CoordinatorRuntime("test", "__t", WithTxns(), Recording, 1.0, 1, on_unload=unloaded.append)
    rt.on_leadership()
    assert seen == [
        ("record", (0, -1, False)),
        ("record", (1, 7, True)),
        ("marker", (7, False)),
        ("record", (3, -1, False)),
    ]
    assert unloaded == []
    rt.partitions.leaders = {}  # type: ignore[attr-defined]
    rt.on_leadership()
    assert unloaded == [0]
    rt.on_leadership()
    assert unloaded == [0]  # once


def test_a_load_that_raises_fails_once_per_leader_epoch() -> None:
    """Kafka's runtime marks such a shard FAILED: nothing is served, the error is
    logged once, and the load is tried again only when the leadership changes (it used
    to raise out of every metadata update, holding up the listeners after it)."""
    tries: list[int] = []

    class Broken(Counter):
        def replay(
            self,
            key: bytes,
            value: bytes | None,
            offset: int,
            producer_id: int = -1,
            transactional: bool = False,
        ) -> None:
            tries.append(offset)
            raise RuntimeError("unreadable")

    log = FakeLog()
    rt = CoordinatorRuntime("test", "__t", log, Broken, 1.0, 1)
    rt.on_leadership()
    rt.on_leadership()
    assert tries == [0]
    assert rt.shard(0) is None
    assert rt.read(0, lambda s: 1) == ErrorCode.not_coordinator
    log.leaders = {0: 4}  # a new leader epoch: tried again
    rt.on_leadership()
    assert tries == [0, 0]
