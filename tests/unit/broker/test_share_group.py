"""A share group's membership rules (KIP-932): join, heartbeat, fencing, leave, session
expiry, the assignment of every subscribed partition to every member, and the group
state machine row by row."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from keeperless.coordinator.share_group import (
    VALID_GROUP_TRANSITIONS,
    ShareGroup,
    ShareGroupError,
    ShareGroupState,
)

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS = {"orders": (T1, 3), "audit": (T2, 1)}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(ShareGroupState, ShareGroupState)))
def test_group_state_transitions_row_by_row(src: ShareGroupState, dst: ShareGroupState) -> None:
    allowed = {
        (ShareGroupState.EMPTY, ShareGroupState.STABLE),
        (ShareGroupState.EMPTY, ShareGroupState.DEAD),
        (ShareGroupState.STABLE, ShareGroupState.EMPTY),
    }
    assert (dst in VALID_GROUP_TRANSITIONS[src]) == ((src, dst) in allowed)
    g = ShareGroup("g", state=src)
    if src is dst or (src, dst) in allowed:
        g._become(dst)
        assert g.state is dst
    else:
        with pytest.raises(ValueError, match="cannot become"):
            g._become(dst)


def test_every_member_gets_every_partition_of_its_topics() -> None:
    g = ShareGroup("g")
    a, got_a = g.heartbeat("a", 0, ["orders"], TOPICS, 0.0)
    b, got_b = g.heartbeat("b", 0, ["orders", "audit"], TOPICS, 0.0)
    assert got_a == {T1: (0, 1, 2)}
    assert got_b == {T1: (0, 1, 2), T2: (0,)}
    assert g.state is ShareGroupState.STABLE
    assert a is not None
    assert b is not None
    assert b.epoch > a.epoch > 0
    # unchanged: no assignment sent again
    assert g.heartbeat("a", a.epoch, None, TOPICS, 1.0)[1] is None
    # a topic grows: the new partition is assigned with a new epoch
    more = {**TOPICS, "orders": (T1, 4)}
    a2, got = g.heartbeat("a", a.epoch, None, more, 2.0)
    assert got == {T1: (0, 1, 2, 3)}
    assert a2 is not None
    assert a2.epoch > b.epoch


def test_a_wrong_epoch_is_fenced_and_an_unknown_member_refused() -> None:
    g = ShareGroup("g")
    m, _ = g.heartbeat("a", 0, ["orders"], TOPICS, 0.0)
    assert m is not None
    with pytest.raises(ShareGroupError) as e:
        g.heartbeat("a", m.epoch + 1, None, TOPICS, 0.0)
    assert e.value.code == ErrorCode.fenced_member_epoch
    with pytest.raises(ShareGroupError) as e:
        g.heartbeat("nobody", 3, None, TOPICS, 0.0)
    assert e.value.code == ErrorCode.unknown_member_id
    for member, subscribed in (("", ["orders"]), ("b", None), ("b", [])):
        with pytest.raises(ShareGroupError) as e:
            g.heartbeat(member, 0, subscribed, TOPICS, 0.0)
        assert e.value.code == ErrorCode.invalid_request


def test_leaving_and_expiring_empty_the_group() -> None:
    g = ShareGroup("g")
    g.heartbeat("a", 0, ["orders"], TOPICS, 0.0)
    g.heartbeat("b", 0, ["orders"], TOPICS, 10.0)
    assert g.heartbeat("a", -1, None, TOPICS, 11.0) == (None, None)
    assert g.expire(50.0, 45.0) == []
    assert g.expire(56.0, 45.0) == ["b"]
    assert g.state is ShareGroupState.EMPTY
    assert not g.members


def test_a_leader_paused_past_its_session_neither_acquires_nor_acknowledges(
    tmp_path: Path,
) -> None:
    """The fault harness, seed 8819: a share-partition leader paused past its session
    (its leadership moved meanwhile), resumed, handed out records with delivery count 2
    before it learnt it was no longer the leader; the new leader, which never heard of
    that delivery, gave them out again with count 1. After a pause longer than the
    session, a broker serves no share fetch or acknowledgement until a heartbeat sent
    after it is answered unfenced; heartbeats that fail (no controller answers) do not
    stop it, as Kafka's leaders go on serving then."""
    from keeperless.group.coordinator import GroupCoordinator, GroupSettings
    from keeperless.metadata import _records_gen as r
    from keeperless.protocol.framing import RequestHeader
    from keeperless.share.apis import ShareApis, ShareSettings
    from tests.unit.brokers import make_broker

    tid = uuid.uuid4()
    b = make_broker(tmp_path)
    b.on_committed(
        [
            r.TopicRecord(name="t", topic_id=tid),
            r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1,), isr=(1,), leader=1),
        ],
        2,
    )
    apis = ShareApis(GroupCoordinator(b, GroupSettings()), ShareSettings())
    b.session_s = 3.0
    b.beat_sent(100.0)
    b.beat_answered(100.0, unfenced=True)
    assert not b.may_be_stale(101.0)
    b.beat_sent(101.0)  # a heartbeat no controller answered: still serving
    assert not b.may_be_stale(103.5)
    assert b.may_be_stale(104.5)  # nothing has run for a whole session: paused
    b.beat_sent(104.6)  # the pause is seen by the next heartbeat too
    b.beat_answered(101.0, unfenced=True)  # an answer to one sent before it: not enough
    assert b.may_be_stale(104.7)
    b.beat_answered(104.6, unfenced=False)  # fenced: it was
    assert b.may_be_stale(104.8)
    b.beat_sent(105.0)
    b.beat_answered(105.0, unfenced=True)
    assert not b.may_be_stale(105.1)
    # the share APIs ask it
    import time

    now = time.monotonic()
    b.beat_at, b.paused_at = now, None
    assert apis._leased_error(tid, 0) is None
    b.paused_at = now
    assert apis._leased_error(tid, 0) == ErrorCode.not_leader_or_follower
    header = RequestHeader(78, 1, 1, "c")
    assert apis._acquire(header, "g", "m", tid, 0, 10, 1 << 20)[0] == (
        ErrorCode.not_leader_or_follower
    )
    assert apis._ack(header, "g", "m", tid, 0, [])[0] == ErrorCode.not_leader_or_follower
    b.close()
