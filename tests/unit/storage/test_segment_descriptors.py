"""A segment keeps one open descriptor, its log's, as Kafka's does (its indexes are
mapped and their files closed): a broker's open files grow with its segments, not three
times that. With three a segment, a node at the usual 20,000-descriptor limit failed its
log directory ("Too many open files") while creating its 6,660th partition. The index
entries wait in memory and are appended to their files in runs, and all of them at a
sync (a roll, a clean stop), where a restart loads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keeperless.protocol.records import build_batch, patch_offsets, read_header
from keeperless.storage.log import LogConfig, PartitionLog
from keeperless.storage.segment import INDEX_ENTRY, TIME_ENTRY, Segment

PENDING_BYTES = 65536


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _append(plog: PartitionLog, n: int, size: int, ts: int = 1_000) -> None:
    for i in range(n):
        data = bytearray(build_batch([(None, b"x" * size, [])], timestamp_ms=ts + i))
        patch_offsets(data, 0, plog.log_end_offset, 0)
        plog.append(data, [(0, read_header(data, 0))], 0)


def _written(seg: Segment) -> tuple[bytes, bytes]:
    """The index files' bytes as the in-memory entries would write them whole."""
    return (
        b"".join(INDEX_ENTRY.pack(o - seg.base_offset, p) for o, p in seg.index),
        b"".join(TIME_ENTRY.pack(t, o - seg.base_offset) for t, o in seg.time_index),
    )


def _on_disk(seg: Segment) -> tuple[bytes, bytes]:
    return tuple(  # type: ignore[return-value]
        (seg.dir / f"{seg.base_offset:020d}{s}").read_bytes() for s in (".index", ".timeindex")
    )


def test_each_segment_holds_one_descriptor(tmp_path: Path) -> None:
    before = _open_fds()
    plog = PartitionLog(tmp_path, LogConfig(segment_bytes=16 * 1024), 0)
    _append(plog, 60, 2_000)
    segments = len(plog._segments)
    assert segments >= 5
    assert _open_fds() - before == segments
    # Kafka's layout: every segment has its two index files, the active one too
    for seg in plog._segments:
        assert all(p.exists() for p in seg.paths()[:3])
    plog.close()
    assert _open_fds() == before


def test_a_roll_and_a_clean_stop_write_every_index_entry(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path, LogConfig(segment_bytes=64 * 1024), 0)
    _append(plog, 100, 5_000)
    *rolled, active = plog._segments
    assert rolled
    for seg in rolled:
        assert _on_disk(seg) == _written(seg)  # synced at the roll
    assert active.index
    assert _on_disk(active) != _written(active)
    plog.flush(indexes=True)  # a clean stop's flush
    assert _on_disk(active) == _written(active)
    plog.close()


def test_index_entries_go_to_their_files_in_runs_between_syncs(tmp_path: Path) -> None:
    """A big active segment does not hold its whole index in memory until it rolls."""
    plog = PartitionLog(tmp_path, LogConfig(segment_bytes=1 << 30, index_interval_bytes=1), 0)
    entries = PENDING_BYTES // (INDEX_ENTRY.size + TIME_ENTRY.size)
    _append(plog, 3 * entries, 10)
    (seg,) = plog._segments
    index, times = _on_disk(seg)
    assert len(index) + len(times) >= 2 * PENDING_BYTES  # two runs written at least
    assert len(seg.pending[0]) + len(seg.pending[1]) < PENDING_BYTES
    whole = _written(seg)
    assert whole[0].startswith(index)
    assert whole[1].startswith(times)
    plog.close()


def test_a_live_segments_index_entries_reach_its_files_soon_without_a_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka's mapped indexes are readable at once: kafka-dump-log reads the index
    of a live broker's active segment."""
    import asyncio

    from keeperless.storage import segment

    monkeypatch.setattr(segment, "INDEX_WRITE_S", 0.01)

    async def main() -> Segment:
        plog = PartitionLog(tmp_path, LogConfig(), 0)
        _append(plog, 3, 5_000)
        (seg,) = plog._segments
        assert _on_disk(seg) != _written(seg)  # (in memory at first)
        for _ in range(500):
            if _on_disk(seg) == _written(seg):
                plog.close()
                return seg
            await asyncio.sleep(0.01)
        raise AssertionError("the index entries never reached the files")

    seg = asyncio.run(main())
    assert len(seg.index) == 3
