"""The share coordinator's rules for one ``__share_group_state`` partition (Kafka's
ShareCoordinatorShard, KIP-932): the durable state of each share-partition (its start
offset, state epoch, the leader epoch of the partition leader that last wrote it, and the
delivery state of the records past the start), written by the partition leaders with
WriteShareGroupState and read back with ReadShareGroupState when one takes over.

Pure rules, as the controller's: an operation returns the records to append and the
answer; the state changes only when records are replayed (after they are appended, and
when the partition is loaded). No asyncio, no clock, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from keeperless.coordinator.outcome import Outcome, Record
from keeperless.coordinator.share_records import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareSnapshot,
    ShareUpdate,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = ["Outcome", "Refusal", "ShareState", "ShareStateShard", "combine_batches"]


@dataclass(frozen=True, slots=True)
class Refusal:
    code: ErrorCode
    message: str


def combine_batches(
    so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    """Non-overlapping batches from two lists, as Kafka's PersisterStateBatchCombiner:
    nothing below ``start_offset`` (-1: no pruning); where batches overlap the one with
    the higher delivery count wins, then the higher state (a record's delivery count and
    state only ever grow); contiguous runs of the same count and state are one batch."""
    spans = []
    for b in (*so_far, *new):
        first = b.first_offset if start_offset < 0 else max(b.first_offset, start_offset)
        if first <= b.last_offset:
            spans.append((first, b.last_offset + 1, (b.delivery_count, b.delivery_state)))
    if not spans:
        return ()
    bounds = sorted({x for first, end, _ in spans for x in (first, end)})
    spans.sort()
    out: list[StateBatch] = []
    active: list[tuple[tuple[int, int], int]] = []  # (-(count, state), end) max-heap
    i = 0
    for lo, hi in itertools.pairwise(bounds):
        while i < len(spans) and spans[i][0] <= lo:
            _, end, info = spans[i]
            heapq.heappush(active, ((-info[0], -info[1]), end))
            i += 1
        while active and active[0][1] <= lo:
            heapq.heappop(active)
        if not active:
            continue
        count, state = -active[0][0][0], -active[0][0][1]
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.last_offset + 1 == lo
            and (prev.delivery_count, prev.delivery_state) == (count, state)
        ):
            out[-1] = replace(prev, last_offset=hi - 1)
        else:
            out.append(StateBatch(lo, hi - 1, state, count))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ShareState:
    """A share-partition's state as the records replayed so far make it."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    updates: int = 0  # ShareUpdates since the last ShareSnapshot


class ShareStateShard:
    """The share-partitions of one ``__share_group_state`` partition."""

    def __init__(self, updates_per_snapshot: int = 500) -> None:
        # share.coordinator.snapshot.update.records.per.snapshot
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[ShareKey, ShareState] = {}
        # where each share-partition's latest snapshot is in the log, and the offset after
        # the last record replayed: what the log must keep (prune_offset)
        self.snapshot_at: dict[ShareKey, int] = {}
        self.next_offset = 0

    # -- replay -----------------------------------------------------------------------------

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """(No transaction writes to __share_group_state.)"""

    def carry_over(self, previous: ShareStateShard) -> None:
        """Nothing of a share-partition's state is kept outside its records."""

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int = -1,
        producer_id: int = -1,
        transactional: bool = False,
    ) -> None:
        """Apply one record (at ``offset`` in the log; -1: unknown, nothing is pruned)."""
        self.next_offset = max(self.next_offset, offset + 1)
        kind, sk = decode_key(key)
        if value is None:
            self.states.pop(sk, None)  # the share group's state deleted
            self.snapshot_at.pop(sk, None)
            return
        if kind == SNAPSHOT or sk not in self.snapshot_at:
            self.snapshot_at[sk] = max(offset, 0)
        v = decode_value(kind, value)
        old = self.states.get(sk)
        if isinstance(v, ShareSnapshot):
            self.states[sk] = ShareState(
                v.snapshot_epoch,
                v.state_epoch,
                max(v.leader_epoch, old.leader_epoch) if old else v.leader_epoch,
                v.start_offset,
                combine_batches((), v.batches, v.start_offset),
            )
        elif old is None:  # an update with no snapshot before it (its snapshot compacted?)
            self.states[sk] = ShareState(
                v.snapshot_epoch, 0, v.leader_epoch, v.start_offset, v.batches, 1
            )
        else:
            start = old.start_offset if v.start_offset == -1 else v.start_offset
            self.states[sk] = ShareState(
                old.snapshot_epoch,
                old.state_epoch,
                max(old.leader_epoch, v.leader_epoch),
                start,
                combine_batches(old.batches, v.batches, start),
                old.updates + 1,
            )

    def refresh_snapshots(self) -> Outcome[int]:
        """A fresh ShareSnapshot of every share-partition whose latest one has records
        after it (Kafka's cold-partition snapshots): an idle share-partition's old snapshot
        would otherwise hold the prune point back for ever. Answers how many."""
        records: list[Record] = []
        for sk, at in self.snapshot_at.items():
            s = self.states.get(sk)
            if s is None or at >= self.next_offset - 1:
                continue
            value = ShareSnapshot(s.snapshot_epoch + 1, s.state_epoch, s.leader_epoch,
                                  s.start_offset, s.batches)  # fmt: skip
            records.append((encode_key(SNAPSHOT, sk), encode_value(value)))
        return Outcome(records, len(records))

    def prune_offset(self) -> int:
        """Below this offset the log holds nothing the state needs: every share-partition
        is rebuilt from its latest snapshot and the updates after it (Kafka prunes
        __share_group_state up to there with DeleteRecords)."""
        return min(self.snapshot_at.values(), default=self.next_offset)

    # -- operations ---------------------------------------------------------------------------

    def _fenced(self, sk: ShareKey, leader_epoch: int, state_epoch: int | None) -> Refusal | None:
        s = self.states.get(sk)
        if s is None:
            return None
        if s.leader_epoch > leader_epoch:
            return Refusal(
                ErrorCode.fenced_leader_epoch,
                f"Leader epoch {leader_epoch} of {sk.coordinator_key()} is older than the "
                f"last recorded {s.leader_epoch}",
            )
        if state_epoch is not None and s.state_epoch > state_epoch:
            return Refusal(
                ErrorCode.fenced_state_epoch,
                f"State epoch {state_epoch} of {sk.coordinator_key()} is older than the "
                f"last recorded {s.state_epoch}",
            )
        return None

    def write(
        self,
        sk: ShareKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
    ) -> Outcome[Refusal | None]:
        """WriteShareGroupState from the partition's leader: a ShareSnapshot the first
        time and every ``updates_per_snapshot`` updates, else a ShareUpdate of the
        batches sent (merged onto the state when replayed)."""
        refused = _invalid(sk) or self._fenced(sk, leader_epoch, state_epoch)
        if refused is not None:
            return Outcome([], refused)
        s = self.states.get(sk)
        value: ShareSnapshot | ShareUpdate
        if s is None or s.updates >= self.updates_per_snapshot:
            start = start_offset if start_offset != -1 or s is None else s.start_offset
            value = ShareSnapshot(
                0 if s is None else s.snapshot_epoch + 1,
                state_epoch if state_epoch != -1 or s is None else s.state_epoch,
                leader_epoch if leader_epoch != -1 or s is None else s.leader_epoch,
                start,
                combine_batches(() if s is None else s.batches, batches, start),
            )
            return Outcome([(encode_key(SNAPSHOT, sk), encode_value(value))], None)
        value = ShareUpdate(
            s.snapshot_epoch, leader_epoch, start_offset, combine_batches((), batches, start_offset)
        )
        return Outcome([(encode_key(UPDATE, sk), encode_value(value))], None)

    def read(self, sk: ShareKey, leader_epoch: int) -> Outcome[Refusal | ShareState | None]:
        """ReadShareGroupState from a partition's new leader: the state (None: never
        written, the leader starts at its own start offset). A newer leader epoch is
        recorded (a ShareUpdate that changes nothing else), so the leader it replaces
        can write no more."""
        refused = _invalid(sk) or self._fenced(sk, leader_epoch, None)
        if refused is not None:
            return Outcome([], refused)
        s = self.states.get(sk)
        if s is None:
            return Outcome([], None)
        records: list[Record] = []
        if leader_epoch > s.leader_epoch:
            bump = ShareUpdate(s.snapshot_epoch, leader_epoch, -1, ())
            records.append((encode_key(UPDATE, sk), encode_value(bump)))
        return Outcome(records, s)

    def summary(self, sk: ShareKey, leader_epoch: int) -> Refusal | ShareState | None:
        """ReadShareGroupStateSummary (the admin's view): no records, no epoch change;
        leader epoch -1 (an admin, not a leader, asking) is never fenced."""
        fenced = self._fenced(sk, leader_epoch, None) if leader_epoch >= 0 else None
        return _invalid(sk) or fenced or self.states.get(sk)

    def initialize(
        self, sk: ShareKey, state_epoch: int, start_offset: int
    ) -> Outcome[Refusal | None]:
        """InitializeShareGroupState: a fresh state at ``start_offset`` under a new state
        epoch (a share group's first use of a partition, or its offsets reset)."""
        refused = _invalid(sk)
        s = self.states.get(sk)
        if refused is None and s is not None and s.state_epoch > state_epoch:
            refused = Refusal(
                ErrorCode.fenced_state_epoch,
                f"State epoch {state_epoch} of {sk.coordinator_key()} is older than the "
                f"last recorded {s.state_epoch}",
            )
        if refused is not None:
            return Outcome([], refused)
        value = ShareSnapshot(
            0 if s is None else s.snapshot_epoch + 1,
            state_epoch,
            -1 if s is None else s.leader_epoch,
            start_offset,
            (),
        )
        return Outcome([(encode_key(SNAPSHOT, sk), encode_value(value))], None)

    def delete(self, sk: ShareKey) -> Outcome[Refusal | None]:
        """DeleteShareGroupState: tombstones of both record keys (the share group was
        deleted, or stopped reading the topic)."""
        refused = _invalid(sk)
        if refused is not None:
            return Outcome([], refused)
        if sk not in self.states:
            return Outcome([], None)
        return Outcome([(encode_key(SNAPSHOT, sk), None), (encode_key(UPDATE, sk), None)], None)


# delivery states of a record whose delivery is complete (Kafka's RecordState)
_ACKNOWLEDGED, _ARCHIVED = 2, 4


def delivery_complete(s: ShareState) -> int:
    """How many offsets at or past the start offset completed delivery (acknowledged or
    archived): ReadShareGroupStateSummary v1's DeliveryCompleteCount (KIP-1226), which
    the share-partition's lag subtracts."""
    done = 0
    for b in s.batches:
        if b.delivery_state in (_ACKNOWLEDGED, _ARCHIVED) and b.last_offset >= s.start_offset:
            done += b.last_offset - max(b.first_offset, s.start_offset) + 1
    return done


def _invalid(sk: ShareKey) -> Refusal | None:
    if not sk.group_id:
        return Refusal(ErrorCode.invalid_group_id, "The group id must not be empty")
    if sk.partition < 0:
        return Refusal(ErrorCode.invalid_request, f"Partition id {sk.partition} is negative")
    return None
