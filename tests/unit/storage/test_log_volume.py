"""Logs at the sizes users have: every batch size from one byte to several MiB, well past
every window the readers use, reopened after a clean close and after a crash at any byte.

Issue 23: the recovery scan took a batch straddling its 8 MiB read window for a torn one
and cut every active segment (data and ``__cluster_metadata``) there at restart.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from keeperless.protocol.records import build_batch, iter_batches, patch_offsets, read_header
from keeperless.raft.messages import Entry
from keeperless.runtime.raft_log import FileRaftLog
from keeperless.storage.batch_scan import SCAN_WINDOW_BYTES
from keeperless.storage.log import LogConfig, PartitionLog

MIB = 1024 * 1024
EXAMPLES = int(os.environ.get("KEEPERLESS_PROPERTY_EXAMPLES", "6"))
# how much one example may write: past every window several times over, and up to
# several hundred MB (KEEPERLESS_VOLUME_MB raises it)
VOLUME_BYTES = int(os.environ.get("KEEPERLESS_VOLUME_MB", "320")) * MIB


@functools.lru_cache(maxsize=256)
def _template(value_bytes: int, records: int) -> bytes:
    # never zero: a crash test zero-fills the lost tail, and a tail of zeros over
    # values of zeros is the same bytes - no torn batch to find (hypothesis drew
    # 1,530,096-byte values, a multiple of 251)
    value = bytes([1 + value_bytes % 251]) * value_bytes
    return build_batch([(None, value, [])] * records, timestamp_ms=1_000)


@dataclass(frozen=True, slots=True)
class Written:
    base_offset: int
    last_offset: int
    size: int
    crc: int


# value sizes from 1 B to several MiB: small batches by the thousand, big ones few
_small = st.tuples(st.integers(1, 2_000), st.integers(1, 3_000), st.integers(1, 5))
_medium = st.tuples(st.integers(2_000, 300_000), st.integers(1, 200), st.integers(1, 3))
_large = st.tuples(st.integers(MIB, 6 * MIB), st.integers(1, 12), st.just(1))
RUNS = st.lists(st.one_of(_small, _medium, _large), min_size=1, max_size=40)


def _runs_to_volume(runs: list[tuple[int, int, int]], volume: int) -> list[tuple[int, int, int]]:
    """Repeat the drawn runs until they pass ``volume`` bytes."""
    out: list[tuple[int, int, int]] = []
    total = 0
    while total < volume:
        for value_bytes, count, records in runs:
            out.append((value_bytes, count, records))
            total += len(_template(value_bytes, records)) * count
            if total >= volume:
                break
    return out


def _write(plog: PartitionLog, runs: list[tuple[int, int, int]]) -> list[Written]:
    written: list[Written] = []
    for value_bytes, count, records in runs:
        template = _template(value_bytes, records)
        # a produce request's worth at a time (at most ~16 MiB), as a broker appends
        per_append = max(1, min(count, (16 * MIB) // len(template)))
        left = count
        while left:
            n = min(per_append, left)
            buf = bytearray(template * n)
            headers = []
            for i in range(n):
                pos = i * len(template)
                patch_offsets(buf, pos, plog.log_end_offset + i * records, 0)
                h = read_header(buf, pos)
                headers.append((pos, h))
                written.append(Written(h.base_offset, h.last_offset, h.size, h.crc))
            plog.append(buf, headers, 1_000)
            left -= n
    return written


def _read_all(plog: PartitionLog) -> list[Written]:
    out: list[Written] = []
    offset = plog.log_start_offset
    while (sl := plog.read(offset, 4 * MIB)) is not None:
        data = sl.read()
        got = []
        for _pos, h in iter_batches(data[: _whole(data)]):
            got.append(Written(h.base_offset, h.last_offset, h.size, h.crc))
        assert got, f"a read at offset {offset} returned no whole batch"
        out.extend(got)
        offset = got[-1].last_offset + 1
    return out


def _whole(data: bytes) -> int:
    """The length of the whole batches at the start of a read that may end in one."""
    pos = 0
    while pos + 61 <= len(data):
        size = read_header(data, pos).size
        if pos + size > len(data):
            break
        pos += size
    return pos


def _segments(d: Path) -> list[Path]:
    return sorted(d.glob("*.log"))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    # shrinking a case of hundreds of MB takes longer than finding it: the failing
    # example is printed as drawn
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    runs=RUNS,
    volume_mb=st.integers(3 * SCAN_WINDOW_BYTES // MIB + 1, VOLUME_BYTES // MIB),
    segment_mb=st.sampled_from([1024, 64, 3 * SCAN_WINDOW_BYTES // MIB]),
    crash_at=st.floats(0.0, 1.0),
    zero_fill=st.booleans(),
)
def test_a_reopened_log_holds_exactly_its_complete_valid_prefix(
    tmp_path_factory: object,
    runs: list[tuple[int, int, int]],
    volume_mb: int,
    segment_mb: int,
    crash_at: float,
    zero_fill: bool,
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(dir=os.environ.get("KEEPERLESS_TEST_TMP")) as tmp:
        d = Path(tmp) / "t-0"
        config = LogConfig(segment_bytes=segment_mb * MIB)
        plog = PartitionLog(d, config, 0)
        written = _write(plog, _runs_to_volume(runs, volume_mb * MIB))
        end = plog.log_end_offset
        plog.close()

        # a clean close: everything back, nothing truncated
        again = PartitionLog(d, config, 0)
        assert again.truncated_bytes == 0
        assert again.log_end_offset == end
        assert _read_all(again) == written
        again.close()

        # a crash: the active segment's unsynced tail lost at a random byte (or, as some
        # filesystems leave it, zeros where it was); exactly the whole batches before it
        active = _segments(d)[-1]
        size = active.stat().st_size
        cut = int(size * crash_at)
        if zero_fill:
            with open(active, "rb") as f:
                f.seek(cut)
                lost = f.read()
            # zeros where zeros were lose nothing (a batch's last byte is its last
            # record's header count, 0: a crash that zeroes only that byte is no crash)
            assume(any(lost))
        os.truncate(active, cut)
        if zero_fill:
            with open(active, "ab") as f:
                f.write(bytes(size - cut))
        base = int(active.name[:20])
        kept = [w for w in written if w.base_offset < base]
        pos = 0
        for w in written:
            if w.base_offset < base:
                continue
            if pos + w.size > cut:
                break
            kept.append(w)
            pos += w.size
        crashed = PartitionLog(d, config, 0)
        assert crashed.truncated_bytes == (size if zero_fill else cut) - pos
        assert _read_all(crashed) == kept
        assert crashed.log_end_offset == (kept[-1].last_offset + 1 if kept else base)
        crashed.close()


def test_a_corrupt_batch_past_the_first_window_cuts_the_log_there_and_says_why(
    tmp_path: Path, caplog: object
) -> None:
    """A CRC failure is reported as one (not as a torn write), at its position."""
    import logging

    d = tmp_path / "t-0"
    plog = PartitionLog(d, LogConfig(), 0)
    written = _write(plog, [(10_000, 3 * SCAN_WINDOW_BYTES // 10_000, 1)])
    plog.close()
    seg = _segments(d)[0]
    # flip a byte of a record inside the batch that straddles the second window's end
    target = next(
        i
        for i, w in enumerate(written)
        if sum(x.size for x in written[: i + 1]) > 2 * SCAN_WINDOW_BYTES
    )
    pos = sum(w.size for w in written[:target])
    with open(seg, "r+b") as f:
        f.seek(pos + 100)
        b = f.read(1)
        f.seek(pos + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    caplog.set_level(logging.WARNING)  # type: ignore[attr-defined]
    again = PartitionLog(d, LogConfig(), 0)
    assert _read_all(again) == written[:target]
    text = caplog.text  # type: ignore[attr-defined]
    assert f"at position {pos} " in text
    assert "CRC mismatch" in text
    assert "unclean shutdown" not in text
    again.close()


def test_the_issue_23_repro_12000_records_of_1_kib_all_come_back(tmp_path: Path) -> None:
    """One record per batch, 12,000 of 1,000 bytes (~12.7 MB), a clean close: all back."""
    d = tmp_path / "t-0"
    plog = PartitionLog(d, LogConfig(), 0)
    written = _write(plog, [(1_000, 12_000, 1)])
    assert sum(w.size for w in written) > SCAN_WINDOW_BYTES
    plog.close()
    again = PartitionLog(d, LogConfig(), 0)
    assert again.truncated_bytes == 0
    assert again.log_end_offset == 12_000
    assert _read_all(again) == written


# -- the metadata log -----------------------------------------------------------------


def _entry(base: int, epoch: int, value_bytes: int, records: int) -> Entry:
    buf = bytearray(_template(value_bytes, records))
    patch_offsets(buf, 0, base, epoch)
    h = read_header(buf)
    return Entry(base, h.last_offset, epoch, bytes(buf), False)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    # shrinking a case of hundreds of MB takes longer than finding it: the failing
    # example is printed as drawn
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(runs=RUNS, volume_mb=st.integers(3 * SCAN_WINDOW_BYTES // MIB + 1, 64))
def test_the_metadata_log_reopens_with_every_entry(
    runs: list[tuple[int, int, int]], volume_mb: int
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(dir=os.environ.get("KEEPERLESS_TEST_TMP")) as tmp:
        d = Path(tmp) / "__cluster_metadata-0"
        rlog = FileRaftLog(d, segment_bytes=1024 * MIB)
        entries: list[Entry] = []
        epoch = 1
        for i, (value_bytes, count, records) in enumerate(_runs_to_volume(runs, volume_mb * MIB)):
            epoch += i % 2
            for _ in range(count):
                e = _entry(rlog.end_offset, epoch, min(value_bytes, 256 * 1024), records)
                rlog.append([e])
                entries.append(e)
        rlog.flush()
        end = rlog.end_offset
        rlog.close()
        again = FileRaftLog(d, segment_bytes=1024 * MIB)
        assert again.plog.truncated_bytes == 0
        assert again.end_offset == end
        assert again.read(0, len(entries) + 1) == entries
        assert again.last_epoch() == epoch
        again.close()


def test_dump_log_prints_every_batch_past_every_window_and_names_a_torn_tail(
    tmp_path: Path,
) -> None:
    import io

    from keeperless.tools.dump_log import dump_file

    d = tmp_path / "t-0"
    plog = PartitionLog(d, LogConfig(), 0)
    written = _write(plog, [(300_000, 30, 1), (1_000, 5_000, 2), (3 * MIB, 4, 1)] * 2)
    plog.close()
    seg = _segments(d)[0]
    assert seg.stat().st_size > 3 * SCAN_WINDOW_BYTES
    out = io.StringIO()
    assert dump_file(seg, out, False, False, False)
    assert out.getvalue().count("baseOffset: ") == len(written)
    os.truncate(seg, seg.stat().st_size - 10)
    out = io.StringIO()
    assert not dump_file(seg, out, False, False, False)
    text = out.getvalue()
    assert text.count("baseOffset: ") == len(written) - 1
    last = sum(w.size for w in written[:-1])
    assert f"at position {last}: incomplete batch" in text


def test_a_clean_stop_is_marked_and_a_torn_tail_after_it_blames_the_disk(
    tmp_path: Path, caplog: object
) -> None:
    """Kafka's .kafka_cleanshutdown: written when every log was flushed at a stop,
    removed at start; the recovery warning tells a crash's torn tail from one found
    after a clean stop."""
    import logging
    import uuid

    from keeperless.broker.partition_manager import PartitionManager
    from keeperless.metadata.image import PartitionInfo
    from keeperless.storage.partition_dirs import CLEAN_SHUTDOWN_FILE

    tid = uuid.uuid4()
    info = PartitionInfo((1,), (1,), 1, 0, 0)

    def start() -> PartitionManager:
        pm = PartitionManager(1, tmp_path, LogConfig())
        pm.ensure("t", 0, tid, info, LogConfig(), 0)
        return pm

    pm = start()
    p = pm.get("t", 0)
    assert p is not None
    _write(p.log, [(1_000, 10, 1)])
    pm.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    seg = _segments(tmp_path / "t-0")[0]
    os.truncate(seg, seg.stat().st_size - 1)
    caplog.set_level(logging.WARNING)  # type: ignore[attr-defined]
    pm = start()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # until the next clean stop
    assert "although the last shutdown was clean" in caplog.text  # type: ignore[attr-defined]
    p = pm.get("t", 0)
    assert p is not None
    assert p.log.log_end_offset == 9
    # a crash (no close): the next start does not know the stop was clean
    os.truncate(seg, seg.stat().st_size - 1)
    caplog.clear()  # type: ignore[attr-defined]
    start()
    assert "as a crash or power loss leaves" in caplog.text  # type: ignore[attr-defined]


def test_a_damaged_older_segment_ends_the_log_there(tmp_path: Path, caplog: object) -> None:
    """A header no valid batch has inside an older segment (found by the header scan):
    the log ends at that batch and the later segments go, as Kafka's recovery does - not
    a hole a consumer would silently skip."""
    import logging

    d = tmp_path / "t-0"
    config = LogConfig(segment_bytes=SCAN_WINDOW_BYTES)
    plog = PartitionLog(d, config, 0)
    written = _write(plog, [(200_000, 20, 1)] * 7)  # appends of 4 MB: 3+ segments
    plog.close()
    segs = _segments(d)
    assert len(segs) >= 3
    damaged = segs[1]
    base = int(damaged.name[:20])
    in_segment = [w for w in written if w.base_offset >= base]
    pos = in_segment[0].size + in_segment[1].size  # the third batch of the segment
    with open(damaged, "r+b") as f:
        f.seek(pos + 16)  # its magic byte
        f.write(b"\x07")
    caplog.set_level(logging.WARNING)  # type: ignore[attr-defined]
    again = PartitionLog(d, config, 0)
    assert again.log_end_offset == in_segment[2].base_offset
    assert _segments(d) == segs[:2]
    assert _read_all(again) == [w for w in written if w.base_offset < in_segment[2].base_offset]
    assert "unsupported record batch magic 7" in caplog.text  # type: ignore[attr-defined]
    assert "deleting" in caplog.text  # type: ignore[attr-defined]
    again.close()


def test_a_batch_failing_its_crc_past_the_recovery_point_ends_the_log_there(
    tmp_path: Path, caplog: object
) -> None:
    """Past the recovery point every segment's CRCs are verified, not only the last
    one's: a rolled segment is made durable after its roll (storage/sealing.py), so a
    power loss can leave it damaged with a whole header and a later segment beside it."""
    import logging

    d = tmp_path / "t-0"
    config = LogConfig(segment_bytes=SCAN_WINDOW_BYTES)
    plog = PartitionLog(d, config, 0)
    written = _write(plog, [(200_000, 20, 1)] * 7)
    plog.close()
    segs = _segments(d)
    assert len(segs) >= 3
    base = int(segs[1].name[:20])
    in_segment = [w for w in written if w.base_offset >= base]
    pos = in_segment[0].size + in_segment[1].size  # the third batch of the segment
    with open(segs[1], "r+b") as f:
        f.seek(pos + in_segment[2].size // 2)  # a record's byte, not its header's
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    caplog.set_level(logging.WARNING)  # type: ignore[attr-defined]
    again = PartitionLog(d, config, 0, recovery_point=base)  # (segment 0 trusted)
    assert again.log_end_offset == in_segment[2].base_offset
    assert _segments(d) == segs[:2]
    assert "CRC mismatch" in caplog.text  # type: ignore[attr-defined]
    again.close()


def test_dump_log_shows_a_batch_failing_its_crc_as_invalid_and_goes_on(tmp_path: Path) -> None:
    """As Kafka's tool: the damaged batch is printed with isvalid: false, the batches
    after it still printed (a helper found the dump stopping at the first bad one)."""
    import io

    from keeperless.tools.dump_log import dump_file

    d = tmp_path / "t-0"
    plog = PartitionLog(d, LogConfig(), 0)
    written = _write(plog, [(300_000, 40, 1)])
    plog.close()
    seg = _segments(d)[0]
    bad = 31  # a batch past the first window
    pos = sum(w.size for w in written[:bad])
    with open(seg, "r+b") as f:
        f.seek(pos + 1_000)
        f.write(b"\xff\xfe")
    out = io.StringIO()
    assert not dump_file(seg, out, False, False, True)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("baseOffset: ")]
    assert len(lines) == len(written)
    assert [ln.endswith("isvalid: false") for ln in lines].count(True) == 1
    assert lines[bad].endswith("isvalid: false")
    assert f"position: {pos} " in lines[bad]
    assert "Found 1 batch(es) failing their CRC" in out.getvalue()
