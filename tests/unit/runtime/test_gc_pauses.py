"""Garbage-collection pauses are timed by generation and a long one is logged: at 1M
partitions a full collection held a controller 0.9 s on a quiet machine."""

from __future__ import annotations

import gc
import logging
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
