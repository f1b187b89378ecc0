"""A share-partition's rules (KIP-932): acquisition, acknowledgement, lock expiry,
delivery counts, and the record state machine row by row."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from keeperless.broker.share_partition import (
    VALID_TRANSITIONS,
    AckType,
    BatchSpan,
    InFlight,
    RecordState,
    ShareAckError,
    SharePartition,
)
from keeperless.coordinator.share_records import StateBatch

LOCK = 1000
A, R, J, G = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP


def batches(*spans: tuple[int, int]) -> list[BatchSpan]:
    return [BatchSpan(a, b) for a, b in spans]


def one_record_batches(first: int, last: int) -> list[BatchSpan]:
    return [BatchSpan(o, o) for o in range(first, last + 1)]


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(RecordState, RecordState)))
def test_record_state_transitions_row_by_row(src: RecordState, dst: RecordState) -> None:
    """Kafka's RecordState: AVAILABLE -> ACQUIRED | ARCHIVED; ACQUIRED -> AVAILABLE |
    ACKNOWLEDGED | ARCHIVED; the finished states go nowhere."""
    allowed = {
        (RecordState.AVAILABLE, RecordState.ACQUIRED),
        (RecordState.AVAILABLE, RecordState.ARCHIVED),
        (RecordState.ACQUIRED, RecordState.AVAILABLE),
        (RecordState.ACQUIRED, RecordState.ACKNOWLEDGED),
        (RecordState.ACQUIRED, RecordState.ARCHIVED),
    }
    assert (dst in VALID_TRANSITIONS[src]) == ((src, dst) in allowed)
    r = InFlight(src)
    if (src, dst) in allowed:
        r.move(dst)
        assert r.state is dst
    else:
        with pytest.raises(ValueError, match="cannot become"):
            r.move(dst)


def test_two_members_never_hold_the_same_record() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    got_a = sp.acquire("a", one_record_batches(0, 9), 4, 0, LOCK)
    assert got_a == [(0, 3, 1)]
    assert sp.fetch_offset() == 4
    got_b = sp.acquire("b", one_record_batches(4, 9), 4, 0, LOCK)
    assert got_b == [(4, 7, 1)]
    # b reading again from where a began acquires nothing a holds
    assert sp.acquire("b", one_record_batches(0, 9), 100, 0, LOCK) == [(8, 9, 1)]


def test_new_records_are_taken_a_batch_at_a_time() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    assert sp.acquire("a", batches((0, 4), (5, 9)), 2, 0, LOCK) == [(0, 4, 1)]


def test_accept_finishes_and_moves_the_start() -> None:
    sp = SharePartition(10, delivery_limit=5, max_in_flight=100)
    sp.acquire("a", one_record_batches(10, 14), 10, 0, LOCK)
    sp.acknowledge("a", [(10, 12, (A,))])
    assert sp.start == 13
    with pytest.raises(ShareAckError) as e:
        sp.acknowledge("a", [(12, 12, (A,))])  # accepted already
    assert e.value.code == ErrorCode.invalid_record_state


def test_release_redelivers_with_a_higher_count_and_reject_archives() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    sp.acquire("a", one_record_batches(0, 3), 10, 0, LOCK)
    sp.acknowledge("a", [(0, 3, (R, J, A, R))])
    assert sp.fetch_offset() == 0
    assert sp.acquire("b", one_record_batches(0, 3), 10, 0, LOCK) == [(0, 0, 2), (3, 3, 2)]


def test_a_record_delivered_too_often_is_archived() -> None:
    sp = SharePartition(0, delivery_limit=2, max_in_flight=100)
    for n in (1, 2):
        assert sp.acquire("a", one_record_batches(0, 0), 10, 0, LOCK) == [(0, 0, n)]
        sp.acknowledge("a", [(0, 0, (R,))])
    assert sp.acquire("a", one_record_batches(0, 0), 10, 0, LOCK) == []
    assert sp.start == 1


def test_an_expired_lock_makes_the_record_available_to_others() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    sp.acquire("a", one_record_batches(0, 1), 10, 0, LOCK)
    assert sp.next_deadline() == LOCK
    assert sp.expire(LOCK - 1) == 0
    assert sp.expire(LOCK) == 2
    assert sp.acquire("b", one_record_batches(0, 1), 10, LOCK, LOCK) == [(0, 1, 2)]
    with pytest.raises(ShareAckError) as e:  # a's lock expired: its ack is refused
        sp.acknowledge("a", [(0, 0, (A,))])
    assert e.value.code == ErrorCode.invalid_record_state


def test_an_acknowledgement_is_all_or_nothing() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    sp.acquire("a", one_record_batches(0, 1), 10, 0, LOCK)
    with pytest.raises(ShareAckError):
        sp.acknowledge("a", [(0, 0, (A,)), (5, 5, (A,))])  # 5 was never delivered
    assert sp.records[0].state is RecordState.ACQUIRED
    with pytest.raises(ShareAckError) as e:
        sp.acknowledge("a", [(0, 1, (A, A, A))])
    assert e.value.code == ErrorCode.invalid_request


def test_release_member_and_gaps() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    # offsets 2-3 compacted away: the batch spans 0-5 with records missing
    sp.acquire("a", batches((0, 5)), 10, 0, LOCK)
    sp.acknowledge("a", [(0, 1, (A,)), (2, 3, (G,))])
    assert sp.start == 4
    assert sp.release_member("a") == 2
    assert sp.acquire("b", batches((0, 5)), 10, 0, LOCK) == [(4, 5, 2)]


def test_control_and_aborted_batches_are_never_delivered() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    spans = [BatchSpan(0, 1), BatchSpan(2, 2, skip=True), BatchSpan(3, 3)]
    assert sp.acquire("a", spans, 10, 0, LOCK) == [(0, 1, 1), (3, 3, 1)]
    sp.acknowledge("a", [(0, 1, (A,)), (3, 3, (A,))])
    assert sp.start == 4
    assert not sp.records


def test_in_flight_records_are_limited() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=3)
    assert sp.acquire("a", one_record_batches(0, 9), 10, 0, LOCK) == [(0, 2, 1)]
    assert sp.fetch_offset() is None
    sp.acknowledge("a", [(0, 0, (A,))])
    assert sp.fetch_offset() == 3


def test_the_log_start_moving_archives_what_is_below_it() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    sp.acquire("a", one_record_batches(0, 4), 10, 0, LOCK)
    sp.move_start(3)
    assert sp.start == 3
    assert sorted(sp.records) == [3, 4]
    sp2 = SharePartition(0, delivery_limit=5, max_in_flight=100)
    sp2.move_start(7)  # nothing delivered yet: starts at the log start
    assert sp2.fetch_offset() == 7


def test_the_state_written_holds_how_each_record_of_the_window_ended() -> None:
    """What the leader writes to the share coordinator: each record of [start, next) with
    its delivery count - an acquired one as available, a finished one (accepted,
    rejected) kept until the start passes it - and what a new leader makes of it."""
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    sp.acquire("a", one_record_batches(0, 5), 10, 0, LOCK)
    sp.acknowledge("a", [(1, 3, (A, J, R))])  # 0 still acquired, 4 and 5 too
    S = RecordState
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in sp.state_batches()] == [
        (0, 0, S.AVAILABLE, 0), (1, 1, S.ACKNOWLEDGED, 1), (2, 2, S.ARCHIVED, 1),
        (3, 3, S.AVAILABLE, 1), (4, 5, S.AVAILABLE, 0),
    ]  # fmt: skip
    again = SharePartition.restore(sp.start, sp.state_batches(), 5, 100)
    assert (again.start, again.next) == (0, 6)
    # 1 and 2 are done; the rest comes again, counted from what was written: the
    # acquisitions in flight are that delivery again, the released 3 its next one
    assert again.acquire("b", one_record_batches(0, 7), 10, 0, LOCK) == [
        (0, 0, 1), (3, 3, 2), (4, 7, 1)
    ]  # fmt: skip
    sp.acknowledge("a", [(0, 0, (A,))])  # the start passes 0-2: they are not written
    assert sp.start == 3
    assert [b.first_offset for b in sp.state_batches()] == [3, 4]


def test_finished_records_do_not_count_against_the_in_flight_limit() -> None:
    sp = SharePartition(0, delivery_limit=5, max_in_flight=3)
    sp.acquire("a", one_record_batches(0, 2), 10, 0, LOCK)
    sp.acknowledge("a", [(1, 2, (A,))])  # 0 still acquired: 1 and 2 stay in the window
    assert sp.acquire("a", one_record_batches(3, 9), 10, 0, LOCK) == [(3, 4, 1)]


def test_a_record_acquired_at_the_limit_is_not_delivered_past_it_by_a_new_leader() -> None:
    """Found by a fresh-eyes review: a record acquired for its 5th delivery (limit 5) when
    a snapshot was written came back from the restored state as its 6th."""
    sp = SharePartition(0, delivery_limit=5, max_in_flight=100)
    for _ in range(4):
        sp.acquire("a", one_record_batches(0, 0), 10, 0, LOCK)
        sp.acknowledge("a", [(0, 0, (R,))])
    assert sp.acquire("a", one_record_batches(0, 0), 10, 0, LOCK) == [(0, 0, 5)]
    again = SharePartition.restore(sp.start, sp.state_batches(), 5, 100)
    assert again.acquire("b", one_record_batches(0, 0), 10, 0, LOCK) == [(0, 0, 5)]
    # a state with an available record delivered as often as the limit allows: archived
    at_limit = SharePartition.restore(0, [StateBatch(0, 0, RecordState.AVAILABLE, 5)], 5, 100)
    assert at_limit.acquire("b", one_record_batches(0, 1), 10, 0, LOCK) == [(1, 1, 1)]
