from __future__ import annotations

import os
from pathlib import Path

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


def test_retention_by_size_and_time(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300, retention_bytes=600, retention_ms=10_000)
    plog = PartitionLog(tmp_path / "t-0", cfg, 0)
    for i in range(20):
        _append(plog, 1, now=i)
    before = plog.size_bytes
    assert plog.enforce_retention(now_ms=20) > 0
    assert plog.size_bytes <= max(600, before)
    assert plog.log_start_offset > 0
    assert plog.read(0, 100) is not None
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
