"""Stopping tasks for sure: a cancellation can be lost (asyncio.wait_for in Python 3.11
swallows one that arrives as its timeout fires - a node then never finished stopping,
its ISR loop going on), so a task still running after a while is cancelled again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

__all__ = ["stop_tasks"]

log = logging.getLogger(__name__)


async def stop_tasks(
    tasks: Iterable[asyncio.Task[None]], rounds: int = 5, wait_s: float = 1.0
) -> list[asyncio.Task[None]]:
    """Cancel ``tasks`` and wait for them, cancelling again those still running after
    each ``wait_s``; returns the ones that did not end (after ``rounds`` tries)."""
    pending = {t for t in tasks if not t.done()}
    for t in pending:
        t.cancel()
    for _ in range(rounds):
        if not pending:
            break
        _done, pending = await asyncio.wait(pending, timeout=wait_s)
        for t in pending:
            t.cancel()
    return sorted(pending, key=lambda t: t.get_name())
