"""A new partition's directory is made durable apart from the metadata update that
creates it, as Kafka's since KAFKA-13092: its ``partition.metadata`` is written without
an fsync and a worker thread syncs the file, the directory and its name in the log
directory; a flush or a roll does it first if the worker has not, so nothing flushed
ever sits in a directory a power loss may undo. Creating 10,000 partitions held a
node's event loop for 27 s, two thirds of it in these fsyncs. After a power loss, a
``partition.metadata`` left torn is set aside (renamed ``-stray``), not served, and the
replica starts again empty."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path

import pytest

from keeperless.broker.partition_manager import PartitionManager
from keeperless.broker.partitions import Partition
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.records import build_batch, patch_offsets, read_header
from keeperless.storage.log import LogConfig, PartitionLog
from keeperless.storage.partition_dirs import PARTITION_METADATA, read_topic_id

TID = uuid.UUID(int=77)
INFO = PartitionInfo((1,), (1,), 1, 0, 0)


class Fsyncs:
    """The paths fsynced (by descriptor, resolved when synced)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def _append(plog: PartitionLog, size: int = 100) -> None:
    data = bytearray(build_batch([(None, b"x" * size, [])], timestamp_ms=1_000))
    patch_offsets(data, 0, plog.log_end_offset, 0)
    plog.append(data, [(0, read_header(data, 0))], 0)


def _new_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Partition, Fsyncs]:
    """A new partition "t-0" (no worker to sync its directory) and the fsyncs from then."""
    pm = PartitionManager(1, tmp_path, LogConfig(segment_bytes=1024))
    fsyncs = Fsyncs(monkeypatch)
    pm._sync_later = lambda plog: None  # type: ignore[method-assign]  # (no worker)
    p = pm.ensure("t", 0, TID, INFO, LogConfig(segment_bytes=1024), 0)
    assert p is not None
    return p, fsyncs


def _dir_syncs(tmp_path: Path) -> list[str]:
    """What syncing "t-0"'s new directory fsyncs, in order."""
    d = str(tmp_path / "t-0")
    return [f"{d}/{PARTITION_METADATA}", d, str(tmp_path)]


def test_creating_a_partition_syncs_nothing_and_its_first_flush_syncs_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, fsyncs = _new_partition(tmp_path, monkeypatch)
    assert p.log.dir_pending
    assert fsyncs.paths == []  # not one fsync on the metadata update's path
    assert read_topic_id(tmp_path / "t-0") == TID  # (written, in the page cache)
    _append(p.log)
    assert fsyncs.paths == []  # an append is not a flush
    p.log.flush()
    assert fsyncs.paths[:3] == _dir_syncs(tmp_path)
    assert not p.log.dir_pending
    fsyncs.paths.clear()
    p.log.flush()
    assert fsyncs.paths == [str(tmp_path / "t-0" / "00000000000000000000.log")]  # once only


def test_a_roll_syncs_the_new_directory_before_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, fsyncs = _new_partition(tmp_path, monkeypatch)
    for _ in range(12):  # 1 KiB segments: it rolls
        _append(p.log)
    assert len(p.log._segments) > 1
    assert fsyncs.paths[:3] == _dir_syncs(tmp_path)


def test_a_worker_thread_syncs_new_directories_while_the_loop_runs(tmp_path: Path) -> None:
    async def main() -> PartitionManager:
        pm = PartitionManager(1, tmp_path, LogConfig())
        for i in range(20):
            pm.ensure("t", i, TID, INFO, LogConfig(), 0)
        pending = [p for p in pm.partitions.values() if p.log.dir_pending]
        assert len(pending) == 20  # (not on the loop)
        for _ in range(500):
            if not any(p.log.dir_pending for p in pm.partitions.values()):
                return pm
            await asyncio.sleep(0.01)
        raise AssertionError("the worker did not sync the new directories")

    asyncio.run(main()).close()


def test_a_torn_partition_metadata_is_set_aside_and_the_replica_starts_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pm = PartitionManager(1, tmp_path, LogConfig())
    pm.ensure("t", 0, TID, INFO, LogConfig(), 0)
    pm.ensure("u", 0, uuid.UUID(int=78), INFO, LogConfig(), 0)
    pm.close()
    # a power loss before the worker's fsyncs: the files' names stayed, not their bytes
    for name in ("t-0", "u-0"):
        (tmp_path / name / PARTITION_METADATA).write_bytes(b"")
    caplog.set_level(logging.WARNING)
    pm = PartitionManager(1, tmp_path, LogConfig())
    p = pm.ensure("t", 0, TID, INFO, LogConfig(), 0)  # assigned here: set aside, made anew
    assert p is not None
    assert p.log.log_end_offset == 0
    assert read_topic_id(tmp_path / "t-0") == TID
    pm.remove_strays({("t", 0): TID})  # "u" no longer assigned here: set aside too
    stray = sorted(d.name for d in tmp_path.iterdir() if d.name.endswith("-stray"))
    assert [s.split(".")[0] for s in stray] == ["t-0", "u-0"]
    assert "is damaged" in caplog.text
    assert "its partition.metadata is damaged" in caplog.text
    pm.close()
