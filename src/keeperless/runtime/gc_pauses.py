"""Garbage-collection pauses, seen by operators.

A collection stops the whole process: every connection, the replica fetchers and the
Raft timers of a node wait for it. A full collection walks every object the collector
tracks; a controller holding 1M partitions tracks about 5.4 M, and one full collection
of them took 0.9 s on a quiet machine - near Kafka's 2 s Raft fetch timeout on a busy
one. Each collection is timed (``keeperless_gc_pause_ms`` by generation, when metrics
are on) and one that holds the process WARN_MS or longer is logged.

The collector is per process, so is this: nodes started in one process share it.
"""

from __future__ import annotations

import gc
import logging
import time
import weakref
from typing import Any

__all__ = ["WARN_MS", "watch"]

log = logging.getLogger(__name__)

WARN_MS = 500.0

_metrics: weakref.WeakSet[Any] = weakref.WeakSet()  # runtime.metrics.Metrics of live nodes
_started = [0.0]


def watch(metrics: Any | None) -> None:
    """Freeze what a node's start made (it lives on: out of the full scans from now on),
    and time every collection of this process from now on; ``metrics`` (a Metrics with
    a ``gc_pause`` histogram) gets them too."""
    gc.freeze()
    if metrics is not None:
        _metrics.add(metrics)
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


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
