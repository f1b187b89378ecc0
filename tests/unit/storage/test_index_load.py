"""Restarts that read no batch below the recovery point (issue 30, item 3): a segment
flushed when the log rolled (and, after a clean stop, the active one) is opened from its
own ``.index`` / ``.timeindex``, checked, as Kafka opens it; only the batches after the
last index entry are read. Whatever those files say, the log that opens is the one a
read of every batch would open: an index that is short, stale, damaged or another
segment's is detected, and rebuilt from the log, never served."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from keeperless.protocol.records import BatchHeader, build_batch, patch_offsets, read_header
from keeperless.storage.log import LogConfig, PartitionLog
from keeperless.storage.segment import INDEX_ENTRY, TIME_ENTRY

CONFIG = LogConfig(segment_bytes=256 * 1024, index_interval_bytes=4096)
END = 2**62  # a recovery point past every segment


def _fill(d: Path, batches: int = 400, seed: int = 1) -> PartitionLog:
    """Batches of many sizes (a few hundred bytes to 40 KB) whose timestamps mostly rise
    and sometimes fall back, over several segments."""
    rng = random.Random(seed)
    plog = PartitionLog(d, CONFIG, 0)
    ts = 1_000_000
    for _ in range(batches):
        ts += rng.choice([-50, 1, 10, 100])
        n = rng.randint(1, 8)
        data = bytearray(build_batch([(None, b"x" * rng.randint(10, 5_000), [])] * n,
                                     timestamp_ms=ts))  # fmt: skip
        patch_offsets(data, 0, plog.log_end_offset, 0)
        plog.append(data, [(0, read_header(data, 0))], 0)
    return plog


def _state(plog: PartitionLog) -> list[tuple[object, ...]]:
    return [
        (s.base_offset, s.size, s.next_offset, s.max_timestamp, s.index, s.time_index,
         s.bytes_since_index)
        for s in plog._segments
    ]  # fmt: skip


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix != ".log"}


def _open(d: Path, recovery_point: int, clean: bool) -> tuple[PartitionLog, list[BatchHeader]]:
    seen: list[BatchHeader] = []
    plog = PartitionLog(d, CONFIG, 0, seen.append, clean_shutdown=clean,
                        recovery_point=recovery_point)  # fmt: skip
    return plog, seen


def _scanned(d: Path) -> tuple[list[tuple[object, ...]], dict[str, bytes]]:
    """The log as a read of every batch opens it, and the index files it writes."""
    plog, seen = _open(d, 0, clean=False)
    state = _state(plog)
    plog.close()
    assert seen
    return state, _files(d)


def test_a_clean_stop_opens_every_segment_from_its_indexes_and_reads_no_batch(
    tmp_path: Path,
) -> None:
    d = tmp_path / "t-0"
    _fill(d).close()
    want, files = _scanned(d)
    assert len(want) >= 5
    plog, seen = _open(d, END, clean=True)
    assert _state(plog) == want
    assert seen == []  # nothing passed to the producers' state: nothing to replay
    assert plog.replayed_from == plog.log_end_offset
    assert _files(d) == files  # nothing rewritten
    # served as before: reads, lookups by time, and appends go on
    assert plog.offset_for_timestamp(0) is not None
    plog.close()


def test_a_crash_reads_only_the_segments_from_the_recovery_point(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    _fill(d).close()
    want, _ = _scanned(d)
    active = want[-1][0]
    assert isinstance(active, int)
    plog, seen = _open(d, active, clean=False)
    assert _state(plog) == want
    assert seen
    assert seen[0].base_offset == active
    assert plog.replayed_from == active
    plog.close()
    # a recovery point inside a segment: that segment and all after it are read
    second = want[1][0]
    assert isinstance(second, int)
    plog, seen = _open(d, second + 1, clean=False)
    assert _state(plog) == want
    assert seen[0].base_offset == second
    plog.close()


def _damage_index(path: Path, how: str, rng: random.Random) -> None:
    raw = bytearray(path.read_bytes())
    entry = INDEX_ENTRY.size if path.suffix == ".index" else TIME_ENTRY.size
    n = len(raw) // entry
    if how == "cut inside an entry":
        del raw[len(raw) - rng.randint(1, entry - 1) :]
    elif how == "lost its tail":
        del raw[rng.randint(1, max(1, n - 1)) * entry :]
    elif how == "emptied":
        raw.clear()
    elif how == "zeroed tail":
        k = rng.randint(1, max(1, n - 1))
        raw[k * entry :] = bytes(len(raw) - k * entry)
    elif how == "entry past the file":
        raw[-entry:] = (INDEX_ENTRY.pack(n * 1000, 10**9) if entry == INDEX_ENTRY.size
                        else TIME_ENTRY.pack(2**40, 10**6))  # fmt: skip
    elif how == "every entry names another batch":
        if entry == INDEX_ENTRY.size:  # the right positions, the offsets one off
            raw[:] = b"".join(
                INDEX_ENTRY.pack(rel + 1, pos) for rel, pos in INDEX_ENTRY.iter_unpack(raw)
            )
        else:
            ts, rel = TIME_ENTRY.unpack_from(raw, (n - 1) * entry)
            raw[(n - 1) * entry :] = TIME_ENTRY.pack(ts, rel + 10**5)
    elif how == "stale entries past the end":
        raw += (INDEX_ENTRY.pack(10**6, 10**8) if entry == INDEX_ENTRY.size
                else TIME_ENTRY.pack(2**41, 10**6))  # fmt: skip
    elif how == "timestamps out of order":
        if entry == TIME_ENTRY.size and n >= 2:
            ts, rel = TIME_ENTRY.unpack_from(raw, 0)
            raw[entry : 2 * entry] = TIME_ENTRY.pack(ts - 1, rel + 1)
        elif n >= 2:
            rel, pos = INDEX_ENTRY.unpack_from(raw, 0)
            raw[entry : 2 * entry] = INDEX_ENTRY.pack(rel, pos + 1)
    path.write_bytes(bytes(raw))


HOW = [
    "cut inside an entry",
    "lost its tail",
    "emptied",
    "zeroed tail",
    "entry past the file",
    "every entry names another batch",
    "stale entries past the end",
    "timestamps out of order",
]


@pytest.mark.parametrize(
    ("how", "suffix"),
    # (a time index cut at an entry's end is a valid shorter one: both files are
    # fsynced before the recovery point passes them, as Kafka's, so no crash cuts them)
    [
        (how, s)
        for how in HOW
        for s in (".index", ".timeindex")
        if (how, s) != ("lost its tail", ".timeindex")
    ],
)
def test_a_damaged_index_is_rebuilt_never_served(tmp_path: Path, how: str, suffix: str) -> None:
    d = tmp_path / "t-0"
    _fill(d).close()
    want, files = _scanned(d)
    rng = random.Random(hash((how, suffix)) & 0xFFFF)
    for path in sorted(d.glob(f"*{suffix}")):
        _damage_index(path, how, rng)
    plog, _ = _open(d, END, clean=True)
    assert _state(plog) == want
    plog.close()
    assert _files(d) == files  # written again as the log says


def test_another_segments_index_beside_a_log_is_not_taken(tmp_path: Path) -> None:
    """What a crash in the middle of a cleaning's swap could leave: the replaced first
    segment's indexes beside the cleaned copy."""
    d = tmp_path / "t-0"
    _fill(d).close()
    want, files = _scanned(d)
    idx = sorted(d.glob("*.index"))
    tidx = sorted(d.glob("*.timeindex"))
    idx[0].write_bytes(idx[1].read_bytes())
    tidx[0].write_bytes(tidx[1].read_bytes())
    plog, _ = _open(d, END, clean=True)
    assert _state(plog) == want
    plog.close()
    assert _files(d) == files


def test_a_torn_segment_below_the_recovery_point_ends_the_log_there(tmp_path: Path) -> None:
    """The segment's file is cut short under indexes that say more (the fault harness's
    power loss does this to a segment that rolled during the fault): the read from the
    last entry finds the torn batch, and recovery cuts the log there as a full read
    does, the later segments deleted."""
    d = tmp_path / "t-0"
    _fill(d).close()
    second = sorted(d.glob("*.log"))[1]
    os.truncate(second, second.stat().st_size - 100)
    want, _ = _scanned(d)  # (this read cut it: cut it again for the trusted open)
    _fill(tmp_path / "u-0").close()
    d2 = tmp_path / "u-0"
    second = sorted(d2.glob("*.log"))[1]
    os.truncate(second, second.stat().st_size - 100)
    plog, _ = _open(d2, END, clean=True)
    assert _state(plog) == want
    assert len(list(d2.glob("*.log"))) == 2
    plog.close()


def test_a_swap_finished_at_start_rebuilds_the_copys_indexes(tmp_path: Path) -> None:
    """A crash after a cleaned copy was renamed ``.swap``: the copy goes into place at
    the next start with its indexes made from it, not the replaced segment's."""
    d = tmp_path / "t-0"
    _fill(d).close()
    logs = sorted(d.glob("*.log"))
    # the "cleaned copy" of the first segment: its first half (a prefix of batches)
    data = logs[0].read_bytes()
    pos = 0
    while pos + read_header(data, pos).size < len(data) // 2:
        pos += read_header(data, pos).size
    os.rename(logs[0], logs[0].with_suffix(".log.swap"))
    logs[0].with_suffix(".log.swap").write_bytes(data[:pos])
    plog, _ = _open(d, END, clean=True)
    first = plog._segments[0]
    assert first.size == pos
    assert first.index
    assert all(p < pos for _, p in first.index)
    assert first.time_index[-1][1] < first.next_offset
    plog.close()
