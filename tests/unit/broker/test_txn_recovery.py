"""The transaction coordinator when a write of its state is not confirmed in time (found
by a fresh-eyes review of the move onto the coordinator runtime): the shard is read again
once its log is committed, and then
- a completion still pending finishes its own transaction, never the producer's next one
  of the same epoch (TV1), whose markers would never be written;
- a completion queued behind the failed write is not lost;
- the epoch a timed-out transaction was aborted from is still known (KIP-360 and the
  producer's retried abort are not fenced);
- meanwhile clients are told COORDINATOR_LOAD_IN_PROGRESS."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.coordinator.txn_records import TxnStatus
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.records import build_batch
from keeperless.txn.coordinator import TxnCoordinator
from tests.unit.broker.test_txn_v2 import _call, _end, _init, _setup


async def _init_id(
    tc: TxnCoordinator, tid: str, pid: int = -1, epoch: int = -1, txn_timeout_ms: int = 60000
) -> Any:
    return await _call(tc, ApiKey.INIT_PRODUCER_ID, 5, {
        "transactional_id": tid,
        "transaction_timeout": datetime.timedelta(milliseconds=txn_timeout_ms), "producer_id": pid,
        "producer_epoch": epoch})  # fmt: skip


async def _add(tc: TxnCoordinator, pid: int, epoch: int) -> None:
    r = await _call(tc, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "x", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})  # fmt: skip
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0


def _failing_commits(tc: TxnCoordinator) -> list[bool]:
    """Make the runtime's next wait for the replicas fail when the flag is set."""
    log: Any = tc.runtime.partitions
    real = log.committed
    fail = [False]

    async def committed(*a: Any, **k: Any) -> ErrorCode | None:
        if fail[0]:
            fail[0] = False
            return ErrorCode.coordinator_not_available  # the ISR wait timed out
        return await real(*a, **k)  # type: ignore[no-any-return]

    log.committed = committed
    return fail


def _state(tc: TxnCoordinator) -> TxnStatus | None:
    md = tc.txns.get("x")
    return None if md is None else md.state


async def _until(cond: Any, what: str) -> None:
    for _ in range(300):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(what)


def test_a_pending_completion_never_ends_the_next_transaction(tmp_path: Path) -> None:
    async def go() -> None:
        b, tc = _setup(tmp_path)
        pid, epoch = await _init(tc)
        fail = _failing_commits(tc)
        calls: list[Any] = []
        real_write = tc.markers.write

        async def markers(*a: Any, **k: Any) -> Any:
            calls.append(a[:3])
            out = await real_write(*a, **k)
            if len(calls) == 1:
                fail[0] = True  # T1's CompleteCommit is not confirmed in time
            return out

        tc.markers.write = markers  # type: ignore[method-assign]
        await _add(tc, pid, epoch)
        assert (await _end(tc, 3, pid, epoch, commit=True)).error_code == 0
        await _until(lambda: _state(tc) == TxnStatus.COMPLETE_COMMIT, "T1 complete")
        await _add(tc, pid, epoch)  # T2, the same epoch (TV1)
        data = build_batch([(b"k", b"v", ())], producer_id=pid, producer_epoch=epoch,
                           base_sequence=0, transactional=True)  # fmt: skip
        p = b.partitions.get("t", 0)
        assert p.append(data, 0, 1 << 20, 0).error == ErrorCode.none
        assert (await _end(tc, 3, pid, epoch, commit=True)).error_code == 0
        await _until(lambda: tc.txns["x"].state == TxnStatus.COMPLETE_COMMIT and not tc._tasks,
                     "T2 complete")  # fmt: skip
        assert len(calls) == 2, calls  # T2's markers were written
        assert pid not in p.txns.ongoing
        tc.stop()
        b.close()

    asyncio.run(go())


def test_a_completion_queued_behind_a_failed_write_is_not_lost(tmp_path: Path) -> None:
    async def go() -> None:
        b, tc = _setup(tmp_path)
        pid, epoch = await _init(tc)
        await _add(tc, pid, epoch)
        gate_markers = asyncio.Event()
        real_write = tc.markers.write

        async def slow_markers(*a: Any, **k: Any) -> Any:
            await gate_markers.wait()
            return await real_write(*a, **k)

        tc.markers.write = slow_markers  # type: ignore[method-assign]
        assert (await _end(tc, 3, pid, epoch, commit=True)).error_code == 0
        await asyncio.sleep(0.01)  # writing its markers
        log: Any = tc.runtime.partitions
        real_committed = log.committed
        gate_commit = asyncio.Event()
        once = [True]

        async def committed(*a: Any, **k: Any) -> ErrorCode | None:
            if once[0]:
                once[0] = False
                await gate_commit.wait()
                return ErrorCode.coordinator_not_available
            return await real_committed(*a, **k)  # type: ignore[no-any-return]

        log.committed = committed
        w = asyncio.create_task(_init_id(tc, "y"))  # the same partition: holds its lock
        await asyncio.sleep(0.01)
        gate_markers.set()
        await asyncio.sleep(0.01)  # the completion waits for the lock
        gate_commit.set()
        assert (await w).error_code == ErrorCode.coordinator_not_available
        await _until(lambda: _state(tc) == TxnStatus.COMPLETE_COMMIT, "x complete")
        tc.stop()
        b.close()

    asyncio.run(go())


def test_a_write_not_confirmed_keeps_the_epoch_a_timed_out_transaction_had(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        b, tc = _setup(tmp_path)
        r = await _init_id(tc, "x", txn_timeout_ms=50)
        pid, epoch = r.producer_id, r.producer_epoch
        await _add(tc, pid, epoch)
        await asyncio.sleep(0.1)
        await tc._sweep(int(time.time() * 1000))  # aborted at its timeout, epoch bumped
        await _until(lambda: tc.txns["x"].state == TxnStatus.COMPLETE_ABORT and not tc._tasks,
                     "aborted")  # fmt: skip
        assert tc.txns["x"].prev_epoch == epoch
        fail = _failing_commits(tc)
        fail[0] = True
        assert (await _init_id(tc, "y")).error_code == ErrorCode.coordinator_not_available
        # read again: meanwhile the coordinator is loading
        y = await _init_id(tc, "y")
        assert y.error_code in (ErrorCode.coordinator_load_in_progress, ErrorCode.none)
        await _until(lambda: tc.runtime.shard(0) is not None, "read again")
        assert tc.txns["x"].prev_epoch == epoch
        got = await _end(tc, 3, pid, epoch, commit=False)  # the producer's retried abort
        assert got.error_code == ErrorCode.none
        got = await _init_id(tc, "x", pid, epoch)  # KIP-360: it bumps its epoch
        assert got.error_code == ErrorCode.none
        tc.stop()
        b.close()

    asyncio.run(go())
