"""Rolled segments made durable off the event loop, as Kafka's roll schedules its flush
(and, since KAFKA-9693, the producer snapshot's): the fsync of a 1 GiB segment the page
cache had not yet written back held the loop 250 ms to 1 s under a producer's load.

A roll hands the rolled segment to ``Sealing.seal``: a worker fsyncs its data, its
indexes and its directory, and only then is the recovery point (the producers' snapshot
at the next segment's base) written. A flush meanwhile fsyncs the pending ones too."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from keeperless.storage.durable import fsync_dir, fsync_file
from keeperless.storage.producer_files import TXN_INDEX_SUFFIX
from keeperless.storage.segment import Segment, segment_name

__all__ = ["Sealing"]

_BESIDE = (".index", ".timeindex", TXN_INDEX_SUFFIX)  # a segment's files but its .log


def _make_durable(fd: int, dir_fd: int, names: list[str]) -> None:
    """fsync the file ``fd``, the files ``names`` in the directory ``dir_fd`` that
    exist, then that directory; both descriptors are closed."""
    try:
        os.fsync(fd)
        for name in names:
            try:
                f = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
            except FileNotFoundError:
                continue  # (no aborted transaction, or deleted since)
            try:
                os.fsync(f)
            finally:
                os.close(f)
        os.fsync(dir_fd)
    finally:
        os.close(fd)
        os.close(dir_fd)


class Sealing:
    """A log's rolled segments being made durable: a duplicate of each one's descriptor,
    for a flush meanwhile."""

    def __init__(self) -> None:
        self._pending: dict[Segment, int] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def seal(
        self,
        directory: Path,
        old: Segment,
        then: Callable[[], None],
        valid: Callable[[], bool],
        failed: Callable[[OSError], object],
    ) -> None:
        """Make ``old`` (in ``directory``) durable - its data, its indexes (loaded, not
        rebuilt, at the next start) and the directory's names - in a worker when an
        event loop runs, then run ``then`` if ``valid()`` still holds (the log neither
        truncated nor closed); an error goes to ``failed``. Without a loop, at once."""
        old.write_indexes(sync=False)
        names = [segment_name(old.base_offset, s) for s in _BESIDE]
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        fd = os.dup(old.fd)  # (the worker's)
        self._pending[old] = os.dup(old.fd)  # (a flush's meanwhile)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: a tool, a test) done now
            try:
                _make_durable(fd, dir_fd, names)
            finally:
                os.close(self._pending.pop(old))
            then()
            return

        def sealed(done: asyncio.Future[None]) -> None:
            mine = self._pending.pop(old, None)
            if mine is None:
                return  # (closed meanwhile)
            os.close(mine)
            if done.cancelled() or not valid():
                return
            try:
                done.result()
                then()
            except OSError as e:
                failed(e)

        loop.run_in_executor(None, _make_durable, fd, dir_fd, names).add_done_callback(sealed)

    def flush(self, directory: Path) -> None:
        """fsync the pending segments, their indexes and ``directory`` now."""
        for seg, fd in list(self._pending.items()):
            os.fsync(fd)
            for suffix in _BESIDE:
                fsync_file(directory / segment_name(seg.base_offset, suffix))
        if self._pending:
            fsync_dir(directory)

    def close(self) -> None:
        for fd in self._pending.values():
            os.close(fd)
        self._pending = {}
