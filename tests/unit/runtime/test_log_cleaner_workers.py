"""A partition whose cleaning kills the cleaner's worker process every time (the OOM
killer, say) is retried once, then left uncleanable as Kafka's cleaner leaves it - not a
new worker process started for it again and again, once per hosted partition each round
(found by review)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from keeperless.runtime.log_cleaner import CleanerSettings, LogCleaner


class _DyingPool(concurrent.futures.Executor):
    started = 0

    def __init__(self) -> None:
        _DyingPool.started += 1

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        f.set_exception(BrokenProcessPool("A child process terminated abruptly"))
        return f

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def test_a_partition_that_kills_its_worker_is_left_after_a_second_death(tmp_path: Path) -> None:
    parts = {("t", i): SimpleNamespace(log=SimpleNamespace(dir=tmp_path / f"t-{i}"))
             for i in range(200)}  # fmt: skip
    on_disk = SimpleNamespace(log_dir=tmp_path, partitions=parts)
    broker = SimpleNamespace(settings=SimpleNamespace(node_id=1), partitions=on_disk)
    cleaner = LogCleaner(broker, CleanerSettings(backoff_ms=100))  # type: ignore[arg-type]
    job = SimpleNamespace(name="t-0")
    p0 = parts[("t", 0)]
    p0.log.generation = 0  # type: ignore[attr-defined]

    def candidates(now: int) -> list[Any]:
        return [] if ("t", 0) in cleaner.uncleanable else [(0.9, ("t", 0), p0, job)]

    def executor() -> Any:
        if cleaner._pool is None:
            cleaner._pool = _DyingPool()  # type: ignore[assignment]
        return cleaner._pool

    cleaner.candidates = candidates  # type: ignore[method-assign]
    cleaner._executor = executor  # type: ignore[method-assign]

    async def rounds() -> None:
        task = asyncio.create_task(cleaner.run())
        await asyncio.sleep(0.35)  # a few rounds
        task.cancel()

    asyncio.run(rounds())
    assert _DyingPool.started == 2
    assert ("t", 0) in cleaner.uncleanable


def test_close_ends_the_workers_and_the_pool_before_it_returns(tmp_path: Path) -> None:
    """A broker's stop leaves no cleaner worker or pool thread behind: a pool shut down
    without waiting raced Python's exit hook (a traceback at the end of a stopped
    broker's log, 'Bad file descriptor', found by the fault harness)."""
    import multiprocessing
    import time

    on_disk = SimpleNamespace(log_dir=tmp_path, partitions={})
    broker = SimpleNamespace(settings=SimpleNamespace(node_id=1), partitions=on_disk)
    cleaner = LogCleaner(broker, CleanerSettings(threads=1))  # type: ignore[arg-type]
    pool = cleaner._executor()
    busy = pool.submit(time.sleep, 60)  # a cleaning that would go on for a minute
    deadline = time.monotonic() + 30
    while not multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert multiprocessing.active_children(), "no worker started"
    cleaner.close()
    assert not multiprocessing.active_children()
    manager = pool._executor_manager_thread  # type: ignore[attr-defined]
    assert manager is None or not manager.is_alive()
    assert busy.done()
