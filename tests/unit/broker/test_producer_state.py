"""Idempotent producers' state survives what the log goes through: a restart and a
truncation rebuild it from every segment, not only the active one (the fault harness
found retries appended twice after a broker forgot a producer whose last batch was in
an older segment: 160 duplicates, seed 9001 combined)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import Partition
from keeperless.protocol.records import build_batch
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
