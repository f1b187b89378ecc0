"""FileRaftLog (the metadata log on disk) behaves like the in-memory RaftLog."""

from __future__ import annotations

from pathlib import Path

import pytest

from keeperless.protocol.records import build_batch
from keeperless.raft.log import CorruptSnapshotError, MemoryLog
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.runtime.raft_log import FileRaftLog


def _entry(base: int, n: int, epoch: int) -> Entry:
    data = bytearray(build_batch([(None, b"r%d" % (base + i), ()) for i in range(n)]))
    data[0:8] = base.to_bytes(8, "big")
    data[12:16] = epoch.to_bytes(4, "big")
    return Entry(base, base + n - 1, epoch, bytes(data))


def _fill(logs: list) -> None:  # type: ignore[type-arg]
    base = 0
    for epoch, n in [(1, 2), (1, 3), (2, 1), (2, 2), (4, 3)]:
        e = _entry(base, n, epoch)
        for lg in logs:
            lg.append([e])
        base += n


def _same(a: MemoryLog, b: FileRaftLog) -> None:
    assert (a.start_offset, a.end_offset, a.last_epoch()) == (
        b.start_offset,
        b.end_offset,
        b.last_epoch(),
    )
    for ep in range(6):
        assert a.end_offset_for_epoch(ep) == b.end_offset_for_epoch(ep)
    for off in range(a.start_offset, a.end_offset):
        assert a.read(off, 2) == b.read(off, 2)


def test_file_log_matches_memory_log(tmp_path: Path) -> None:
    mem, disk = MemoryLog(), FileRaftLog(tmp_path / "m-0", segment_bytes=200)
    _fill([mem, disk])
    _same(mem, disk)
    for lg in (mem, disk):
        lg.truncate_to(7)  # inside the (2, 2) batch at 6-7: the batch goes
    _same(mem, disk)
    assert disk.end_offset == 6
    disk.flush()
    disk.close()
    reopened = FileRaftLog(tmp_path / "m-0", segment_bytes=200)
    _same(mem, reopened)


def _snapshot_bytes(tag: bytes, records: int = 3) -> bytes:
    return build_batch([(None, tag * 1000, [])] * records)


def test_snapshots_compact_and_install(tmp_path: Path) -> None:
    mem, disk = MemoryLog(), FileRaftLog(tmp_path / "m-0", segment_bytes=120)
    _fill([mem, disk])
    sid = SnapshotId(6, 2)
    image = _snapshot_bytes(b"6")
    for lg in (mem, disk):
        lg.take_snapshot(sid, image)
    assert (tmp_path / "m-0" / "00000000000000000006-0000000002.checkpoint").exists()
    assert disk.snapshot_data() == image
    for pos, n in ((0, 100), (100, 5000), (len(image) - 1, 100), (len(image), 10)):
        assert disk.snapshot_chunk(pos, n) == mem.snapshot_chunk(pos, n)
        assert disk.snapshot_chunk(pos, n) == (image[pos : pos + n], len(image))
    _same(mem, disk)
    other = SnapshotId(40, 7)
    newer = _snapshot_bytes(b"n")
    # a damaged transfer is refused and changes nothing
    for damaged in (newer[:-1], newer[:100] + b"x" + newer[101:]):
        with pytest.raises(CorruptSnapshotError):
            disk.install_snapshot(other, damaged)
    assert disk.snapshot_id == sid
    for lg in (mem, disk):
        lg.install_snapshot(other, newer)
    _same(mem, disk)
    disk.close()
    again = FileRaftLog(tmp_path / "m-0")
    assert again.snapshot_id == other
    assert (again.start_offset, again.end_offset) == (40, 40)
    again.append([_entry(40, 2, 7)])
    assert again.end_offset == 42


def test_reads_across_more_than_a_megabyte_of_batches(tmp_path: Path) -> None:
    """A read of the file log is cut at 1 MiB, usually inside a batch; every entry must
    still come back whole (a stuck observer found this: it could not catch up)."""
    disk = FileRaftLog(tmp_path / "m-0")
    base = 0
    for _ in range(12):
        data = bytearray(build_batch([(None, b"x" * 1000, ()) for _ in range(300)]))
        data[0:8] = base.to_bytes(8, "big")
        data[12:16] = (1).to_bytes(4, "big")
        disk.append([Entry(base, base + 299, 1, bytes(data))])
        base += 300
    entries = disk.read(0, 100)
    assert [e.base_offset for e in entries] == list(range(0, base, 300))
    assert all(len(e.data) == len(entries[0].data) for e in entries)
