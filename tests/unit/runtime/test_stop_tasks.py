"""A task that swallows a cancellation still stops (found by the fault harness: a node
whose ISR loop lost its cancellation never finished stopping after SIGTERM)."""

from __future__ import annotations

import asyncio
import contextlib

from keeperless.runtime.tasks import stop_tasks


def test_a_swallowed_cancellation_is_repeated() -> None:
    async def go() -> None:
        swallowed = []
        release = asyncio.Event()

        async def stubborn() -> None:
            while True:
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    if swallowed:
                        raise
                    swallowed.append(1)  # as wait_for in Python 3.11 may do, once

        async def deaf() -> None:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0.01)

        a = asyncio.create_task(stubborn(), name="stubborn")
        b = asyncio.create_task(deaf(), name="deaf")
        await asyncio.sleep(0.02)
        left = await stop_tasks([a, b], rounds=3, wait_s=0.05)
        assert a.cancelled()
        assert swallowed == [1]
        assert left == [b]  # named to the caller, which stops anyway
        release.set()
        await b

    asyncio.run(go())
