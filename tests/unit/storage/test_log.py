from __future__ import annotations

import os
from pathlib import Path

import pytest

from keeperless.protocol.records import build_batch, iter_batches, patch_offsets
from keeperless.storage.log import LogConfig, PartitionLog


def _append(plog: PartitionLog, n: int, now: int = 1000, size: int = 10) -> int:
    buf = bytearray(build_batch([(None, b"x" * size, [])] * n, timestamp_ms=now))
    base = plog.log_end_offset
    patch_offsets(buf, 0, base, 0)
    plog.append(buf, list(iter_batches(buf)), now)
    return base


def test_append_read_and_roll(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=500, index_interval_bytes=0), 0)
    for _ in range(20):
        _append(plog, 3)
    assert plog.log_end_offset == 60
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert len(names) > 1
    assert names[0] == "00000000000000000000.log"
    for off in (0, 1, 31, 59):
        sl = plog.read(off, 10)
        assert sl is not None
        hs = [h for _, h in iter_batches(sl.read())]
        assert hs[0].base_offset <= off <= hs[0].last_offset
    assert plog.read(60, 100) is None
    plog.close()
    again = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=500), 0)
    assert again.log_end_offset == 60
    assert again.truncated_bytes == 0


def test_torn_tail_is_truncated(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "t-0", LogConfig(), 0)
    for _ in range(5):
        _append(plog, 2)
    plog.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    good = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(build_batch([(None, b"y" * 100, [])])[:-20])
    again = PartitionLog(tmp_path / "t-0", LogConfig(), 0)
    assert again.log_end_offset == 10
    assert again.truncated_bytes > 0
    assert seg.stat().st_size == good
    assert _append(again, 1) == 10


def test_corrupt_batch_in_middle_of_tail(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "t-0", LogConfig(), 0)
    for _ in range(4):
        _append(plog, 1)
    plog.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    size = len(data) // 4
    data[2 * size + 65] ^= 0x55
    seg.write_bytes(bytes(data))
    again = PartitionLog(tmp_path / "t-0", LogConfig(), 0)
    assert again.log_end_offset == 2


def _segments(d: Path) -> list[tuple[int, int]]:
    """(base offset, bytes) of each segment file, oldest first, as on disk."""
    return sorted((int(p.name[:20]), p.stat().st_size) for p in d.glob("*.log"))


def test_retention_by_bytes_deletes_exactly_the_oldest_segments_over_the_limit(
    tmp_path: Path,
) -> None:
    """Kafka's retention.bytes: delete the oldest segment while the log would still hold
    at least retention.bytes without it; never the active segment."""
    cfg = LogConfig(segment_bytes=300, retention_bytes=600, retention_ms=-1)
    plog = PartitionLog(tmp_path / "t-0", cfg, 0)
    for i in range(20):
        _append(plog, 1, now=i)
    segs = _segments(tmp_path / "t-0")
    assert len(segs) >= 5
    total, keep = sum(size for _, size in segs), list(segs)
    while len(keep) > 1 and total - keep[0][1] >= 600:
        total -= keep.pop(0)[1]
    assert 0 < len(segs) - len(keep) < len(segs) - 1  # some, not all, go
    assert plog.enforce_retention(now_ms=10**12) == len(segs) - len(keep)
    assert _segments(tmp_path / "t-0") == keep
    assert plog.log_start_offset == keep[0][0]
    assert plog.size_bytes == total >= 600
    assert total - keep[0][1] < 600  # one more would go below the limit
    assert plog.read(keep[0][0] - 1, 100) is not None  # reads start at the new start
    assert plog.enforce_retention(now_ms=10**12) == 0


def test_retention_by_time_deletes_exactly_the_segments_older_than_the_limit(
    tmp_path: Path,
) -> None:
    """Kafka's retention.ms: a segment goes once its newest record is older than
    retention.ms; younger segments and the active one stay, whatever their size."""
    cfg = LogConfig(segment_bytes=300, retention_bytes=-1, retention_ms=10_000)
    plog = PartitionLog(tmp_path / "t-0", cfg, 0)
    for i in range(20):
        _append(plog, 1, now=i * 1000)  # offset i written at i seconds
    segs = _segments(tmp_path / "t-0")
    now = 25_500  # records before 15.5 s are past retention
    newest = [min(segs[j + 1][0], 20) - 1 for j in range(len(segs) - 1)]  # newest offset
    expired = [segs[j] for j, last in enumerate(newest) if last * 1000 < now - 10_000]
    assert 0 < len(expired) < len(segs) - 1
    assert plog.enforce_retention(now_ms=now) == len(expired)
    assert _segments(tmp_path / "t-0") == segs[len(expired) :]
    assert plog.log_start_offset == segs[len(expired)][0]
    assert plog.enforce_retention(now_ms=now) == 0
    assert plog.enforce_retention(now_ms=10**9) == len(segs) - len(expired) - 1  # not active
    assert len(_segments(tmp_path / "t-0")) == 1
    os.sync()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "t-0", LogConfig(index_interval_bytes=0), 0)
    for ts in (100, 200, 300):
        _append(plog, 2, now=ts)
    assert plog.offset_for_timestamp(150) == (2, 200)
    assert plog.offset_for_timestamp(50) == (0, 100)
    assert plog.offset_for_timestamp(301) is None


def test_timestamp_lookup_answers_the_record_inside_a_batch(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "t-0", LogConfig(index_interval_bytes=0), 0)
    # one batch of five records at 1000, 1010, 1005, 1030, 1020 (out of order is allowed)
    buf = bytearray(
        build_batch([(None, b"v", [])] * 5, timestamp_ms=1000, timestamp_deltas=[0, 10, 5, 30, 20])
    )
    plog.append(buf, list(iter_batches(buf)), 2000)
    assert plog.offset_for_timestamp(1000) == (0, 1000)
    assert plog.offset_for_timestamp(1006) == (1, 1010)
    assert plog.offset_for_timestamp(1011) == (3, 1030)
    assert plog.offset_for_timestamp(1031) is None
    assert plog.offset_of_max_timestamp() == (3, 1030)
    _append(plog, 2, now=900)  # a later batch with older timestamps
    assert plog.offset_of_max_timestamp() == (3, 1030)


def test_a_failed_write_fails_the_log_directory_and_leaves_no_torn_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short write (full disk) is rolled back, the failure goes to the handler (the
    server's stops the node) and nothing is ever appended after it; the log reopens
    with every earlier batch."""
    from keeperless.storage import dir_failure

    reported: list[Path] = []
    dir_failure.set_failure_handler(lambda d, e: reported.append(d))
    try:
        plog = PartitionLog(tmp_path / "t-0", LogConfig(), 0)
        for _ in range(3):
            _append(plog, 2)
        size = (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size
        real_write = os.write

        def short_write(fd: int, data: bytes) -> int:
            return real_write(fd, bytes(data)[: len(data) // 2])

        monkeypatch.setattr(os, "write", short_write)
        with pytest.raises(dir_failure.LogDirFailure, match="No space left on device"):
            _append(plog, 2)
        monkeypatch.setattr(os, "write", real_write)
        assert reported == [tmp_path / "t-0"]
        assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == size
        with pytest.raises(dir_failure.LogDirFailure):
            _append(plog, 1)  # the disk has room again, but the log never takes more
        with pytest.raises(dir_failure.LogDirFailure):
            plog.flush()
        assert reported == [tmp_path / "t-0"]
        plog.close()
        again = PartitionLog(tmp_path / "t-0", LogConfig(), 0)
        assert again.log_end_offset == 6
        assert again.truncated_bytes == 0
    finally:
        dir_failure.set_failure_handler(None)


def test_the_log_start_moves_inside_a_segment_and_drops_the_segments_below(
    tmp_path: Path,
) -> None:
    """DeleteRecords: the start may land inside a segment (nothing below it is served:
    the broker answers OFFSET_OUT_OF_RANGE below log_start_offset) and the segments
    wholly below it are deleted; past the end, the log starts over there, empty."""
    plog = PartitionLog(tmp_path, LogConfig(segment_bytes=200), 0)
    for _ in range(12):
        _append(plog, 1)
    segments = len(list(tmp_path.glob("*.log")))
    assert segments > 2
    assert plog.advance_start(5, 0)
    assert plog.log_start_offset == 5
    assert not plog.advance_start(3, 0), "the start never goes back"
    assert plog.log_start_offset == 5
    left = sorted(tmp_path.glob("*.log"))
    assert len(left) < segments
    assert int(left[0].stem) <= 5, "the segment holding the start is kept"
    assert plog.log_end_offset == 12
    assert plog.advance_start(20, 0)
    assert (plog.log_start_offset, plog.log_end_offset) == (20, 20)
    plog.close()


def test_offset_checkpoint_files_round_trip_and_a_damaged_one_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from keeperless.storage.offset_checkpoint import (
        read_offset_checkpoint,
        write_offset_checkpoint,
    )

    path = tmp_path / "log-start-offset-checkpoint"
    assert read_offset_checkpoint(path) == {}
    write_offset_checkpoint(path, {("orders", 1): 40, ("a.b-c", 0): 7})
    assert path.read_text() == "0\n2\na.b-c 0 7\norders 1 40\n"  # Kafka's format
    assert read_offset_checkpoint(path) == {("orders", 1): 40, ("a.b-c", 0): 7}
    path.write_text("0\n3\norders 1 40\n")  # damaged from outside: reported, ignored
    assert read_offset_checkpoint(path) == {}
    assert "Ignoring" in caplog.text
