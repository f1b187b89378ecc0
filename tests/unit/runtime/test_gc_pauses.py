"""Garbage-collection pauses are timed by generation and a long one is logged: at 1M
partitions a full collection held a controller 0.9 s on a quiet machine."""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Histogram

from keeperless.runtime import gc_pauses


class _Metrics:  # (weakly referenced and hashed, as a node's Metrics is)
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.gc_pause = Histogram("keeperless_gc_pause_ms", "", ["generation"], registry=registry)


@pytest.fixture
def watched() -> Iterator[_Metrics]:
    metrics = _Metrics(CollectorRegistry())
    gc_pauses.watch(metrics)
    gc_pauses.watch(metrics)  # (a second node in the process: one callback)
    try:
        yield metrics
    finally:
        gc.callbacks.remove(gc_pauses._on_gc)
        gc_pauses._rescanning[0] = False
    assert gc_pauses._on_gc not in gc.callbacks


def _count(m: _Metrics, generation: str) -> float:
    value = m.registry.get_sample_value("keeperless_gc_pause_ms_count", {"generation": generation})
    return value or 0.0


def test_each_collection_is_timed_by_generation(watched: _Metrics) -> None:
    assert gc.callbacks.count(gc_pauses._on_gc) == 1
    assert gc.get_freeze_count() > 0  # what the start made is out of the full scans
    before = _count(watched, "2")
    gc.collect(2)
    gc.collect(0)
    assert _count(watched, "2") == before + 1
    assert _count(watched, "0") >= 1


def test_a_long_collection_is_logged(
    watched: _Metrics, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "keeperless.runtime.gc_pauses")
    gc.collect(1)
    assert "held this process" not in caplog.text  # (well under WARN_MS)
    monkeypatch.setattr(gc_pauses, "WARN_MS", 0.0)
    gc.collect(2)
    assert "A garbage collection (generation 2) held this process for" in caplog.text


class _Node:  # (a reference cycle: only a collection frees it)
    def __init__(self) -> None:
        self.me = self


def _in_full_scans(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects(generation=2))


def test_what_survives_a_full_collection_stays_out_of_the_next(watched: _Metrics) -> None:
    alive = _Node()
    gc.collect(2)
    assert not _in_full_scans(alive)
    assert not any(o is alive for o in gc.get_objects())
    newer = _Node()
    gc.collect(1)
    assert _in_full_scans(newer)  # made since: walked by the next full collection


def test_a_frozen_cycle_dropped_later_is_freed_at_the_rescan(
    watched: _Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    cycle = _Node()
    gone = weakref.ref(cycle)
    gc.collect(2)  # frozen while alive
    del cycle
    gc.collect(2)
    assert gone() is not None  # out of the full scans: not seen to be garbage
    monkeypatch.setattr(gc_pauses, "_rescan_due", [0.0])
    gc.collect(2)  # (the rescan is due: the frozen objects are handed back)
    assert gc_pauses._rescanning[0]
    gc.collect(2)
    assert gone() is None
    assert not gc_pauses._rescanning[0]
    assert gc_pauses._rescan_due[0] > 0.0
    again = _Node()
    gc.collect(2)
    assert not _in_full_scans(again)  # frozen again until the next rescan


def test_what_is_alive_at_a_fork_is_frozen_unless_a_rescan_is_due(watched: _Metrics) -> None:
    gc.collect(2)
    alive = _Node()
    gc.collect(1)
    assert _in_full_scans(alive)
    gc_pauses.freeze_before_fork()
    assert not _in_full_scans(alive)
    gc_pauses._rescanning[0] = True
    later = _Node()
    gc.collect(1)
    gc_pauses.freeze_before_fork()
    assert _in_full_scans(later)  # the walk of everything that is due still sees it
