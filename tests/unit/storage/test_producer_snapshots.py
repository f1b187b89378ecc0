"""Producer state kept across restarts in Kafka's files (issue 16): ``<offset>.snapshot``
written at a segment roll and at a clean shutdown, ``.txnindex`` beside each segment
listing the transactions aborted in it; recovery starts from the newest usable snapshot
and re-derives what lies past it."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import crc32c
import pytest
from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import Partition
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.records import build_batch
from keeperless.storage.log import LogConfig
from keeperless.storage.producer_files import (
    AbortedTxn,
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    decode_txn_index,
    encode_snapshot,
    snapshot_offsets,
    snapshot_path,
)

TID = uuid.uuid4()
BIG = 1 << 20


def _partition(d: Path, segment_bytes: int = 1 << 30) -> Partition:
    p = Partition("t", 0, TID, d / "t-0", LogConfig(segment_bytes=segment_bytes), 0)
    p.node_id = 1
    p.on_info(PartitionInfo((1,), (1,), 1, 0, 0), 0)
    return p


def _batch(pid: int, seq: int, n: int = 1, txn: bool = False, pad: int = 0) -> bytes:
    return build_batch(
        [(b"k", b"v" * (pad + 1), ()) for _ in range(n)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        transactional=txn,
    )


def test_the_snapshot_file_is_kafkas_layout() -> None:
    e = SnapshotEntry(7, 2, 41, 100, 4, 1_700_000_000_000, 3, -1)
    data = encode_snapshot([e])
    version, crc = struct.unpack_from(">hI", data, 0)
    assert version == 1
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">i", data, 6) == (1,)
    assert len(data) == 6 + 4 + 46  # int64 int16 int32 int64 int32 int64 int32 int64
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 2, 41, 100, 4, 1_700_000_000_000, 3, -1)
    assert decode_snapshot(data) == [e]
    bad = bytearray(data)
    bad[20] ^= 1
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(bytes(bad))


def test_producers_survive_the_retention_of_their_last_segment(tmp_path: Path) -> None:
    """Producer 5's only batch is in the first segment; producer 6 rolls the log on, then
    retention deletes that segment. After a restart, 5's retried batch is still a
    duplicate (answered with its first offset) and its next sequence still follows on:
    the state came from a snapshot, not from the (deleted) log."""
    p = _partition(tmp_path, segment_bytes=600)
    assert p.append(_batch(5, 0), 0, BIG, 0).base_offset == 0
    for seq in range(6):
        assert p.append(_batch(6, seq, pad=200), 0, BIG, 0).error == ErrorCode.none
    snaps = snapshot_offsets(p.directory)
    assert snaps, "no snapshot at a roll"
    assert snaps[0] > 0, snaps  # one per roll, at the new segment's base
    p.log.config = LogConfig(segment_bytes=600, retention_bytes=0)
    before = snapshot_offsets(p.directory)
    p.enforce_retention(0)
    assert p.log.log_start_offset > 0
    # the snapshots of the deleted segments went with them, as Kafka's do
    assert snapshot_offsets(p.directory) == [o for o in before if o >= p.log.log_start_offset]
    assert len(snapshot_offsets(p.directory)) < len(before)
    p.close()
    q = _partition(tmp_path, segment_bytes=600)
    again = q.append(_batch(5, 0), 0, BIG, 0)
    assert (again.error, again.base_offset) == (ErrorCode.none, 0)  # the duplicate
    gap = q.append(_batch(5, 2), 0, BIG, 0)
    assert gap.error == ErrorCode.out_of_order_sequence_number
    assert q.append(_batch(5, 1), 0, BIG, 0).error == ErrorCode.none


def test_a_clean_shutdown_snapshots_at_the_log_end(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append(_batch(9, 0, n=3), 0, BIG, 0)
    p.append(_batch(10, 0, txn=True), 0, BIG, 0)
    leo = p.log.log_end_offset
    p.close()
    assert snapshot_offsets(p.directory) == [leo]
    entries = {
        e.producer_id: e for e in decode_snapshot(snapshot_path(p.directory, leo).read_bytes())
    }
    assert (entries[9].last_sequence, entries[9].last_offset, entries[9].offset_delta) == (2, 2, 2)
    assert entries[9].current_txn_first_offset == -1
    assert entries[10].current_txn_first_offset == 3  # open: it holds the LSO
    q = _partition(tmp_path)
    assert q.last_stable_offset == 3


def test_aborted_transactions_are_indexed_beside_their_segment(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append(_batch(1, 0, n=2, txn=True), 0, BIG, 0)  # 0-1
    p.append(_batch(2, 0, n=2, txn=True), 0, BIG, 0)  # 2-3
    assert p.append_marker(1, 0, False, 5, 0).base_offset == 4  # 1 aborts; 2 still open
    assert p.append_marker(2, 0, True, 5, 0).base_offset == 5
    index = p.directory / "00000000000000000000.txnindex"
    assert decode_txn_index(index.read_bytes()) == [AbortedTxn(1, 0, 4, 2)]
    raw = index.read_bytes()
    assert len(raw) == 34
    assert struct.unpack(">hqqqq", raw) == (0, 1, 0, 4, 2)
    p.close()
    # the restart replays nothing (the snapshot is at the log end): the aborted list
    # read_committed fetches need comes from the index
    q = _partition(tmp_path)
    assert q.txns.aborted_between(0, 10) == [(1, 0)]


def test_an_unclean_restart_replays_past_the_snapshot_and_rewrites_the_index(
    tmp_path: Path,
) -> None:
    p = _partition(tmp_path, segment_bytes=600)
    p.append(_batch(1, 0, txn=True, pad=300), 0, BIG, 0)  # 0
    p.append_marker(1, 0, False, 0, 0)  # 1: aborted, in the first segment
    p.append(_batch(3, 0, pad=300), 0, BIG, 0)  # 2: rolls (snapshot at 2)
    p.append(_batch(1, 1, txn=True), 0, BIG, 0)  # 3
    assert snapshot_offsets(p.directory) == [2]
    second = p.directory / "00000000000000000002.txnindex"
    second.write_bytes(AbortedTxn(99, 2, 3, 4).encode())  # stale: no such marker
    p.log.close()  # a crash: no shutdown snapshot
    q = _partition(tmp_path, segment_bytes=600)
    assert q.txns.aborted_between(0, 10) == [(1, 0)]  # from the first segment's index
    assert q.txns.ongoing == {1: 3}  # replayed past the snapshot
    assert not second.exists()  # re-derived: nothing was aborted there
    q.append_marker(1, 0, False, 0, 0)
    assert decode_txn_index(second.read_bytes()) == [AbortedTxn(1, 3, 4, 5)]


def test_a_corrupt_snapshot_is_deleted_and_an_older_state_used(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append(_batch(4, 0), 0, BIG, 0)
    p.close()
    path = snapshot_path(p.directory, 1)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    q = _partition(tmp_path)
    assert not path.exists()
    assert q.append(_batch(4, 0), 0, BIG, 0).base_offset == 0  # still a duplicate
    assert q.append(_batch(4, 1), 0, BIG, 0).base_offset == 1


def test_truncation_drops_later_snapshots_and_index_entries(tmp_path: Path) -> None:
    p = _partition(tmp_path, segment_bytes=420)
    p.append(_batch(1, 0, txn=True, pad=250), 0, BIG, 0)  # 0
    p.append(_batch(2, 0, pad=250), 0, BIG, 0)  # 1: rolls (snapshot at 1)
    p.append_marker(1, 0, False, 0, 0)  # 2
    p.append(_batch(2, 1, pad=250), 0, BIG, 0)  # 3: rolls (snapshot at 3)
    assert snapshot_offsets(p.directory) == [1, 3]
    assert p.txns.aborted_between(0, 10) == [(1, 0)]
    p.truncate_to(2)  # the marker is gone: producer 1's transaction is open again
    assert snapshot_offsets(p.directory) == [1]
    assert p.txns.aborted_between(0, 10) == []
    assert p.txns.ongoing == {1: 0}
    assert all(not decode_txn_index(f.read_bytes()) for f in p.directory.glob("*.txnindex"))
    # producer 2's retry of the batch the truncation removed is appended again
    assert p.append(_batch(2, 1, pad=250), 0, BIG, 0).base_offset == 2


def test_dump_log_prints_snapshots_and_transaction_indexes(tmp_path: Path) -> None:
    import io

    from keeperless.tools.dump_log import dump_file

    p = _partition(tmp_path)
    p.append(_batch(1, 0, n=2, txn=True), 0, BIG, 0)
    p.append_marker(1, 0, False, 3, 0)
    p.append(_batch(2, 0, n=4), 0, BIG, 0)
    p.close()
    out = io.StringIO()
    assert dump_file(p.directory / "00000000000000000000.txnindex", out, False, False, False)
    assert "producerId: 1 firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in out.getvalue()
    out = io.StringIO()
    assert dump_file(snapshot_path(p.directory, 7), out, False, False, False)
    text = out.getvalue()
    assert "producerId: 1 producerEpoch: 0 coordinatorEpoch: 3 currentTxnFirstOffset: None" in text
    assert "producerId: 2 " in text
    assert "lastSequence: 3 lastOffset: 6 offsetDelta: 3" in text
    bad = snapshot_path(p.directory, 7)
    bad.write_bytes(bad.read_bytes()[:-1])
    out = io.StringIO()
    assert not dump_file(bad, out, False, False, False)
    assert "corrupt producer snapshot" in out.getvalue()


def test_idle_producers_expire_but_not_open_transactions(tmp_path: Path) -> None:
    """producer.id.expiration.ms: a producer idle that long is forgotten, unless its
    transaction is still open here; a coordinator's transactional write without
    sequences (TxnOffsetCommit) makes its producer known (DescribeProducers)."""
    p = _partition(tmp_path)
    old = build_batch([(b"k", b"v", ())], producer_id=1, producer_epoch=0, base_sequence=0,
                      timestamp_ms=1_000)  # fmt: skip
    p.append(old, 0, BIG, 0)
    txn = build_batch([(b"k", b"v", ())], producer_id=2, producer_epoch=0, base_sequence=0,
                      transactional=True, timestamp_ms=1_000)  # fmt: skip
    p.append(txn, 0, BIG, 0)
    offsets = build_batch([(b"k", b"v", ())], producer_id=3, producer_epoch=4,
                          transactional=True, timestamp_ms=1_000)  # fmt: skip
    p.append(offsets, 0, BIG, 0)
    assert 3 in p.producers
    assert p.state.remove_expired(now_ms=100_000, expiration_ms=10_000) == 1
    assert sorted(p.producers) == [2, 3]  # 2 and 3 have transactions open here
    p.append_marker(2, 0, True, 0, 0)
    assert p.state.remove_expired(now_ms=100_000, expiration_ms=10_000) == 1
    assert sorted(p.producers) == [3]


def test_an_unclean_restart_rebuilds_the_producers_from_a_segment_past_every_window(
    tmp_path: Path,
) -> None:
    """The producers' state replayed from the recovery scan of a segment of several read
    windows (issue 23's audit): a retry of the last batch is still known as a duplicate,
    and the producer's next sequence is accepted."""
    from keeperless.storage.batch_scan import SCAN_WINDOW_BYTES

    p = _partition(tmp_path)
    seq = 0
    while p.log.size_bytes < 3 * SCAN_WINDOW_BYTES:
        for pid in (5, 6):  # two producers, their batches interleaved
            assert p.append(_batch(pid, seq, n=3, pad=100_000), 0, BIG, 0).error == ErrorCode.none
        seq += 3
    last_offset = p.log.log_end_offset - 3
    p.log.close()  # a crash: no shutdown snapshot, the whole segment replayed
    q = _partition(tmp_path)
    retry = q.append(_batch(6, seq - 3, n=3, pad=100_000), 0, BIG, 0)
    assert (retry.error, retry.base_offset) == (ErrorCode.none, last_offset)
    assert q.log.log_end_offset == last_offset + 3  # not appended again
    assert q.append(_batch(5, seq, n=1), 0, BIG, 0).error == ErrorCode.none
    gap = q.append(_batch(6, seq + 5, n=1), 0, BIG, 0)
    assert gap.error == ErrorCode.out_of_order_sequence_number


def test_an_unclean_restart_keeps_the_aborted_transactions_indexed_before_its_snapshot(
    tmp_path: Path,
) -> None:
    """Recovery replays from a snapshot inside the active segment and rewrites that
    segment's .txnindex: the aborts indexed before the snapshot must stay in it (they
    were dropped, and the next restart's leader served the aborted records to
    read_committed consumers as committed - the fault harness's txn-duplicate at volume,
    seed 2310: a roll, then a power loss)."""
    p = _partition(tmp_path)
    p.append(_batch(1, 0, txn=True), 0, BIG, 0)  # 0
    p.append_marker(1, 0, False, 0, 0)  # 1: aborted
    p.close()  # clean: a snapshot at 2, in the same segment
    q = _partition(tmp_path)
    q.append(_batch(2, 0, txn=True), 0, BIG, 0)  # 2
    q.append_marker(2, 0, False, 0, 0)  # 3: aborted, after the snapshot
    q.log.close()  # a crash: the next start replays from 2 and rewrites the index
    r = _partition(tmp_path)
    assert r.txns.aborted_between(0, 10) == [(1, 0), (2, 2)]
    r.log.close()  # and again
    s = _partition(tmp_path)
    assert s.txns.aborted_between(0, 10) == [(1, 0), (2, 2)]
    index = s.directory / "00000000000000000000.txnindex"
    assert decode_txn_index(index.read_bytes()) == [AbortedTxn(1, 0, 1, 2), AbortedTxn(2, 2, 3, 4)]


def test_a_roll_makes_its_segment_durable_off_the_event_loop_before_its_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an event loop running, a roll returns at once and the rolled segment is
    fsynced in a worker, as Kafka's roll schedules its flush; the snapshot at the new
    segment's base (the recovery point a start trusts the segments below) is written
    only after, and not at all if the log was truncated meanwhile. A flush meanwhile
    fsyncs the rolled segment too."""
    import asyncio
    import os
    import threading

    import keeperless.storage.sealing as log_mod

    started, release = threading.Event(), threading.Event()
    real_durable, real_fsync = log_mod._make_durable, os.fsync
    synced: list[int] = []  # the inodes fsynced

    def held(fd: int, dir_fd: int, names: list[str]) -> None:
        started.set()
        assert release.wait(10)
        real_durable(fd, dir_fd, names)

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(log_mod, "_make_durable", held)
    monkeypatch.setattr(os, "fsync", fsync)

    async def until_snapshots(p: Partition, want: list[int]) -> None:
        for _ in range(1000):
            if snapshot_offsets(p.directory) == want:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"snapshots {snapshot_offsets(p.directory)}, not {want}")

    async def run() -> None:
        p = _partition(tmp_path, segment_bytes=420)
        p.append(_batch(1, 0, pad=250), 0, BIG, 0)  # 0
        first = os.stat(p.directory / "00000000000000000000.log").st_ino
        p.append(_batch(1, 1, pad=250), 0, BIG, 0)  # 1: rolls
        assert started.wait(10)
        assert first not in synced  # (not on the loop)
        assert snapshot_offsets(p.directory) == []  # no recovery point past it yet
        p.log.flush()
        assert first in synced  # a flush makes it durable meanwhile
        release.set()
        await until_snapshots(p, [1])
        assert p.producers[1].last_seq == 1
        # a truncation while the next roll's segment is made durable: no snapshot there
        started.clear()
        release.clear()
        p.append(_batch(1, 2, pad=250), 0, BIG, 0)  # 2: rolls
        assert started.wait(10)
        p.truncate_to(2)
        release.set()
        for _ in range(50):  # (the worker done and its answer on the loop)
            await asyncio.sleep(0.01)
        assert not p.log._sealing  # (nothing pending)
        assert snapshot_offsets(p.directory) == [1]
        p.append(_batch(1, 2, pad=250), 0, BIG, 0)  # 2 again: rolls again
        await until_snapshots(p, [1, 2])
        p.persist()
        assert snapshot_offsets(p.directory) == [1, 2, 3]
        p.close()

    asyncio.run(run())


def test_delete_records_takes_the_snapshots_of_the_segments_it_deletes(tmp_path: Path) -> None:
    p = _partition(tmp_path, segment_bytes=420)
    for seq in range(5):
        p.append(_batch(1, seq, pad=250), 0, BIG, 0)  # a segment each
    assert snapshot_offsets(p.directory) == [1, 2, 3, 4]
    assert p.advance_start(3, 0)
    assert p.log.first_segment_base == 3
    assert snapshot_offsets(p.directory) == [3, 4]
    p.close()
