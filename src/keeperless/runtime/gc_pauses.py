"""Garbage-collection pauses: kept short, and seen by operators.

A collection stops the whole process: every connection, the replica fetchers and the
Raft timers of a node wait for it. A full collection walks every object the collector
tracks; a controller holding 1M partitions tracks about 5.4 M, and one full collection
of them took 0.9 s on a quiet machine, 0.5-3.5 s on the benchmark's busy one - each
freeing nothing (the metadata image holds no reference cycles), and each one longer than
Kafka's 2 s Raft fetch timeout deposed a leader or timed out a follower.

So what survives a full collection is frozen (``gc.freeze``): the next full collections
walk only what was made since. A reference cycle frozen while alive and dropped later
would never be freed, so every RESCAN_EVERY_S the frozen objects are handed back and
the next full collection walks everything once. Frozen too is everything alive right
before a fork (CPython's advice: a child sharing the parent's pages does not copy the
ones a collection in the parent would write to).

Each collection is timed (``keeperless_gc_pause_ms`` by generation, when metrics are
on) and one that holds the process WARN_MS or longer is logged. The collector is per
process, so is this: nodes started in one process share it.
"""

from __future__ import annotations

import gc
import logging
import time
import weakref
from typing import Any

__all__ = ["RESCAN_EVERY_S", "WARN_MS", "freeze_before_fork", "watch"]

log = logging.getLogger(__name__)

WARN_MS = 500.0
RESCAN_EVERY_S = 3600.0  # how long a frozen cycle can outlive its last reference

_metrics: weakref.WeakSet[Any] = weakref.WeakSet()  # runtime.metrics.Metrics of live nodes
_started = [0.0]
_rescan_due = [0.0]  # (monotonic) when the frozen objects are next handed back
_rescanning = [False]  # handed back: the next full collection walks everything


def watch(metrics: Any | None) -> None:
    """Freeze what a node's start made (it lives on), then keep what survives each full
    collection out of the next ones, and time every collection of this process;
    ``metrics`` (a Metrics with a ``gc_pause`` histogram) gets them too."""
    gc.freeze()
    if metrics is not None:
        _metrics.add(metrics)
    if _on_gc not in gc.callbacks:
        _rescan_due[0] = time.monotonic() + RESCAN_EVERY_S
        _rescanning[0] = False
        gc.callbacks.append(_on_gc)


def freeze_before_fork() -> None:
    """Right before a fork: what is alive now is frozen (unless a full walk is due), so
    this process's collections do not write to the pages its child shares."""
    if not _rescanning[0]:
        gc.collect(1)  # (young garbage is not frozen with the rest)
        gc.freeze()


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - _started[0]) * 1000
    generation = info.get("generation", -1)
    for m in list(_metrics):
        m.gc_pause.labels(str(generation)).observe(ms)
    if ms >= WARN_MS:
        log.warning(
            "A garbage collection (generation %d) held this process for %.0f ms: every "
            "connection and Raft timer waited (%d objects freed, %d frozen out of full "
            "scans)",
            generation,
            ms,
            info.get("collected", 0),
            gc.get_freeze_count(),
        )
    if generation == 2:
        _after_full_collection()


def _after_full_collection() -> None:
    now = time.monotonic()
    if not _rescanning[0] and now >= _rescan_due[0]:
        gc.unfreeze()  # the next full collection walks everything once
        _rescanning[0] = True
        return
    gc.freeze()  # what survived stays out of the next full collections
    if _rescanning[0]:
        _rescanning[0] = False
        _rescan_due[0] = now + RESCAN_EVERY_S
