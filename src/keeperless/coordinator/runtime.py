"""The coordinator runtime (Kafka's ``CoordinatorRuntime``): hosts the shards of one
internal topic on the broker that leads their partitions.

A shard's rules are pure (an operation returns the records to append and the answer);
this module is the one place of the package that waits: it loads a shard when this
broker becomes the leader of its partition (replaying the partition's log), drops it when
the leadership moves, and runs each write as Kafka's runtime does - apply the rule,
append its records under the leader epoch the shard was loaded in and replay them into
the shard at once, in log order, then wait until the in-sync replicas have them before
answering. The rule, the append and the replay are one step of the event loop, so each
rule sees every write appended before it; writes are pipelined (a second write does not
wait for the first one's replicas), and an answer is given only once the records of the
write and of every write before it are committed. Reads that must not see records the
replicas may not have yet (OffsetFetch, KIP-890's verification) wait for the writes
appended before them (``read_committed``), as Kafka reads at the last committed offset.

A write whose records cannot be confirmed (the leadership moved, the replicas did not
catch up in time) drops the shard. Its records may still be in the log, not committed:
the shard is read again only once the in-sync replicas have the log to its end in the
same leader epoch (until then the shard answers COORDINATOR_LOAD_IN_PROGRESS), or by the
next leader, from its own log. A shard never acts on records that may yet be truncated
(a transaction's markers written for a PrepareCommit that no other replica has).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from keeperless.coordinator.deferred import Deferred
from keeperless.coordinator.outcome import Outcome, Record

__all__ = [
    "CoordinatorRuntime",
    "LogRecord",
    "LoopTimer",
    "PartitionLog",
    "RuntimeStats",
    "Shard",
    "TxnMarker",
    "wait",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class LogRecord(NamedTuple):
    """A keyed record of a coordinator's partition, with the producer that wrote it
    (Kafka's coordinators write offsets of transactions in transactional batches)."""

    offset: int
    key: bytes
    value: bytes | None
    producer_id: int = -1
    transactional: bool = False


class TxnMarker(NamedTuple):
    """A transaction's marker in a coordinator's partition: the records the producer
    wrote in it apply (commit) or go."""

    offset: int
    producer_id: int
    commit: bool


class Shard(Protocol):
    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int,
        producer_id: int = -1,
        transactional: bool = False,
    ) -> None: ...

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """Kafka's replayEndTransactionMarker."""
        ...

    def carry_over(self, previous: Any) -> None:
        """Read again in the same leadership after a write not confirmed: take what the
        records do not hold from the shard read before (as Kafka's runtime, which keeps
        its in-memory state then)."""
        ...


S = TypeVar("S", bound=Shard)


async def wait(answer: Deferred[T]) -> T:
    """Wait on the event loop for a rule's deferred answer."""
    if answer.done():
        return answer.result()
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def complete(value: T) -> None:
        if not fut.done():  # (the waiting request may have been cancelled)
            fut.set_result(value)

    answer.add_done_callback(complete)
    return await fut


class LoopTimer:
    """The rules' ``Timer`` on the event loop (Kafka's runtime timer): one callback per
    key."""

    def __init__(self) -> None:
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, key: str, delay_s: float, fn: Callable[[], None]) -> None:
        self.cancel(key)

        def fire() -> None:
            self._handles.pop(key, None)
            fn()

        self._handles[key] = asyncio.get_running_loop().call_later(max(0.0, delay_s), fire)

    def cancel(self, key: str) -> None:
        h = self._handles.pop(key, None)
        if h is not None:
            h.cancel()

    def close(self) -> None:
        for h in self._handles.values():
            h.cancel()
        self._handles.clear()


class PartitionLog(Protocol):
    """What the runtime needs of the partitions of its topic on this broker."""

    def led(self, topic: str) -> dict[int, int]:
        """The partitions of ``topic`` this broker leads: index -> leader epoch."""
        ...

    def records(self, topic: str, index: int) -> Iterable[LogRecord | TxnMarker]:
        """Every keyed record of the partition's log and every transaction marker, in
        log order."""
        ...

    def append(
        self,
        topic: str,
        index: int,
        records: list[Record],
        leader_epoch: int,
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode | int:
        """Append as the leader in ``leader_epoch`` (in the transaction of ``producer``,
        its id and epoch, if given): the offset of the first record."""
        ...

    async def committed(
        self, topic: str, index: int, leader_epoch: int, timeout_s: float
    ) -> ErrorCode | None:
        """Wait until the in-sync replicas have the log up to its end, in that epoch."""
        ...


@dataclass
class RuntimeStats:
    """What Kafka's CoordinatorRuntimeMetrics report, kept as the runtime works (read by
    runtime/metrics.py at scrape time): loads and their time, writes and their time
    (from the rule to the answer, the wait for the replicas included), writes that could
    not be confirmed, and writes appended and waiting for the in-sync replicas (Kafka's
    deferred events)."""

    loads: int = 0
    load_ms_total: float = 0.0
    load_ms_max: float = 0.0
    writes: int = 0
    write_ms_total: float = 0.0
    write_ms_max: float = 0.0
    failed_writes: int = 0
    inflight: int = 0


@dataclass
class _Loaded(Generic[S]):
    shard: S
    epoch: int
    inflight: int = 0  # writes appended, their records not yet known committed


class CoordinatorRuntime(Generic[S]):
    def __init__(
        self,
        name: str,
        topic: str,
        partitions: PartitionLog,
        new_shard: Callable[[], S],
        write_timeout_s: float,
        node_id: int,
        on_load: Callable[[int, S], None] | None = None,
        on_unload: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.new_shard = new_shard
        self.write_timeout_s = write_timeout_s
        self.node_id = node_id
        self.on_load = on_load  # after each load: what the shard's log left to do
        self.on_unload = on_unload  # a partition no longer led here (in that epoch)
        self._shards: dict[int, _Loaded[S]] = {}
        # partitions whose shard waits for its log's tail to be committed: leader epoch
        self._recovering: dict[int, int] = {}
        # partitions whose load raised: the leader epoch it failed in
        self._failed: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = RuntimeStats()

    # -- leadership -----------------------------------------------------------------------

    def on_leadership(self) -> None:
        """Load the shards of partitions now led here; drop those led elsewhere or in
        another epoch (read again if this broker leads them once more)."""
        led = self.partitions.led(self.topic)
        dropped = [i for i, s in self._shards.items() if led.get(i) != s.epoch]
        for i in dropped:
            del self._shards[i]
        for i, epoch in list(self._recovering.items()):
            if led.get(i) != epoch:
                del self._recovering[i]  # led elsewhere or anew: read as any load
                dropped.append(i)
        if self.on_unload is not None:
            for i in dropped:
                self.on_unload(i)
        for i, epoch in list(self._failed.items()):
            if led.get(i) != epoch:
                del self._failed[i]  # led elsewhere or anew: read again
        loaded = []
        for i, epoch in led.items():
            if i not in self._shards and i not in self._recovering and i not in self._failed:
                try:
                    self._load(i, epoch)
                except Exception:
                    # Kafka's runtime marks the shard FAILED: one line, and no new try
                    # in this leader epoch (a load raising at every metadata update would
                    # hold up everything that follows the image)
                    self._failed[i] = epoch
                    log.exception("[node %d] %s: loading %s-%d failed; it is not served "
                                  "until its leadership changes", self.node_id, self.name,
                                  self.topic, i)  # fmt: skip
                    continue
                loaded.append(i)
        if dropped or loaded:
            log.info("[node %d] %s: loaded %s-%s, unloaded %s", self.node_id, self.name,
                     self.topic, sorted(loaded) or "-", sorted(dropped) or "-")  # fmt: skip

    def _load(self, index: int, epoch: int, previous: S | None = None) -> _Loaded[S]:
        t0 = time.monotonic()
        shard = self.new_shard()
        for entry in self.partitions.records(self.topic, index):
            if isinstance(entry, TxnMarker):
                shard.replay_marker(entry.producer_id, entry.commit)
            else:
                shard.replay(
                    entry.key, entry.value, entry.offset, entry.producer_id, entry.transactional
                )
        if previous is not None:
            shard.carry_over(previous)
        loaded = self._shards[index] = _Loaded(shard, epoch)
        ms = (time.monotonic() - t0) * 1000
        st = self.stats
        st.loads += 1
        st.load_ms_total += ms
        st.load_ms_max = max(st.load_ms_max, ms)
        if self.on_load is not None:
            self.on_load(index, shard)
        return loaded

    def epoch(self, index: int) -> int | None:
        """The leader epoch the shard of a partition led here was loaded in."""
        s = self._shards.get(index)
        return None if s is None else s.epoch

    def leads(self, index: int, epoch: int) -> bool:
        """Whether this broker leads the partition in ``epoch`` (its shard loaded, or
        waiting to be read again)."""
        return self.partitions.led(self.topic).get(index) == epoch

    def loading(self, index: int) -> bool:
        """Whether the shard of a partition led here waits to be read again."""
        return index in self._recovering

    def _recover(self, index: int, epoch: int, previous: S) -> None:
        """After a write not confirmed: read the shard again once the log's tail is
        committed in ``epoch`` (a new leadership loads it anyway)."""
        self._recovering[index] = epoch

        async def wait() -> None:
            while self._recovering.get(index) == epoch:
                err = await self.partitions.committed(
                    self.topic, index, epoch, self.write_timeout_s
                )
                if self._recovering.get(index) != epoch:
                    return
                if err is None:
                    del self._recovering[index]
                    if self.partitions.led(self.topic).get(index) == epoch:
                        self._load(index, epoch, previous)
                        log.info("[node %d] %s: read %s-%d again", self.node_id, self.name,
                                 self.topic, index)  # fmt: skip
                    return
                if err == ErrorCode.not_coordinator:
                    del self._recovering[index]  # not the leader now: a new load follows
                    return
                await asyncio.sleep(0.1)

        task = asyncio.get_running_loop().create_task(wait())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()

    def shard(self, index: int) -> S | None:
        """The shard of a partition led here (None: not the coordinator)."""
        s = self._shards.get(index)
        return None if s is None else s.shard

    # -- operations -----------------------------------------------------------------------

    def read(self, index: int, op: Callable[[S], T]) -> T | ErrorCode:
        """``op`` on the shard as every write appended so far left it (committed or
        not: for answers that promise nothing, such as a listing)."""
        s = self._shards.get(index)
        if s is None:
            return self._missing(index)
        return op(s.shard)

    async def read_committed(self, index: int, op: Callable[[S], T]) -> T | ErrorCode:
        """``op`` on the shard once every write appended before this call is committed
        (Kafka reads at the last committed offset): an answer never rests on records the
        next leader may not have. Writes appended meanwhile are seen too (they follow
        the committed ones in the log)."""
        s = self._shards.get(index)
        if s is None:
            return self._missing(index)
        err = await self._settled(index, s)
        return op(s.shard) if err is None else err

    async def _settled(self, index: int, s: _Loaded[S]) -> ErrorCode | None:
        """Wait until the writes appended to the shard so far are committed; None, or
        the error to answer (the shard dropped meanwhile, or its log not committed)."""
        if not s.inflight:
            return None
        err = await self.partitions.committed(self.topic, index, s.epoch, self.write_timeout_s)
        if err is not None:
            return err
        return None if self._shards.get(index) is s else self._missing(index)

    def _missing(self, index: int) -> ErrorCode:
        if index in self._recovering:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    async def write(self, index: int, op: Callable[[S], Outcome[T]]) -> T | ErrorCode:
        """Run ``op`` on the shard, append its records, replay them, and wait until they
        are committed; its answer, or the error the caller answers (NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, or the append's)."""
        s = self._shards.get(index)
        if s is None:
            return self._missing(index)
        t0 = time.monotonic()
        out = op(s.shard)
        if not out.records:
            # an answer from the state earlier writes left: once they are committed
            # (Kafka's runtime defers it to the last written offset)
            err = await self._settled(index, s)
            return out.response if err is None else err
        # the rule, the append and the replay are one step: no other write comes between
        base = self.partitions.append(self.topic, index, out.records, s.epoch, out.producer)
        if isinstance(base, ErrorCode):  # nothing appended: the shard is as it was
            self.stats.failed_writes += 1
            return base
        pid = -1 if out.producer is None else out.producer[0]
        for i, (key, value) in enumerate(out.records):
            s.shard.replay(key, value, base + i, pid, out.producer is not None)
        st = self.stats
        s.inflight += 1
        st.inflight += 1
        try:
            err = await self.partitions.committed(self.topic, index, s.epoch, self.write_timeout_s)
        finally:
            s.inflight -= 1
            st.inflight -= 1
            ms = (time.monotonic() - t0) * 1000
            st.writes += 1
            st.write_ms_total += ms
            st.write_ms_max = max(st.write_ms_max, ms)
        if err is not None:
            st.failed_writes += 1
            if self._shards.get(index) is s:
                del self._shards[index]  # read again once the log's tail is committed
                if self.partitions.led(self.topic).get(index) == s.epoch:
                    self._recover(index, s.epoch, s.shard)
            log.info("[node %d] %s: a write to %s-%d was not committed (%s)",
                     self.node_id, self.name, self.topic, index, err.name)  # fmt: skip
            return err
        return out.response

    def shards(self) -> dict[int, S]:
        """The shards loaded here, by partition."""
        return {i: s.shard for i, s in self._shards.items()}
