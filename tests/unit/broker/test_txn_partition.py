"""A partition's transactions (issue 16): the last stable offset stops at the first open
transaction, markers end them, aborted ones are listed for read_committed readers, and
all of it is the same after a restart and on a follower."""

from __future__ import annotations

import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import Partition
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.records import build_batch, iter_batches
from keeperless.storage.log import LogConfig

TID = uuid.uuid4()


def _partition(d: Path, leader: int = 1) -> Partition:
    p = Partition("t", 0, TID, d / "t-0", LogConfig(), 0)
    p.node_id = 1
    p.on_info(PartitionInfo((1,), (1,), leader, 0, 0), 0)
    return p


def _txn(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return build_batch(
        [(b"k", b"v%d" % i, ()) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def _read_committed(p: Partition) -> int:
    sl = p.read(0, 1 << 20, committed=True)
    return 0 if sl is None else max(h.last_offset + 1 for _, h in iter_batches(sl.read()))


def test_the_lso_waits_for_the_first_open_transaction(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    assert p.append(build_batch([(b"k", b"plain", ())]), 0, 1 << 20, 0).error == ErrorCode.none
    assert p.append(_txn(7, 0), 0, 1 << 20, 0).base_offset == 1  # offsets 1-2
    assert p.append(_txn(8, 0), 0, 1 << 20, 0).base_offset == 3  # offsets 3-4
    assert p.append(_txn(7, 2), 0, 1 << 20, 0).base_offset == 5  # 7 goes on: 5-6
    assert p.high_watermark == 7
    assert p.last_stable_offset == 1
    assert _read_committed(p) == 1  # only the plain record
    assert p.append_marker(7, 0, True, 0, 0).base_offset == 7  # 7 commits
    assert p.last_stable_offset == 3  # 8 is still open
    assert p.append_marker(8, 0, False, 0, 0).base_offset == 8  # 8 aborts
    assert p.last_stable_offset == 9
    assert p.txns.aborted_between(0, 9) == [(8, 3)]
    assert p.txns.aborted_between(9, 20) == []  # ended before the fetch's start
    assert _read_committed(p) == 9
    p.log.close()
    # the same after a restart: rebuilt from the log
    q = _partition(tmp_path)
    assert q.txns.aborted_between(0, 9) == [(8, 3)]
    assert q.txns.ongoing == {}
    assert q.append(_txn(9, 0), 0, 1 << 20, 0).base_offset == 9
    q.log.close()
    r = _partition(tmp_path)
    assert r.last_stable_offset == 9  # an open transaction survives a restart too
    r.log.close()


def test_a_follower_tracks_transactions_from_what_it_replicates(tmp_path: Path) -> None:
    leader = _partition(tmp_path / "a")
    leader.append(_txn(5, 0), 0, 1 << 20, 0)
    leader.append_marker(5, 0, False, 3, 0)
    leader.append(_txn(6, 0), 0, 1 << 20, 0)
    sl = leader.read(0, 1 << 20, for_replica=True)
    assert sl is not None
    follower = _partition(tmp_path / "b", leader=2)
    follower.append_replica(sl.read(), 0)
    assert follower.txns.aborted_between(0, 10) == [(5, 0)]
    assert follower.txns.ongoing == {6: 3}
    # and after a truncation below the open transaction's start, it is gone
    follower.truncate_to(3)
    assert follower.txns.ongoing == {}
    assert follower.txns.aborted_between(0, 10) == [(5, 0)]
    leader.log.close()
    follower.log.close()


def test_markers_fence_older_epochs_and_clients_cannot_write_them(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append(_txn(7, 0, epoch=1), 0, 1 << 20, 0)
    # the coordinator aborted it with a bumped epoch (a timed-out transaction)
    assert p.append_marker(7, 2, False, 0, 0).error == ErrorCode.none
    late = p.append(_txn(7, 2, epoch=1), 0, 1 << 20, 0)
    assert late.error == ErrorCode.invalid_producer_epoch  # the zombie is fenced
    assert p.append_marker(7, 1, True, 0, 0).error == ErrorCode.invalid_producer_epoch
    assert p.append(_txn(7, 0, epoch=2), 0, 1 << 20, 0).error == ErrorCode.none
    control = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", ())], control=True)
    assert p.append(control, 0, 1 << 20, 0).error == ErrorCode.invalid_record
    p.log.close()


def test_the_lso_is_never_below_the_log_start(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append(_txn(7, 0), 0, 1 << 20, 0)  # open from offset 0
    p.append(build_batch([(b"k", b"x", ())] * 3), 0, 1 << 20, 0)
    assert p.last_stable_offset == 0
    p.advance_start(2, 0)  # DeleteRecords past the transaction's start
    assert p.last_stable_offset == 2
    p.log.close()


def test_only_the_batches_of_aborted_transactions_are_aborted() -> None:
    """A producer's committed transaction after its aborted one is not aborted (a
    read_committed share group skipped it: every committed record between two aborted
    transactions was never delivered)."""
    from keeperless.broker.txn_state import ABORT, COMMIT, PartitionTxns
    from keeperless.protocol.records import read_header

    txns = PartitionTxns()

    def txn(pid: int, first: int, last: int, kind: int) -> None:
        batch = build_batch([(b"k", b"v", ())] * (last - first + 1), producer_id=pid,
                            producer_epoch=0, base_sequence=0, transactional=True)  # fmt: skip
        txns.note_batch(read_header(batch), first)
        txns.note_marker(pid, kind, last + 1)

    txn(7, 0, 9, COMMIT)
    txn(7, 11, 20, ABORT)
    txn(7, 22, 30, COMMIT)
    txn(8, 32, 35, ABORT)
    assert [txns.aborted_batch(7, o) for o in (0, 11, 20, 22, 30)] == [
        False, True, True, False, False]  # fmt: skip
    assert txns.aborted_batch(8, 32)
    assert not txns.aborted_batch(8, 11)  # another producer's aborted range
