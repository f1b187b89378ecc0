"""Idempotent producers' state survives what the log goes through: a restart and a
truncation rebuild it from every segment, not only the active one (the fault harness
found retries appended twice after a broker forgot a producer whose last batch was in
an older segment: 160 duplicates, seed 9001 combined)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import Partition
from keeperless.protocol.records import build_batch
from keeperless.storage.epochs import LeaderEpochCache
from keeperless.storage.log import LogConfig

TID = uuid.uuid4()
CONFIG = LogConfig(segment_bytes=400)  # a few batches per segment


def _partition(tmp_path: Path) -> Partition:
    return Partition("t", 0, TID, tmp_path / "t-0", CONFIG, 0)


def _batch(pid: int, seq: int) -> bytes:
    return build_batch(
        [(None, b"v%d-%d" % (pid, seq), ())],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
    )


def test_a_producer_from_an_older_segment_is_remembered(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    assert p.append(_batch(7, 0), 0, 2**20, 0).base_offset == 0
    for seq in range(20):  # another producer rolls several segments
        p.append(_batch(8, seq), 0, 2**20, 0)
    assert len(list(tmp_path.glob("t-0/*.log"))) > 2
    p.log.close()
    again = _partition(tmp_path)  # a restart
    retry = again.append(_batch(7, 0), 0, 2**20, 0)
    assert (retry.error, retry.base_offset) == (ErrorCode.none, 0), "appended twice"
    gap = again.append(_batch(7, 5), 0, 2**20, 0)
    assert gap.error == ErrorCode.out_of_order_sequence_number
    # a truncation keeps it too
    end = again.log.log_end_offset
    again.truncate_to(end - 1)
    retry = again.append(_batch(7, 0), 0, 2**20, 0)
    assert (retry.error, retry.base_offset) == (ErrorCode.none, 0)
    again.log.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean-shutdown", "killed"])
def test_a_restart_keeps_each_producers_last_five_batches(tmp_path: Path, clean: bool) -> None:
    """librdkafka keeps 5 requests in flight and retries the first after a restart:
    a broker that remembers only a producer's last batch (what one snapshot entry
    holds) answers OUT_OF_ORDER_SEQUENCE_NUMBER to a retry of the one before, which
    librdkafka takes for a fatal desynchronisation (fault harness, seed 101 split: the
    producer died after all brokers were stopped and started)."""
    p = _partition(tmp_path)
    offsets = [p.append(_batch(7, seq), 0, 2**20, 0).base_offset for seq in range(12)]
    rolled = max(int(f.stem) for f in tmp_path.glob("t-0/*.snapshot"))
    assert 7 < rolled < 12, "the last roll is not among the last five batches"
    if clean:
        assert p.close()
    else:
        p.log.close()
    again = _partition(tmp_path)
    for seq in range(7, 12):  # each of the last five, retried: the original offset
        retry = again.append(_batch(7, seq), 0, 2**20, 0)
        assert (retry.error, retry.base_offset) == (ErrorCode.none, offsets[seq]), seq
    older = again.append(_batch(7, 6), 0, 2**20, 0)  # Kafka's window is five batches
    assert older.error == ErrorCode.out_of_order_sequence_number
    assert again.append(_batch(7, 12), 0, 2**20, 0).base_offset == offsets[-1] + 1
    again.log.close()


def test_a_never_written_partition_takes_a_first_batch_only_at_sequence_zero(
    tmp_path: Path,
) -> None:
    """KAFKA-15591: two batches in flight to a just created partition, the first refused
    NOT_LEADER_OR_FOLLOWER before the leadership was applied, the second taken: the
    first's retries were out of order for good. A written partition still takes an
    unknown producer's batch at any sequence (KIP-360)."""
    p = _partition(tmp_path)
    gap = p.append(_batch(7, 17), 0, 2**20, 0)
    assert gap.error == ErrorCode.out_of_order_sequence_number
    assert p.log.log_end_offset == 0, "the refused batch was written"
    assert p.append(_batch(7, 0), 0, 2**20, 0).error == ErrorCode.none
    assert p.append(_batch(8, 17), 0, 2**20, 0).error == ErrorCode.none
    p.log.close()


def _epoch_batch(epoch: int) -> bytes:
    return build_batch([(None, b"e%d" % epoch, ())], leader_epoch=epoch)


@pytest.mark.parametrize("lost", ["newest-entry", "torn-file"])
def test_the_leader_epochs_survive_a_checkpoint_the_power_loss_cut(
    tmp_path: Path, lost: str
) -> None:
    """A new epoch's checkpoint is written without an fsync: after a power loss it may
    lack the newest epoch or be torn. The epochs of the batches recovered past the last
    roll are assigned again at the start (and a torn file is rebuilt from the log)."""
    p = _partition(tmp_path)
    for epoch in (1, 1, 2, 2, 3):
        p.append(_epoch_batch(epoch), epoch, 2**20, 0)
    expected = list(p.epochs.entries)
    assert [e for e, _ in expected] == [1, 2, 3]
    p.log.close()  # killed: no clean-stop flush
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    if lost == "newest-entry":
        checkpoint.write_text("0\n2\n" + "".join(f"{e} {o}\n" for e, o in expected[:2]))
    else:
        checkpoint.write_text("0\n3\n1 0")
    again = _partition(tmp_path)
    assert again.epochs.entries == expected
    assert LeaderEpochCache(tmp_path / "t-0").entries == expected, "not saved again"
    again.log.close()


@pytest.mark.parametrize("point", ["roll", "clean-stop"])
def test_the_leader_epochs_are_durable_at_each_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """The batches below a roll's snapshot or a clean stop are not read again at the
    next start: the epochs they began must be on disk by then."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    p = _partition(tmp_path)
    p.append(_epoch_batch(1), 1, 2**20, 0)
    monkeypatch.setattr(os, "fsync", fsync)
    if point == "roll":
        while len(list((tmp_path / "t-0").glob("*.log"))) < 2:
            p.append(_epoch_batch(1), 1, 2**20, 0)
        p.log.close()
    else:
        assert p.close()
    assert any("leader-epoch-checkpoint" in s for s in synced), synced
