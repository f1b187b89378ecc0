"""The log cleaner's file side (issue 15): exactly the latest value per key kept, at its
offset; tombstones gone after delete.retention.ms; batches, timestamps and headers as
they were; a producer's last batch kept; a crash at any step of a swap recovered."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keeperless.protocol.records import build_batch, decode_records, iter_batches, patch_offsets
from keeperless.storage.cleaner import (
    CleanJob,
    CleanResult,
    SegmentToClean,
    clean_partition,
    txn_index_path,
)
from keeperless.storage.log import LogConfig, PartitionLog

NOW = 10_000_000
DAY = 86_400_000


def _append(log: PartitionLog, records: list[tuple[bytes | None, bytes | None]], ts: int,
            pid: int = -1, seq: int = -1, transactional: bool = False) -> None:  # fmt: skip
    buf = bytearray(
        build_batch([(k, v, [("h", b"x")]) for k, v in records], timestamp_ms=ts,
                    producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                    transactional=transactional)
    )  # fmt: skip
    patch_offsets(buf, 0, log.log_end_offset, 3)
    log.append(bytes(buf), list(iter_batches(buf)), ts)


def _marker(log: PartitionLog, pid: int, commit: bool) -> int:
    """A transaction marker of ``pid`` (epoch 0) appended: its offset."""
    from keeperless.broker.txn_state import marker_batch

    at = log.log_end_offset
    buf = bytearray(marker_batch(pid, 0, commit, 0, NOW))
    patch_offsets(buf, 0, at, 3)
    log.append(bytes(buf), list(iter_batches(buf)), NOW)
    return at


def _markers(directory: Path) -> list[int]:
    """The offsets of the control batches in the directory's segments."""
    out = []
    for seg in sorted(directory.glob("*.log")):
        raw = seg.read_bytes()
        out += [h.base_offset for _, h in iter_batches(raw) if h.is_control]
    return out


def _records(directory: Path) -> list[tuple[int, bytes | None, bytes | None, int]]:
    out = []
    for seg in sorted(directory.glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(data):
            assert h.partition_leader_epoch == 3
            for r in decode_records(data[pos : pos + h.size]):
                assert r.headers == (("h", b"x"),)
                out.append((r.offset, r.key, r.value, r.timestamp))
    return out


def _job(
    log: PartitionLog, first_dirty: int = 0, entries: int = 10**6, max_bytes: int = 2**31 - 1
) -> CleanJob:
    segs = tuple(
        SegmentToClean(path, base, size, ts, end)
        for path, base, size, ts, end in log.cleanable_segments(log.log_end_offset)
    )
    return CleanJob(
        "t-0", segs, first_dirty, DAY, entries, max_segment_bytes=max_bytes,
        index_interval_bytes=log.config.index_interval_bytes,
    )  # fmt: skip


def _swap_all(log: PartitionLog, res: CleanResult, generation: int | None = None) -> bool:
    """Swap every cleaned group in; whether all went in."""
    gen = log.generation if generation is None else generation
    return all(
        [
            log.swap_in([(s.base_offset, s.size) for s in group], cleaned, NOW, gen, built)
            for (group, cleaned), built in zip(res.swaps, res.indexes, strict=True)
        ]
    )


def _clean(
    log: PartitionLog, first_dirty: int = 0, entries: int = 10**6, max_bytes: int = 2**31 - 1
) -> int:
    res = clean_partition(_job(log, first_dirty, entries, max_bytes), NOW)
    assert _swap_all(log, res)
    return res.map_end


def test_the_latest_value_of_each_key_stays_at_its_offset(tmp_path: Path) -> None:
    rng = random.Random(5)
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=600), 0)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    old = NOW - 2 * DAY  # tombstones this old go; younger ones stay
    for i in range(300):
        k = b"k%d" % rng.randrange(20)
        v = None if rng.random() < 0.1 else b"v%d" % i
        ts = old if i < 200 else NOW
        latest[k] = (log.log_end_offset, v)
        _append(log, [(k, v)], ts)
    before = {off: (k, v) for off, k, v, _ in _records(tmp_path)}
    active_base = int(sorted(tmp_path.glob("*.log"))[-1].name[:20])
    _clean(log)
    after = _records(tmp_path)
    offsets = [o for o, *_ in after]
    assert offsets == sorted(offsets), "offsets stay in order"
    for off, k, v, _ in after:
        assert before[off] == (k, v), "a kept record keeps its offset"
    kept = {}
    for off, k, v, _ in after:
        if off < active_base and latest[k][0] < active_base:
            # replaced in a cleaned segment: gone (a replacement in the active segment,
            # which is not cleaned, is not in the map yet: the old value stays till then)
            assert latest[k][0] == off, f"{k!r} at {off} was replaced at {latest[k][0]}"
        kept[k] = (off, v)
    for k, (off, v) in latest.items():
        if v is not None or off >= active_base:
            assert kept[k] == (off, v), k  # every key's latest value is there
    assert len(after) < len(before)
    # tombstones: removed when old, kept when recent (written after the 200th record)
    for off, _k, v, ts in after:
        if v is None and off < active_base:
            assert ts == NOW
    # the log reads the same after a restart
    log.close()
    again = PartitionLog(tmp_path, LogConfig(segment_bytes=600), 0)
    assert again.log_end_offset == 300
    sl = again.read(0, 10**6)
    assert sl is not None
    first = next(iter_batches(sl.read()))[1]
    assert first.base_offset == after[0][0]
    again.close()


def test_a_producers_last_batch_is_kept_and_batches_are_kept_whole(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)
    _append(log, [(b"a", b"1"), (b"b", b"1")], NOW, pid=7, seq=0)  # offsets 0-1
    _append(log, [(b"a", b"2"), (b"c", b"1")], NOW, pid=7, seq=2)  # 2-3
    _append(log, [(b"a", b"3"), (b"b", b"2"), (b"c", b"2")], NOW)  # 4-6, replaces 7's
    for i in range(6):
        _append(log, [(b"z%d" % i, b"x")], NOW)
    _clean(log)
    data = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("*.log")))
    batches = [h for _, h in iter_batches(data)]
    by_base = {h.base_offset: h for h in batches}
    assert 0 not in by_base  # producer 7's first batch: all replaced
    kept = by_base[2]  # its last batch: kept, emptied, its sequences known
    assert (kept.record_count, kept.last_offset_delta, kept.producer_id, kept.base_sequence) == (
        0,
        1,
        7,
        2,
    )
    assert by_base[4].record_count == 3  # untouched: copied as it was


def test_a_full_offset_map_cleans_in_several_rounds(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=400), 0)
    for i in range(60):
        _append(log, [(b"k%d" % (i % 25), b"v%d" % i)], NOW)
    end = _clean(log, entries=10)  # room for 10 keys: the first rounds stop early
    assert 0 < end < 50
    ends = [end]
    while ends[-1] < log.cleanable_segments(60)[-1][1]:
        ends.append(_clean(log, first_dirty=ends[-1], entries=10))
        assert ends[-1] > ends[-2], ends
    final = _records(tmp_path)
    assert len(final) < 60


class _Crash(BaseException):
    """The process dies here (not an OSError: the log must not take it for a disk's)."""


def _crash_at_each_step(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prepare: Callable[[Path], tuple[PartitionLog, CleanResult]],
    check: Callable[[Path, int, bool], None],
) -> int:
    """Swap ``prepare``'s cleaned copies in, the process dying before the n-th rename or
    deletion for n = 0, 1, ... until a swap completes; ``check`` (directory, step,
    whether it crashed) runs on the directory as a restart finds it. The steps that
    crashed."""
    import os

    real_replace, real_unlink = os.replace, Path.unlink
    step = 0
    while True:
        d = tmp_path / str(step)
        log, res = prepare(d)
        ops = [0]

        def counted(real: Any, ops: list[int] = ops, step: int = step) -> Any:
            def op(*args: Any, **kwargs: Any) -> Any:
                ops[0] += 1
                if ops[0] > step:
                    raise _Crash
                return real(*args, **kwargs)

            return op

        monkeypatch.setattr(os, "replace", counted(real_replace))
        monkeypatch.setattr(Path, "unlink", counted(real_unlink))
        crashed = False
        try:
            _swap_all(log, res)
        except _Crash:
            crashed = True
        finally:
            monkeypatch.setattr(os, "replace", real_replace)
            monkeypatch.setattr(Path, "unlink", real_unlink)
        log.close()
        check(d, step, crashed)
        if not crashed:
            return step
        step += 1


def test_a_crash_at_each_step_of_a_swap_leaves_whole_segments_and_every_abort_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments cleaned into one are swapped in by renames and deletions; a crash
    before each of them, and a restart, finds either the old segments or the cleaned
    one (the segments it replaced gone: those starting within its offsets), never part
    of either, and the aborted transactions indexed beside the old segments indexed
    still, once each (the group's indexes are merged beside the copy)."""

    from keeperless.storage.producer_files import AbortedTxn, append_txn_index
    from keeperless.storage.segment import segment_name

    def build(d: Path) -> tuple[PartitionLog, set[AbortedTxn]]:
        log = PartitionLog(d, LogConfig(segment_bytes=300), 0)
        for i in range(20):
            _append(log, [(b"k%d" % (i % 3), b"v%d" % i)], NOW)
        aborts = set()
        for n, (_p, base, _s, _t, _e) in enumerate(log.cleanable_segments(20)[:3]):
            a = AbortedTxn(100 + n, base, base, base)
            append_txn_index(d / segment_name(base, ".txnindex"), a)
            aborts.add(a)
        return log, aborts

    ref, aborts = build(tmp_path / "ref")
    before = _records(tmp_path / "ref")
    res = clean_partition(_job(ref, max_bytes=700), NOW)
    assert len(res.swaps[0][0]) > 1  # segments cleaned into one
    assert _swap_all(ref, res)
    after = _records(tmp_path / "ref")
    assert after != before
    assert Counter(ref.aborted_txns()) == Counter(aborts)
    ref.close()

    def prepare(d: Path) -> tuple[PartitionLog, CleanResult]:
        log, _ = build(d)
        return log, clean_partition(_job(log, max_bytes=700), NOW)

    def check(d: Path, step: int, crashed: bool) -> None:
        again = PartitionLog(d, LogConfig(segment_bytes=300), 0)
        assert not list(d.glob("*.cleaned")), step
        assert not list(d.glob("*.swap")), step
        # the cleaned copy, or the old segments; or (a crash once the copy is in) the
        # copy and old segments past its last record: none lost, none out of order
        now = _records(d)
        assert set(after) <= set(now) <= set(before), step
        assert [r[0] for r in now] == sorted({r[0] for r in now}), step
        assert Counter(again.aborted_txns()) == Counter(aborts), step
        assert again.log_end_offset == 20
        again.close()

    step = _crash_at_each_step(tmp_path, monkeypatch, prepare, check)
    assert step >= 5  # (renames and deletions: each one crashed before)


def test_a_segment_that_changed_meanwhile_is_not_swapped(tmp_path: Path) -> None:
    """Not the size that was cleaned; or any truncation since the cleaning started: its
    offset map saw records that are gone (a key's older value would be lost with the
    newer one)."""
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)
    for i in range(20):
        _append(log, [(b"k%d" % (i % 3), b"v%d" % i)], NOW)
    res = clean_partition(_job(log, max_bytes=700), NOW)
    group, cleaned = res.swaps[0]
    assert len(group) > 1
    for k in range(len(group)):  # any segment of the group not as it was cleaned
        sizes = [(s.base_offset, s.size + (i == k)) for i, s in enumerate(group)]
        assert not log.swap_in(sizes, cleaned, NOW, log.generation)
        assert not cleaned.exists()
        assert not txn_index_path(group[0].path, ".cleaned").exists()
        res = clean_partition(_job(log, max_bytes=700), NOW)
        group, cleaned = res.swaps[0]
    for half in tmp_path.glob("*.cleaned"):
        half.unlink()
    res = clean_partition(_job(log), NOW)
    before = log.generation
    log.truncate_to(18)
    assert not _swap_all(log, res, before)
    assert not list(tmp_path.glob("*.cleaned"))
    log.close()


def test_records_of_aborted_transactions_are_not_values_and_go(tmp_path: Path) -> None:
    """A key's latest record written by an aborted transaction does not replace its
    committed value (the committed one stays) and is removed; markers stay."""
    from dataclasses import replace

    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)

    def txn(records: list[tuple[bytes | None, bytes | None]], pid: int, seq: int) -> None:
        _append(log, records, NOW, pid, seq, transactional=True)

    def marker(pid: int, commit: bool) -> int:
        return _marker(log, pid, commit)

    _append(log, [(b"a", b"committed-a"), (b"b", b"committed-b")], NOW)  # offsets 0-1
    txn([(b"a", b"aborted-a")], 9, 0)  # 2
    aborted_at = marker(9, commit=False)  # 3
    txn([(b"b", b"new-b")], 8, 0)  # 4
    marker(8, commit=True)  # 5
    for i in range(8):  # roll past them
        _append(log, [(b"pad%d" % i, b"p" * 40)], NOW)
    job = replace(_job(log), aborted=((9, 2, aborted_at),))
    res = clean_partition(job, NOW)
    assert _swap_all(log, res)
    data = []
    for seg in sorted(tmp_path.glob("*.log")):
        raw = seg.read_bytes()
        for pos, h in iter_batches(raw):
            if h.is_control:
                data.append((h.base_offset, "marker"))
                continue
            for r in decode_records(raw[pos : pos + h.size]):
                data.append((r.offset, (r.key, r.value)))
    assert (0, (b"a", b"committed-a")) in data  # not replaced by the aborted write
    assert not [d for d in data if d[1] == (b"a", b"aborted-a")]
    assert (1, (b"b", b"committed-b")) not in data  # replaced by a committed write
    assert (4, (b"b", b"new-b")) in data
    assert [o for o, d in data if d == "marker"] == [3, 5]
    log.close()


def test_a_segment_past_every_read_window_is_cleaned_whole(tmp_path: Path) -> None:
    """Segments of several windows (batches straddling each boundary) are cleaned
    batch by batch: every key's latest value stays, in a copy written as it is read."""
    from keeperless.storage.batch_scan import SCAN_WINDOW_BYTES

    log = PartitionLog(tmp_path, LogConfig(segment_bytes=4 * SCAN_WINDOW_BYTES), 0)
    value = b"v" * 99_999
    i = 0
    while log.size_bytes < 3 * SCAN_WINDOW_BYTES:
        _append(log, [(b"k%d" % (i % 7), value + b"%d" % i)] * 3, NOW)
        i += 1
    _append(log, [(b"end", b"x")], NOW)
    log._roll(NOW)  # the written segment is no longer the active one
    _clean(log)
    got = _records(tmp_path)
    assert [k for _, k, _, _ in got] == [b"k%d" % (j % 7) for j in range(i - 7, i)] + [b"end"]
    assert got[-2][2] == value + b"%d" % (i - 1)


def test_a_corrupt_segment_is_not_cleaned_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A batch failing its CRC past the first window: the cleaning fails (a cleaned copy
    would silently lose what follows it) and no half-written copy is left."""
    import pytest

    from keeperless.protocol.records import CorruptBatchError
    from keeperless.storage.batch_scan import SCAN_WINDOW_BYTES

    log = PartitionLog(tmp_path, LogConfig(segment_bytes=4 * SCAN_WINDOW_BYTES), 0)
    i = 0
    while log.size_bytes < 2 * SCAN_WINDOW_BYTES:
        _append(log, [(b"k%d" % (i % 3), b"v" * 50_000)], NOW)
        i += 1
    log._roll(NOW)
    seg = sorted(tmp_path.glob("*.log"))[0]
    with open(seg, "r+b") as f:
        f.seek(seg.stat().st_size - 1000)
        f.write(b"\xff")
    with pytest.raises(CorruptBatchError, match="CRC mismatch"):
        clean_partition(_job(log), NOW)
    assert not list(tmp_path.glob("*.cleaned"))


def test_compressed_batches_and_keys_of_every_length_keep_exactly_the_latest(
    tmp_path: Path,
) -> None:
    """Records read by aiokafka's compiled reader, cut out of a batch by their lengths
    when only some stay; keys shorter than a digest are the map's keys themselves, longer
    ones digests: with keys of 1 to 40 bytes in gzip batches of 7 records, exactly each
    key's latest record stays, byte for byte, and the others go."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(7)
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=2000), 0)
    keys = [bytes([65 + i]) * n for i, n in enumerate((1, 5, 15, 16, 17, 31, 40))]
    raw_before: dict[int, tuple[bytes, bytes, tuple[tuple[str, bytes], ...]]] = {}
    for _ in range(60):
        b = DefaultRecordBatchBuilder(2, 1, 0, -1, -1, -1, 1 << 20)  # gzip
        for i in range(7):
            k = rng.choice(keys)
            v = b"%s-%d" % (k[:3], log.log_end_offset + i)
            b.append(i, timestamp=NOW, key=k, value=v, headers=[("h", b"x")])
            raw_before[log.log_end_offset + i] = (k, v, (("h", b"x"),))
        buf = bytearray(b.build())
        patch_offsets(buf, 0, log.log_end_offset, 3)
        log.append(bytes(buf), list(iter_batches(buf)), NOW)
    active_base = int(sorted(tmp_path.glob("*.log"))[-1].name[:20])
    _clean(log)
    after = {}
    for seg in sorted(tmp_path.glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(data):
            for r in decode_records(data[pos : pos + h.size]):
                after[r.offset] = (r.key, r.value, r.headers)
    cleaned = {o: rec for o, rec in after.items() if o < active_base}
    # the map covers the cleaned segments: each key keeps its latest record there
    last_clean = {}
    for o, (k, _v, _h) in sorted(raw_before.items()):
        if o < active_base:
            last_clean[k] = o
    assert sorted(cleaned) == sorted(last_clean.values())
    for o, rec in after.items():
        assert raw_before[o] == rec  # byte for byte: key, value, headers


def test_records_that_do_not_parse_under_a_valid_crc_are_a_corrupt_segment(
    tmp_path: Path,
) -> None:
    """A batch whose CRC checks but whose records do not parse (a record's length
    pointing past the batch) stops the cleaning as a corrupt segment (the broker then
    leaves the partition uncleaned and serves it as it is), nothing half-written left."""
    import struct

    import crc32c
    import pytest

    from keeperless.protocol.records import CorruptBatchError

    log = PartitionLog(tmp_path, LogConfig(segment_bytes=10**6), 0)
    for i in range(5):
        _append(log, [(b"k", b"v%d" % i), (b"j", b"w")], NOW)
    log._roll(NOW)
    seg = sorted(tmp_path.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    (size,) = struct.unpack_from(">i", data, 8)
    data[61] = 0x7E  # the first record's length: 63 bytes, past its batch
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21 : 12 + size])))
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptBatchError, match="records do not parse"):
        clean_partition(_job(log), NOW)
    assert not list(tmp_path.glob("*.cleaned"))


def test_records_without_a_key_go_as_in_kafkas_cleaner(tmp_path: Path) -> None:
    """A topic made compacted after records without a key were written: Kafka's cleaner
    counts them invalid and drops them; the keyed records beside them in the same batch
    stay as the map says, and a batch of nothing but keyless records goes whole."""
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=10**6), 0)
    _append(log, [(None, b"a"), (b"k", b"1"), (None, b"b")], NOW)  # 0-2
    _append(log, [(None, b"c"), (None, b"d")], NOW)  # 3-4: nothing keyed
    _append(log, [(b"j", b"2")], NOW)  # 5
    log._roll(NOW)
    _append(log, [(None, b"e")], NOW)  # 6: the active segment, not cleaned
    _clean(log)
    assert [(o, k, v) for o, k, v, _ in _records(tmp_path)] == [
        (1, b"k", b"1"),
        (5, b"j", b"2"),
        (6, None, b"e"),
    ]


def test_a_header_key_that_is_not_utf8_is_cleaned_like_any_record(tmp_path: Path) -> None:
    """aiokafka's reader decodes header keys and refuses one that is not UTF-8; Kafka's
    cleaner never looks at it: such a batch is read the slower way, not taken for a
    corrupt segment (which would leave the topic uncleaned for good). Found by a
    fresh-eyes review."""
    import struct

    import crc32c

    def bad_header(key: bytes, value: bytes) -> bytes:
        b = bytearray(build_batch([(key, value, [("Z", b"x")])], timestamp_ms=NOW))
        b[b.rindex(b"Z")] = 0xFF  # header key b"\xff": not UTF-8
        struct.pack_into(">I", b, 17, crc32c.crc32c(memoryview(b)[21:]))
        return bytes(b)

    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)
    for i in range(20):
        batch = bad_header(b"k1", b"v%d" % i) if i in (3, 19) else build_batch(
            [(b"k%d" % (i % 2), b"v%d" % i, [("h", b"x")])], timestamp_ms=NOW)  # fmt: skip
        buf = bytearray(batch)
        patch_offsets(buf, 0, log.log_end_offset, 3)
        log.append(bytes(buf), list(iter_batches(buf)), NOW)
    res = clean_partition(_job(log), NOW)
    assert res.records_kept < res.records_read
    for _group, cleaned in res.swaps:
        cleaned.unlink()
    log.close()


def test_consecutive_segments_are_cleaned_into_one_up_to_segment_bytes(tmp_path: Path) -> None:
    """Kafka's grouping: a compacted log's segments are merged while their sizes before
    cleaning add up to no more than segment.bytes, so that cleaning does not leave the
    log in ever more, ever smaller segments; the merged segment is read like any."""
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)
    for i in range(60):
        _append(log, [(b"k%d" % (i % 7), b"v%d" % i)], NOW)
    before = _records(tmp_path)
    segments = log.cleanable_segments(60)
    res = clean_partition(_job(log, max_bytes=1000), NOW)
    for group, _ in res.swaps:
        assert sum(s.size for s in group) <= 1000
    assert any(len(group) > 1 for group, _ in res.swaps)
    assert _swap_all(log, res)
    after = log.cleanable_segments(60)
    assert len(after) == len(res.swaps) < len(segments)
    latest = {k: (o, v) for o, k, v, _ in before}
    kept = {(o, k, v) for o, k, v, _ in _records(tmp_path)}
    assert {(o, k, v) for k, (o, v) in latest.items()} <= kept
    # each kept record is read from the log at its offset, through the merged segments
    for o, k, v in sorted(kept):
        got = log.read(o, 1 << 20)
        assert got is not None
        found = [(r.offset, r.key, r.value) for r in decode_records(got.read())]
        assert (o, k, v) in found, o
    # cleaned again (nothing dirty): the groups merge further, none past the limit
    assert _clean(log, first_dirty=res.map_end, max_bytes=1000) == res.map_end
    assert {(o, k, v) for o, k, v, _ in _records(tmp_path)} == kept
    log.close()


def test_segments_are_grouped_only_when_consecutive_and_within_relative_offsets() -> None:
    from keeperless.storage.cleaner import group_segments

    def seg(base: int, size: int, end: int) -> SegmentToClean:
        return SegmentToClean(Path(f"{base:020d}.log"), base, size, 0, end)

    a, b, c = seg(0, 400, 10), seg(10, 400, 20), seg(20, 400, 30)
    assert group_segments([a, b, c], 800) == [(a, b), (c,)]
    assert group_segments([a, b, c], 1200) == [(a, b, c)]
    assert group_segments([a, b, c], 399) == [(a,), (b,), (c,)]  # (each alone anyway)
    unknown = seg(10, 400, -1)
    assert group_segments([a, unknown], 2000) == [(a,), (unknown,)]
    far = seg(10, 1, 2**31 + 1)  # would not fit the first's 32-bit relative offsets
    assert group_segments([a, far], 2000) == [(a,), (far,)]
    gap = seg(15, 1, 20)  # not where the group ends
    assert group_segments([a, gap], 2000) == [(a,), (gap,)]


def test_the_copys_indexes_built_as_it_is_written_are_those_a_read_of_it_builds(
    tmp_path: Path,
) -> None:
    """The cleaner builds the copy's offset and time indexes as it writes it (off the
    event loop), and the log takes them instead of reading the copy's batches again:
    they must be exactly what reading it builds (a restart reads it)."""
    rng = random.Random(5)
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=2000, index_interval_bytes=300), 0)
    for i in range(200):  # batches of 3: some kept whole, some cut (rebuilt), some gone
        _append(log, [(b"k%d" % rng.randrange(150), b"v%d" % i + b"x" * rng.randrange(40))
                      for _ in range(3)], NOW + rng.randrange(-1000, 1000))  # fmt: skip
    res = clean_partition(_job(log, max_bytes=6000), NOW)
    assert any(len(group) > 1 for group, _ in res.swaps)
    for (_group, cleaned), built_index in zip(res.swaps, res.indexes, strict=True):
        assert built_index.size == cleaned.stat().st_size  # (else the log reads it)
    assert _swap_all(log, res)

    def state(log: PartitionLog) -> list[Any]:
        return [
            (s.base_offset, s.index, s.time_index, s.next_offset, s.max_timestamp,
             s.bytes_since_index, (s.dir / f"{s.base_offset:020d}.index").read_bytes(),
             (s.dir / f"{s.base_offset:020d}.timeindex").read_bytes())
            for s in log._segments[:-1]
            if s.size  # (an emptied copy spans its old offsets until a restart)
        ]  # fmt: skip

    built = state(log)
    assert sum(len(s[1]) for s in built) > len(built)  # several index entries
    log.close()
    again = PartitionLog(tmp_path, LogConfig(segment_bytes=2000, index_interval_bytes=300), 0)
    assert state(again) == built
    again.close()


def test_transaction_markers_go_a_pass_after_their_records_past_delete_retention(
    tmp_path: Path,
) -> None:
    """Kafka's cleaner: a marker stays while any batch of its transaction does (a
    read_committed reader needs it to decide them); once they are gone, it goes in a
    later pass if its segment is older than delete.retention.ms and it is not its
    producer's last batch - an ABORT marker with its transaction index entry. Before,
    markers were never removed and a compacted topic written by transactions kept one
    per transaction for ever."""
    from keeperless.storage.producer_files import AbortedTxn

    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)

    def txn(key: bytes, pid: int, seq: int) -> None:
        _append(log, [(key, b"in-txn")], NOW, pid, seq, transactional=True)

    def marker(pid: int, commit: bool) -> int:
        return _marker(log, pid, commit)

    txn(b"a", 7, 0)  # 0: committed, replaced below
    committed = marker(7, commit=True)  # 1
    txn(b"b", 8, 0)  # 2: aborted
    aborted = marker(8, commit=False)  # 3
    log.append_aborted(AbortedTxn(8, 2, aborted, 0))
    txn(b"c", 7, 1)  # 4: pid 7's next transaction, committed: its records stay
    kept = marker(7, commit=True)  # 5
    txn(b"e", 9, 0)  # 6: pid 9's only transaction, replaced below
    last = marker(9, commit=True)  # 7: pid 9's last batch: it stays (its sequence)
    _append(log, [(b"a", b"plain"), (b"e", b"plain")], NOW)  # 8-9: replace a and e
    for i in range(12):  # roll past them
        _append(log, [(b"pad%d" % i, b"p" * 40)], NOW)
    # pid 8's last batch would be its marker, and pid 7's the one kept for its
    # records: another transaction of each, later
    txn(b"d", 8, 1)
    marker(8, commit=True)
    txn(b"f", 7, 2)
    marker(7, commit=True)
    for i in range(12):
        _append(log, [(b"pad%d" % i, b"q" * 40)], NOW)

    def markers() -> list[int]:
        return _markers(tmp_path)

    def clean(now: int) -> None:
        from dataclasses import replace

        res = clean_partition(replace(_job(log), aborted=((8, 2, aborted),)), now)
        assert _swap_all(log, res)

    before = markers()
    for _ in range(2):  # within delete.retention.ms: the records go, every marker stays
        clean(NOW)
        assert markers() == before
        assert [a.last_offset for a in log.aborted_txns()] == [aborted]
    clean(NOW + 2 * DAY)  # the records went in the pass before; now their markers go
    after = markers()
    assert committed not in after
    assert aborted not in after
    assert kept in after  # its transaction's record (c) is still there
    assert last in after
    assert log.aborted_txns() == []  # the aborted transaction's index entry went with it
    assert set(before) - set(after) == {committed, aborted}
    log.close()


def test_cleaning_the_first_records_does_not_move_the_log_start(tmp_path: Path) -> None:
    """Kafka keeps logStartOffset where it was when the cleaner empties the start of the
    first segment: a reader at a removed offset gets the next record kept, not
    OFFSET_OUT_OF_RANGE (which reset a consumer with auto.offset.reset=latest to the end).
    Found by review: the start was the cleaned copy's first batch."""
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)
    for i in range(20):
        _append(log, [(b"k%d" % (i % 3), b"v%d" % i)], NOW)
    _clean(log)
    kept = [o for o, *_ in _records(tmp_path)]
    assert kept[0] > 3  # the first records went
    assert log.log_start_offset == 0
    got = log.read(3, 1 << 20)
    assert got is not None
    first = next(r.offset for r in decode_records(got.read()))
    assert first == min(o for o in kept if o >= 3)
    log.close()
    again = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)  # and after a restart
    assert again.log_start_offset == 0
    again.close()


def test_a_crash_at_each_step_of_a_swap_never_leaves_an_abort_whose_marker_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner removed an ABORT marker (its records went a pass before): the merged
    transaction index is empty, and a crash at any step of its swap must not leave the
    first segment's own index - listing that abort - beside the copy (found by review:
    a crash between deleting the empty .swap and the old index did)."""
    from dataclasses import replace

    from keeperless.storage.producer_files import AbortedTxn

    def build(d: Path) -> tuple[PartitionLog, int]:
        log = PartitionLog(d, LogConfig(segment_bytes=300), 0)
        _append(log, [(b"b", b"x")], NOW, 8, 0, transactional=True)
        aborted = _marker(log, 8, commit=False)
        log.append_aborted(AbortedTxn(8, 0, aborted, 0))
        for i in range(12):
            _append(log, [(b"pad%d" % i, b"p" * 40)], NOW)
        _append(log, [(b"d", b"x")], NOW, 8, 1, transactional=True)
        _marker(log, 8, commit=True)
        for i in range(12):
            _append(log, [(b"q%d" % i, b"p" * 40)], NOW)
        res = clean_partition(replace(_job(log), aborted=((8, 0, aborted),)), NOW)
        assert _swap_all(log, res)  # the aborted record goes; its marker next time
        return log, aborted

    aborted_at: list[int] = []

    def prepare(d: Path) -> tuple[PartitionLog, CleanResult]:
        log, aborted = build(d)
        aborted_at[:] = [aborted]
        job = replace(_job(log), aborted=((8, 0, aborted),))
        return log, clean_partition(job, NOW + 2 * DAY)  # its marker goes now

    def check(d: Path, step: int, crashed: bool) -> None:
        again = PartitionLog(d, LogConfig(segment_bytes=300), 0)
        present = set(_markers(d))
        assert [a for a in again.aborted_txns() if a.last_offset not in present] == [], step
        again.close()
        if not crashed:
            assert aborted_at[0] not in present  # (the marker did go)

    _crash_at_each_step(tmp_path, monkeypatch, prepare, check)


def test_a_segment_the_cleaner_emptied_does_not_hold_up_time_retention(tmp_path: Path) -> None:
    """compact,delete: a segment emptied by cleaning has no records to date it; its
    file keeps its segments' modification time (as Kafka's cleaner sets it) and time
    retention reads that, instead of stopping at it and keeping everything after it
    (found by review)."""
    import os
    import time

    now = int(time.time() * 1000)
    old = now - 10 * DAY
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300, retention_ms=7 * DAY), 0)
    for i in range(10):
        _append(log, [(b"k%d" % (i % 2), b"v%d" % i)], old)
    _append(log, [(b"k0", None)], old)
    _append(log, [(b"k1", None)], old)
    for i in range(10):
        _append(log, [(b"n%d" % i, b"x" * 30)], old)
    for seg in tmp_path.glob("*.log"):
        os.utime(seg, (old / 1000, old / 1000))  # written ten days ago
    res = clean_partition(_job(log, max_bytes=200), now)
    assert _swap_all(log, res)
    assert any(s.size == 0 for s in log._segments)  # (emptied: every key tombstoned)
    n = len(log._segments)
    assert log.enforce_retention(now) == n - 1  # all but the active one
    log.close()


def test_delete_records_into_a_gap_the_cleaner_made_keeps_the_start_asked(tmp_path: Path) -> None:
    """Kafka deletes a segment below the log start only once the next one starts at or
    below it: DeleteRecords to an offset in the gap the cleaner left at the end of the
    first segment keeps that offset as the start (the start jumped to the next
    segment's base, and a consumer between the two was told OFFSET_OUT_OF_RANGE)."""
    log = PartitionLog(tmp_path, LogConfig(segment_bytes=300), 0)
    _append(log, [(b"keep", b"v")], NOW)
    for i in range(30):
        _append(log, [(b"k%d" % (i % 3), b"v%d" % i)], NOW)  # replaced later
    _clean(log, max_bytes=300)  # each segment its own copy
    first, second = log._segments[0], log._segments[1]
    assert first.next_offset < second.base_offset  # a gap at the end of the first
    target = (first.next_offset + second.base_offset) // 2
    assert log.advance_start(target, NOW)
    assert log.log_start_offset == target
    got = log.read(target, 1 << 20)
    assert got is not None
    assert next(r.offset for r in decode_records(got.read())) >= target
    log.close()


def test_a_restart_finishes_a_swap_larger_than_three_read_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart reads a .swap's batches to find the offsets it replaces (in windows
    of SCAN_WINDOW_BYTES): a copy of more than three windows, the process dying once it
    is committed and before the old segments go, comes back as the copy alone - every
    record once, at its offset."""
    from keeperless.storage.batch_scan import SCAN_WINDOW_BYTES

    log = PartitionLog(tmp_path, LogConfig(segment_bytes=1 << 20), 0)
    value = b"v" * (64 * 1024)
    n = 3 * SCAN_WINDOW_BYTES // len(value) + 8
    for i in range(n):
        _append(log, [(b"k%d" % i, value)], NOW)  # every key once: everything is kept
    res = clean_partition(_job(log, max_bytes=1 << 30), NOW)
    (group, cleaned), built = res.swaps[0], res.indexes[0]
    assert cleaned.stat().st_size > 3 * SCAN_WINDOW_BYTES
    assert len(group) > 3

    def crash(*_a: Any, **_k: Any) -> None:
        raise _Crash

    monkeypatch.setattr(Path, "unlink", crash)  # (the old segments' deletion: the first)
    with pytest.raises(_Crash):
        log.swap_in([(s.base_offset, s.size) for s in group], cleaned, NOW, log.generation, built)
    monkeypatch.undo()
    log.close()
    assert list(tmp_path.glob("*.log.swap"))
    again = PartitionLog(tmp_path, LogConfig(segment_bytes=1 << 20), 0)
    offsets = [o for o, *_ in _records(tmp_path)]
    assert offsets == list(range(n))
    assert again.log_end_offset == n
    again.close()
