"""Idempotent producers' state survives what the log goes through: a restart and a
truncation rebuild it from every segment, not only the active one (the fault harness
found retries appended twice after a broker forgot a producer whose last batch was in
an older segment: 160 duplicates, seed 9001 combined)."""

from __future__ import annotations

import uuid
from pathlib import Path

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
