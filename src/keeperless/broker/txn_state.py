"""A partition's transactions as Kafka's log keeps them: the first offset of each
producer's open transaction (what bounds the last stable offset) and the aborted
transactions (what a read_committed consumer is told to skip).

Transaction markers are control batches of one record: key (version int16 0, type int16:
0 ABORT, 1 COMMIT), value (version int16 0, coordinator epoch int32)."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Collection
from dataclasses import dataclass, field

from keeperless.protocol.control import ABORT, COMMIT, control_type
from keeperless.protocol.records import BatchHeader, build_batch, decode_records

__all__ = [
    "ABORT",
    "COMMIT",
    "PartitionTxns",
    "marker_batch",
    "marker_coordinator_epoch",
    "marker_epoch",
    "marker_type",
]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
) -> bytes:
    """A COMMIT or ABORT marker of one producer's transaction (offsets assigned later)."""
    return build_batch(
        [(_KEY.pack(0, COMMIT if commit else ABORT), _VALUE.pack(0, coordinator_epoch), ())],
        timestamp_ms=now_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        control=True,
        transactional=True,
    )


def marker_type(batch: bytes | memoryview) -> int | None:
    """ABORT or COMMIT for a transaction marker batch; None for other control records."""
    for rec in decode_records(batch):
        try:
            kind = control_type(rec)
        except ValueError:
            return None
        return kind if kind in (ABORT, COMMIT) else None
    return None


def marker_coordinator_epoch(batch: bytes | memoryview) -> int:
    """The coordinator epoch a marker batch carries (-1 if none)."""
    for rec in decode_records(batch):
        return marker_epoch(rec.value)
    return -1


def marker_epoch(value: bytes | None) -> int:
    """The coordinator epoch in a marker record's value (-1 if it has none)."""
    if value is None or len(value) < _VALUE.size:
        return -1
    return int(_VALUE.unpack_from(value, 0)[1])


@dataclass(slots=True)
class PartitionTxns:
    # producer id -> first offset of its open transaction
    ongoing: dict[int, int] = field(default_factory=dict)
    # (last offset: the ABORT marker's, producer id, first offset), by last offset
    aborted: list[tuple[int, int, int]] = field(default_factory=list)

    def clear(self) -> None:
        self.ongoing.clear()
        self.aborted.clear()

    def note_batch(self, h: BatchHeader, base_offset: int) -> None:
        """A transactional data batch written at ``base_offset``."""
        if h.is_transactional and not h.is_control and h.producer_id >= 0:
            self.ongoing.setdefault(h.producer_id, base_offset)

    def note_marker(self, producer_id: int, kind: int | None, offset: int) -> int | None:
        """A marker at ``offset`` ends the producer's open transaction: its first offset
        (None if it had none open here)."""
        first = self.ongoing.pop(producer_id, None)
        if kind == ABORT and first is not None:
            bisect.insort(self.aborted, (offset, producer_id, first))
        return first

    def first_unstable(self) -> int | None:
        return min(self.ongoing.values(), default=None)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions with records in
        [start, end): what a read_committed fetch from ``start`` must skip."""
        i = bisect.bisect_left(self.aborted, (start, -1, -1))
        return [(pid, first) for last, pid, first in self.aborted[i:] if first < end]

    def aborted_batch(self, producer_id: int, offset: int) -> bool:
        """Whether a transactional batch of ``producer_id`` at ``offset`` belongs to an
        aborted transaction: one of that producer's that began at or before it and whose
        ABORT marker comes after it (a later, committed transaction of the same producer
        is not aborted)."""
        i = bisect.bisect_left(self.aborted, (offset, -1, -1))
        return any(pid == producer_id and first <= offset for _last, pid, first in self.aborted[i:])

    def forget_before(self, offset: int) -> None:
        """Retention or DeleteRecords moved the log start past these."""
        i = bisect.bisect_left(self.aborted, (offset, -1, -1))
        del self.aborted[:i]

    def forget_markers(self, offsets: Collection[int]) -> None:
        """The cleaner removed these ABORT markers (and every record of their
        transactions): no fetch lists their transactions again - a reader told of an
        aborted transaction whose marker is gone skips the producer's later committed
        batches, waiting for a marker that never comes."""
        if offsets:
            gone = set(offsets)
            self.aborted[:] = [a for a in self.aborted if a[0] not in gone]
