"""A consumer-protocol group's records (Kafka's ConsumerGroup* keys 3, 5, 6, 7, 8) read
back as the group they were written from; what changed is all that is written again."""

from __future__ import annotations

import uuid

from keeperless.coordinator.consumer_group import (
    UNREVOKED,
    ConsumerGroup,
    ConsumerMember,
    Subscription,
)
from keeperless.coordinator.consumer_group_records import group_records, key_group, restore

T1, T2 = uuid.uuid4(), uuid.uuid4()
VIEW = {"orders": (T1, 3), "refunds": (T2, 1)}


def _group() -> ConsumerGroup:
    g = ConsumerGroup("g", 1, "uniform", group_epoch=4, assignment_epoch=4)
    a = ConsumerMember("a", "static-a", "rack-1", "client-a", "/10.0.0.1", 30_000,
                       Subscription(("orders",), None), "range", member_epoch=4,
                       previous_epoch=3, assigned={T1: frozenset({0, 1})})  # fmt: skip
    b = ConsumerMember("b", None, None, "client-b", "/10.0.0.2", 45_000,
                       Subscription((), "ref.*"), None, member_epoch=3, previous_epoch=2,
                       state=UNREVOKED, assigned={T2: frozenset({0})},
                       pending_revocation={T1: frozenset({2})})  # fmt: skip
    g.members = {"a": a, "b": b}
    g.static = {"static-a": "a"}
    g.target = {"a": {T1: frozenset({0, 1, 2})}, "b": {T2: frozenset({0})}}
    return g


def test_a_group_reads_back_as_it_was_written() -> None:
    g = _group()
    records = group_records(g)
    assert sorted(key_group(k)[0] for k in records) == [3, 5, 5, 6, 7, 7, 8, 8]
    back = restore("g", records, 2, "uniform", VIEW, now=100.0)
    assert back is not None
    assert (back.group_epoch, back.assignment_epoch) == (4, 4)
    assert back.static == {"static-a": "a"}
    assert back.target == g.target
    for mid, m in g.members.items():
        r = back.members[mid]
        assert (r.instance_id, r.rack_id, r.client_id, r.client_host) == (
            m.instance_id, m.rack_id, m.client_id, m.client_host,
        )  # fmt: skip
        assert (r.subscription, r.assignor, r.rebalance_timeout_ms) == (
            m.subscription, m.assignor, m.rebalance_timeout_ms,
        )  # fmt: skip
        assert (r.member_epoch, r.previous_epoch, r.state) == (
            m.member_epoch, m.previous_epoch, m.state,
        )  # fmt: skip
        assert (r.assigned, r.pending_revocation) == (m.assigned, m.pending_revocation)
        assert r.last_heartbeat == 100.0
    assert back.members["b"].revoke_by == 100.0 + 45  # its rebalance timeout, from the load
    # the subscribed topics as the coordinator sees them now: no epoch bump on load
    assert back.topics_seen == (("orders", T1, 3), ("refunds", T2, 1))
    assert group_records(back) == records


def test_only_what_changed_differs_and_half_a_member_is_left_out() -> None:
    g = _group()
    before = group_records(g)
    g.members["a"].last_heartbeat = 5.0  # not stored
    assert group_records(g) == before
    g.members["a"].member_epoch = 5
    changed = [k for k, v in group_records(g).items() if before.get(k) != v]
    assert [key_group(k) for k in changed] == [(8, "g", "a")]
    half = {k: v for k, v in before.items() if key_group(k) != (8, "g", "b")}
    back = restore("g", half, 2, "uniform", VIEW, now=0.0)
    assert back is not None
    assert sorted(back.members) == ["a"]
    no_metadata = {k: v for k, v in before.items() if key_group(k)[0] != 3}
    assert restore("g", no_metadata, 2, "uniform", VIEW, now=0.0) is None
    broken = {k: v[:-4] for k, v in before.items()}
    assert restore("g", broken, 2, "uniform", VIEW, now=0.0) is None


def test_one_members_records_are_the_groups_own_and_its() -> None:
    """After a heartbeat that kept the group's epochs and size, only the group's records
    and the heartbeating member's are looked at (not every member's, each heartbeat)."""
    g = _group()
    mine = group_records(g, "a")
    assert sorted(key_group(k) for k in mine) == [
        (3, "g", None), (5, "g", "a"), (6, "g", None), (7, "g", "a"), (8, "g", "a"),
    ]  # fmt: skip
    whole = group_records(g)
    assert all(whole[k] == v for k, v in mine.items())
