"""A partition's producer state (Kafka's ProducerStateManager): each producer's epoch
and last batches (idempotent dedupe and sequence checks), its open transaction, and the
aborted transactions — kept across restarts in ``<offset>.snapshot`` files written when
a segment rolls and at a clean shutdown, and in each segment's ``.txnindex``.

Recovery loads the newest snapshot at or below the log end and replays only the batches
from there on; truncation does the same from the newest snapshot below the truncation
point. Without a usable snapshot the whole log is replayed (what a log written before
snapshots existed gets)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from keeperless.broker.txn_state import ABORT, PartitionTxns
from keeperless.protocol.records import BatchHeader
from keeperless.storage.producer_files import (
    AbortedTxn,
    CorruptSnapshotError,
    SnapshotEntry,
    delete_snapshots,
    encode_snapshot,
    read_snapshot,
    snapshot_offsets,
    snapshot_path,
    write_snapshot,
)

__all__ = ["MAX_CACHED_BATCHES", "ProducerEntry", "ProducerState"]

log = logging.getLogger(__name__)
MAX_CACHED_BATCHES = 5  # Kafka keeps the last 5 batches per producer for dedupe


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    # first sequence -> (last sequence, base offset) of the most recent batches
    batches: OrderedDict[int, tuple[int, int]] = field(default_factory=OrderedDict)
    last_seq: int = -1
    last_ts: int = -1  # max timestamp of its last batch (DescribeProducers)
    coordinator_epoch: int = -1  # of the last transaction marker written for it


class ProducerState:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.txns = PartitionTxns()
        # producer id -> epoch whose next transaction here the coordinator verified
        # (KIP-890): void at the producer's next marker
        self.verified: dict[int, int] = {}

    def clear(self) -> None:
        self.producers.clear()
        self.txns.clear()
        self.verified.clear()

    # -- updates ----------------------------------------------------------------------

    def note_batch(self, h: BatchHeader, base_offset: int) -> None:
        """An idempotent or transactional data batch written at ``base_offset``."""
        if h.producer_id >= 0 and h.base_sequence >= 0:
            e = self.producers.get(h.producer_id)
            if e is None or e.epoch != h.producer_epoch:
                e = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch)
            e.batches[h.base_sequence] = (h.last_sequence, base_offset)
            while len(e.batches) > MAX_CACHED_BATCHES:
                e.batches.popitem(last=False)
            e.last_seq = h.last_sequence
            e.last_ts = h.max_timestamp
        if h.is_transactional and not h.is_control:
            self.txns.note_batch(h, base_offset)
            if h.producer_id not in self.producers:
                # a coordinator's transactional write without sequences (TxnOffsetCommit
                # in __consumer_offsets): the producer is known here all the same
                # (DescribeProducers, find-hanging, the snapshot)
                e = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch)
                e.last_ts = h.max_timestamp

    def note_marker(
        self, h: BatchHeader, kind: int | None, offset: int, coordinator_epoch: int
    ) -> AbortedTxn | None:
        """A marker at ``offset``; what to index if it aborted an open transaction."""
        first = self.txns.note_marker(h.producer_id, kind, offset)
        self.verified.pop(h.producer_id, None)
        e = self.producers.get(h.producer_id)
        if e is None or h.producer_epoch > e.epoch:  # a bumped epoch fences the old one
            e = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch)
        e.coordinator_epoch = coordinator_epoch
        if kind != ABORT or first is None:
            return None
        unstable = self.txns.first_unstable()
        lso = offset + 1 if unstable is None else unstable
        return AbortedTxn(h.producer_id, first, offset, lso)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle longer than ``expiration_ms`` with no open transaction
        here; how many."""
        gone = [
            pid
            for pid, e in self.producers.items()
            if pid not in self.txns.ongoing and 0 <= e.last_ts < now_ms - expiration_ms
        ]
        for pid in gone:
            del self.producers[pid]
            self.verified.pop(pid, None)
        return len(gone)

    # -- snapshots --------------------------------------------------------------------

    def entries(self) -> list[SnapshotEntry]:
        """One entry per batch a producer's duplicates are checked against, oldest
        first (Kafka writes only the last: a reader of Kafka's, taking the last entry of
        a producer id, gets what Kafka's own snapshot holds)."""
        out = []
        for pid, e in sorted(self.producers.items()):
            txn = self.txns.ongoing.get(pid, -1)
            cached = [
                (first_seq, last_seq, base) for first_seq, (last_seq, base) in e.batches.items()
            ] or [(e.last_seq, e.last_seq, -1)]
            for first_seq, last_seq, base in cached:
                delta = (last_seq - first_seq) & 0x7FFFFFFF if base >= 0 else 0
                last_offset = base + delta if base >= 0 else -1
                out.append(
                    SnapshotEntry(
                        pid,
                        e.epoch,
                        last_seq,
                        last_offset,
                        delta,
                        e.last_ts,
                        e.coordinator_epoch,
                        txn,
                    )
                )
        return out

    def take_snapshot(self, offset: int) -> None:
        """The state as of ``offset`` (every batch below it noted, none above)."""
        self.write_snapshot(offset, self.encoded())

    def encoded(self) -> bytes:
        """The state now, as a snapshot's bytes (for ``write_snapshot`` later)."""
        return encode_snapshot(self.entries())

    def write_snapshot(self, offset: int, data: bytes) -> None:
        """``data`` (``encoded`` when every batch below ``offset`` was noted, none
        above) as the snapshot at ``offset``."""
        write_snapshot(self.dir, offset, data)

    def load_snapshot(self, upto: int) -> int:
        """Start from the newest usable snapshot at or below ``upto`` (deleting those
        above it and corrupt ones); the offset to replay the log from (0 without one)."""
        self.clear()
        delete_snapshots(self.dir, above=upto)
        for offset in reversed(snapshot_offsets(self.dir)):
            path = snapshot_path(self.dir, offset)
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as err:
                log.warning("Deleting corrupt producer snapshot %s: %s", path, err)
                path.unlink(missing_ok=True)
                continue
            for s in entries:  # a producer's batches oldest first, its last one last
                e = self.producers.get(s.producer_id)
                if e is None or e.epoch != s.epoch:
                    e = self.producers[s.producer_id] = ProducerEntry(s.epoch)
                e.last_seq, e.last_ts = s.last_sequence, s.timestamp
                e.coordinator_epoch = s.coordinator_epoch
                if s.last_offset >= 0 and s.last_sequence >= 0:
                    first_seq = (s.last_sequence - s.offset_delta) & 0x7FFFFFFF
                    e.batches[first_seq] = (s.last_sequence, s.last_offset - s.offset_delta)
                    while len(e.batches) > MAX_CACHED_BATCHES:
                        e.batches.popitem(last=False)
                if s.current_txn_first_offset >= 0:
                    self.txns.ongoing[s.producer_id] = s.current_txn_first_offset
            return offset
        return 0

    def delete_snapshots(self, above: int | None = None, below: int | None = None) -> None:
        delete_snapshots(self.dir, above=above, below=below, keep_latest=below is not None)
