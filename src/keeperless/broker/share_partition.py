"""A share-partition (KIP-932): which records of one partition a share group has
delivered, to whom, how often, and which are done - Kafka's ``SharePartition``.

The records from the share-partition start offset (SPSO) up to ``next`` (one past the
end offset, SPEO) are in flight. Each is AVAILABLE (to be delivered, again if released),
ACQUIRED by one member until its lock expires, or finished: ACKNOWLEDGED (accepted) or
ARCHIVED (rejected, delivered too often, a transaction marker, aborted, or below the log
start). A finished record is kept, with its delivery count, until the start passes it (the
state written to the share coordinator says how each record of the window ended); an
offset in ``[start, next)`` with no entry was never a record to deliver (compacted away,
a control batch, an aborted transaction's). The start moves up to the first unfinished
offset.

Pure rules: no asyncio, no clock (the caller passes ``now_ms``), no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from keeperless.coordinator.share_records import StateBatch

__all__ = [
    "VALID_TRANSITIONS",
    "AckType",
    "BatchSpan",
    "InFlight",
    "RecordState",
    "ShareAckError",
    "SharePartition",
]


class RecordState(enum.IntEnum):
    """Kafka's ``RecordState`` ids (as stored in the share-group state)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """The acknowledge types of ShareFetch/ShareAcknowledge (``AcknowledgeType``)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


S = RecordState
# state -> the states a record may move to from it (Kafka's RecordState.validateTransition)
VALID_TRANSITIONS: dict[RecordState, frozenset[RecordState]] = {
    S.AVAILABLE: frozenset({S.ACQUIRED, S.ARCHIVED}),
    S.ACQUIRED: frozenset({S.AVAILABLE, S.ACKNOWLEDGED, S.ARCHIVED}),
    S.ACKNOWLEDGED: frozenset(),
    S.ARCHIVED: frozenset(),
}


class ShareAckError(Exception):
    """An acknowledgement refused as a whole (nothing of it applied)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class BatchSpan:
    """What the rules need of a batch in the log: its offsets and whether it is a control
    batch or belongs to an aborted transaction (never delivered)."""

    base: int
    last: int
    skip: bool = False


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    deadline_ms: int = 0

    @property
    def finished(self) -> bool:
        return self.state in (S.ACKNOWLEDGED, S.ARCHIVED)

    def move(self, to: RecordState) -> None:
        if to not in VALID_TRANSITIONS[self.state]:
            raise ValueError(f"record state {self.state.name} cannot become {to.name}")
        self.state = to


class SharePartition:
    def __init__(self, start_offset: int, delivery_limit: int, max_in_flight: int) -> None:
        self.start = start_offset
        self.next = start_offset
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self.records: dict[int, InFlight] = {}  # the records of [start, next)

    @classmethod
    def restore(
        cls,
        start_offset: int,
        batches: Iterable[StateBatch],
        delivery_limit: int,
        max_in_flight: int,
    ) -> SharePartition:
        """A share-partition as the share coordinator stored it: every record of its
        batches at or past the start, with its delivery count (an acquired one was
        stored as available with the count before that delivery: its lock did not
        outlive the leader that gave it). An available record delivered as often as the
        limit allows is archived (the limit may have been lowered meanwhile)."""
        sp = cls(start_offset, delivery_limit, max_in_flight)
        for b in batches:
            state = RecordState(b.delivery_state)
            if state is S.ACQUIRED:
                state = S.AVAILABLE
            if state is S.AVAILABLE and b.delivery_count >= delivery_limit:
                state = S.ARCHIVED
            for off in range(max(b.first_offset, start_offset), b.last_offset + 1):
                sp.records[off] = InFlight(state, b.delivery_count)
                sp.next = max(sp.next, off + 1)
        sp._advance()
        return sp

    def state_batches(self) -> list[StateBatch]:
        """The window's records as the share coordinator stores them: runs of offsets
        with one state and delivery count. An acquired record is stored as available
        with the count of its deliveries before this one (Kafka does not store an
        acquisition): a leader that takes over delivers it again as that delivery, so
        the delivery count limit still holds (a fresh-eyes review found count 6 of 5)."""
        out: list[StateBatch] = []
        for off in sorted(self.records):
            r = self.records[off]
            state, count = r.state, r.delivery_count
            if state is S.ACQUIRED:
                state, count = S.AVAILABLE, count - 1
            last = out[-1] if out else None
            if (
                last is not None
                and last.last_offset == off - 1
                and (last.delivery_state, last.delivery_count) == (state, count)
            ):
                out[-1] = StateBatch(last.first_offset, off, state, count)
            else:
                out.append(StateBatch(off, off, state, count))
        return out

    def _in_flight(self) -> int:
        return sum(1 for r in self.records.values() if not r.finished)

    # -- where to read ------------------------------------------------------------------

    def fetch_offset(self) -> int | None:
        """Where the next delivery starts: the first AVAILABLE in-flight record, else the
        first offset never delivered; None while the in-flight records are at their limit
        and none is available."""
        available = [o for o, r in self.records.items() if r.state is S.AVAILABLE]
        if available:
            return min(available)
        if self._in_flight() >= self.max_in_flight:
            return None
        return self.next

    # -- acquisition --------------------------------------------------------------------

    def acquire(
        self,
        member: str,
        batches: Iterable[BatchSpan],
        max_records: int,
        now_ms: int,
        lock_ms: int,
    ) -> list[tuple[int, int, int]]:
        """Acquire for ``member`` the deliverable records of ``batches`` (read from the
        log at ``fetch_offset()``, in order), up to ``max_records`` (a batch of new
        records is taken whole, as Kafka aligns acquisitions to batches). Returns the
        acquired ranges: (first offset, last offset, delivery count)."""
        out: list[tuple[int, int, int]] = []
        count = 0
        in_flight = self._in_flight()
        for b in batches:
            if count >= max_records:
                break
            for off in range(max(b.base, self.start), b.last + 1):
                if off < self.next:
                    r = self.records.get(off)
                    if r is None or r.state is not S.AVAILABLE:
                        continue
                    if count >= max_records:
                        break
                elif b.skip:
                    self.next = off + 1  # never delivered: finished at once
                    continue
                else:
                    if in_flight >= self.max_in_flight and off == b.base:
                        self._advance()
                        return out
                    r = self.records[off] = InFlight(S.AVAILABLE)
                    in_flight += 1
                    self.next = off + 1
                r.move(S.ACQUIRED)
                r.delivery_count += 1
                r.member = member
                r.deadline_ms = now_ms + lock_ms
                count += 1
                if out and out[-1][1] == off - 1 and out[-1][2] == r.delivery_count:
                    out[-1] = (out[-1][0], off, r.delivery_count)
                else:
                    out.append((off, off, r.delivery_count))
        self._advance()
        return out

    # -- acknowledgement ----------------------------------------------------------------

    def acknowledge(self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]]) -> None:
        """Apply a member's acknowledgements, each (first offset, last offset, types: one
        for the whole range or one per offset), all or none: a record not acquired by
        ``member`` (never, or its lock expired) refuses the lot with INVALID_RECORD_STATE."""
        plan: list[tuple[int, AckType]] = []
        for first, last, types in batches:
            if last < first:
                raise ShareAckError(
                    ErrorCode.invalid_request,
                    f"Acknowledgement batch last offset {last} is below its first {first}",
                )
            if len(types) not in (1, last - first + 1):
                raise ShareAckError(
                    ErrorCode.invalid_request,
                    f"Acknowledgement batch {first}-{last} has {len(types)} types: one, "
                    f"or one per offset ({last - first + 1}), expected",
                )
            for off in range(first, last + 1):
                raw = types[0] if len(types) == 1 else types[off - first]
                try:
                    kind = AckType(raw)
                except ValueError:
                    raise ShareAckError(
                        ErrorCode.invalid_request, f"Unknown acknowledge type {raw}"
                    ) from None
                r = self._live(off)
                acquired = r is not None and r.state is S.ACQUIRED and r.member == member
                if kind is AckType.GAP and (r is None or acquired) and off < self.next:
                    plan.append((off, kind))
                    continue
                if not acquired:
                    raise ShareAckError(
                        ErrorCode.invalid_record_state,
                        f"The record at offset {off} is not acquired by member {member} "
                        "(its acquisition lock may have expired)",
                    )
                plan.append((off, kind))
        for off, kind in plan:
            r = self._live(off)
            if r is None:
                continue  # a gap where no record is
            if kind is AckType.RELEASE:
                self._release(off, r)
            else:
                r.move(S.ACKNOWLEDGED if kind is AckType.ACCEPT else S.ARCHIVED)
                r.member = None
        self._advance()

    def _live(self, off: int) -> InFlight | None:
        """The unfinished record at ``off`` (None: none, or finished)."""
        r = self.records.get(off)
        return None if r is None or r.finished else r

    # -- releases -----------------------------------------------------------------------

    def expire(self, now_ms: int) -> int:
        """Release the records whose acquisition lock has expired; how many."""
        due = [
            o for o, r in self.records.items() if r.state is S.ACQUIRED and r.deadline_ms <= now_ms
        ]
        for off in due:
            self._release(off, self.records[off])
        self._advance()
        return len(due)

    def release_member(self, member: str) -> int:
        """Release every record ``member`` holds (its share session closed)."""
        held = [o for o, r in self.records.items() if r.state is S.ACQUIRED and r.member == member]
        for off in held:
            self._release(off, self.records[off])
        self._advance()
        return len(held)

    def next_deadline(self) -> int | None:
        """When the first acquisition lock expires (None: no record acquired)."""
        locks = [r.deadline_ms for r in self.records.values() if r.state is S.ACQUIRED]
        return min(locks) if locks else None

    def move_start(self, log_start: int) -> None:
        """The log now starts at ``log_start`` (retention, DeleteRecords): records below
        it are archived."""
        if log_start <= self.start:
            return
        for off in [o for o in self.records if o < log_start]:
            r = self.records.pop(off)
            if not r.finished:
                r.move(S.ARCHIVED)
        self.next = max(self.next, log_start)
        self._advance()
        self.start = max(self.start, log_start)

    def _release(self, off: int, r: InFlight) -> None:
        r.member = None
        if r.delivery_count >= self.delivery_limit:
            r.move(S.ARCHIVED)  # delivered too often (group.share.delivery.count.limit)
        else:
            r.move(S.AVAILABLE)

    def _advance(self) -> None:
        """The start moves to the first unfinished record; finished ones below it go."""
        unfinished = [o for o, r in self.records.items() if not r.finished]
        self.start = min(unfinished) if unfinished else self.next
        for off in [o for o in self.records if o < self.start]:
            del self.records[off]

    # -- reading ------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """In-flight records by state (for describe and metrics)."""
        out = {"available": 0, "acquired": 0}
        for r in self.records.values():
            if not r.finished:
                out["available" if r.state is S.AVAILABLE else "acquired"] += 1
        return out
