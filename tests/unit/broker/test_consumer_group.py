"""KIP-848's consumer group state machine: epochs, target assignments, reconciliation
(revoke first, then take what is free), fencing, static members, the assignors."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from keeperless.coordinator.consumer_group import (
    ASSIGNORS,
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    HeartbeatError,
    Subscription,
)

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
VIEW = {"t": (T, 4), "u": (U, 2)}


def _spec(topics: tuple[str, ...] = ("t",)) -> tuple:  # type: ignore[type-arg]
    return (None, "client", "/h", 30_000, Subscription(topics), None)


def _beat(g: ConsumerGroup, member_id: str, owned: dict | None, now: float = 0.0) -> None:  # type: ignore[type-arg]
    m = g.members[member_id]
    g.refresh(VIEW)
    g.compute_target(VIEW)
    g.reconcile(m, owned, now)


def _owned(g: ConsumerGroup, member_id: str) -> dict:  # type: ignore[type-arg]
    return dict(g.members[member_id].assigned)


def test_a_new_member_gets_partitions_only_after_the_old_owner_revokes_them() -> None:
    g = ConsumerGroup("g")
    g.join("a", None, _spec(), 0.0)
    _beat(g, "a", {})
    assert _owned(g, "a") == {T: frozenset(range(4))}
    assert g.members["a"].state == STABLE
    epoch_a = g.members["a"].member_epoch
    g.join("b", None, _spec(), 0.0)
    _beat(g, "b", {})
    b = g.members["b"]
    # b is at the new epoch but its partitions are still a's: unreleased
    assert b.member_epoch == g.assignment_epoch
    assert b.state == UNRELEASED
    assert _owned(g, "b") == {}
    # a is told to revoke half; its epoch waits until it has
    _beat(g, "a", _owned(g, "a"))
    a = g.members["a"]
    assert a.state == UNREVOKED
    assert a.member_epoch == epoch_a
    assert len(a.assigned[T]) == 2
    assert len(a.pending_revocation[T]) == 2
    _beat(g, "a", {T: a.assigned[T] | a.pending_revocation[T]})  # not yet revoked
    assert a.state == UNREVOKED
    _beat(g, "a", dict(a.assigned))  # revoked
    assert a.state == STABLE
    assert a.member_epoch == g.assignment_epoch
    _beat(g, "b", {})
    assert b.state == STABLE
    assert _owned(g, "a")[T] | _owned(g, "b")[T] == frozenset(range(4))
    assert not _owned(g, "a")[T] & _owned(g, "b")[T]
    assert g.state == "Stable"


def test_epochs_are_fenced_except_the_previous_one_with_nothing_new_owned() -> None:
    g = ConsumerGroup("g")
    g.join("a", None, _spec(), 0.0)
    _beat(g, "a", {})
    a = g.members["a"]
    g.validate_epoch(a, a.member_epoch, {})
    with pytest.raises(HeartbeatError) as e:
        g.validate_epoch(a, a.member_epoch + 1, {})
    assert e.value.code == ErrorCode.fenced_member_epoch
    # a lost the answer that moved it on: its previous epoch still works
    g.validate_epoch(a, a.previous_epoch, {})
    with pytest.raises(HeartbeatError):
        g.validate_epoch(a, a.previous_epoch, {U: frozenset({0})})  # owns what it should not


def test_a_static_member_that_leaves_for_a_while_comes_back_to_its_partitions() -> None:
    g = ConsumerGroup("g")
    g.join("a", "ia", _spec(), 0.0)
    g.join("b", "ib", _spec(), 0.0)
    for _ in range(3):
        for m in ("a", "b"):
            _beat(g, m, _owned(g, m))
    before = _owned(g, "a")
    epoch = g.group_epoch
    g.leave("a", static=True)
    assert g.group_epoch == epoch  # no rebalance for a temporary leave
    with pytest.raises(HeartbeatError) as e:
        g.join("a2", "ib", _spec(), 1.0)
    assert e.value.code == ErrorCode.unreleased_instance_id
    g.join("a2", "ia", _spec(), 1.0)
    assert "a" not in g.members
    assert _owned(g, "a2") == before
    assert g.group_epoch == epoch
    # leaving for good rebalances
    g.leave("a2", static=False)
    assert g.group_epoch == epoch + 1


def test_members_that_miss_their_session_or_do_not_revoke_are_removed() -> None:
    g = ConsumerGroup("g")
    g.join("a", None, _spec(), 0.0)
    _beat(g, "a", {})
    g.join("b", None, _spec(), 0.0)
    _beat(g, "b", {})
    _beat(g, "a", _owned(g, "a"), now=1.0)  # asked to revoke, within 30 s
    assert g.members["a"].state == UNREVOKED
    g.members["b"].last_heartbeat = 40.0
    g.expire(40.0, 45_000)
    assert "a" not in g.members  # did not revoke within its rebalance timeout
    g.expire(100.0, 45_000)
    assert "b" not in g.members  # missed its session
    assert g.state == "Empty"


def test_uniform_is_balanced_and_sticky_and_range_gives_contiguous_ranges() -> None:
    uniform = ASSIGNORS["uniform"]
    members = {"a": ["t", "u"], "b": ["t", "u"], "c": ["t", "u"]}
    first = uniform(members, VIEW, {})
    sizes = sorted(sum(len(p) for p in a.values()) for a in first.values())
    assert sizes == [2, 2, 2]
    # c leaves: a and b keep what they had and share c's
    second = uniform({"a": ["t", "u"], "b": ["t", "u"]}, VIEW, first)
    for m in ("a", "b"):
        had = {(t, p) for t, ps in first[m].items() for p in ps}
        has = {(t, p) for t, ps in second[m].items() for p in ps}
        assert had <= has
    assert sorted(sum(len(p) for p in a.values()) for a in second.values()) == [3, 3]
    ranged = ASSIGNORS["range"]({"a": ["t"], "b": ["t"], "c": ["u"]}, VIEW, {})
    assert ranged["a"] == {T: frozenset({0, 1})}
    assert ranged["b"] == {T: frozenset({2, 3})}
    assert ranged["c"] == {U: frozenset({0, 1})}


def test_a_regex_subscription_follows_the_topics() -> None:
    sub = Subscription((), "t.*")
    view = {"t1": (T, 1), "t2": (U, 1), "x": (uuid.UUID(int=3), 1), "__t": (uuid.UUID(int=4), 1)}
    assert sub.topics(view) == ["t1", "t2"]
    g = ConsumerGroup("g")
    g.join("a", None, (None, "c", "/h", 30_000, sub, None), 0.0)
    g.refresh({"t1": (T, 1)})
    epoch = g.group_epoch
    g.refresh({"t1": (T, 1), "t2": (U, 1)})  # a matching topic appears
    assert g.group_epoch == epoch + 1


def test_the_consumer_protocol_codec_of_classic_members() -> None:
    """What a classic member joins with (ConsumerProtocolSubscription v0-v3) and what it
    is handed (ConsumerProtocolAssignment), as the Java client and librdkafka encode
    them."""
    import struct

    from keeperless.group.mixed_groups import (
        decode_assignment,
        encode_assignment,
        parse_subscription,
    )

    def s(x: str) -> bytes:
        return struct.pack(">h", len(x)) + x.encode()

    v0 = struct.pack(">hi", 0, 2) + s("a") + s("bb") + struct.pack(">i", -1)
    assert parse_subscription(v0) == (["a", "bb"], [])
    v1 = (
        struct.pack(">hi", 1, 1) + s("a") + struct.pack(">i", 2) + b"ud"
        + struct.pack(">i", 1) + s("a") + struct.pack(">iii", 2, 0, 3)
    )  # fmt: skip
    assert parse_subscription(v1) == (["a"], [("a", [0, 3])])
    assert parse_subscription(b"\x00") == ([], [])  # not a subscription
    data = encode_assignment([("b", [2, 0]), ("a", [1])])
    assert decode_assignment(data) == [("a", [1]), ("b", [0, 2])]
    assert data[-4:] == b"\xff\xff\xff\xff"  # no user data


@pytest.mark.parametrize("partitions", [4, 5, 7, 8, 9])
def test_uniform_gives_a_joining_member_its_share(partitions: int) -> None:
    """Found by a helper's client tests: two members held 2 of 4 partitions each and a
    third joined; keeping each member's partitions up to ceil(4/3) = 2 left it none
    (2/2/0, the group Stable). Kafka's uniform assignor gives every member at least
    floor(P/M) and only P mod M of them one more, keeping what it can of the rest."""
    uniform = ASSIGNORS["uniform"]
    view = {"t": (T, partitions)}
    two = uniform({"a": ["t"], "b": ["t"]}, view, {})
    three = uniform({"a": ["t"], "b": ["t"], "c": ["t"]}, view, two)
    sizes = {m: sum(len(p) for p in a.values()) for m, a in three.items()}
    assert max(sizes.values()) - min(sizes.values()) <= 1, sizes
    assert sum(sizes.values()) == partitions
    for m in ("a", "b"):  # sticky: only what the newcomer's share needs moves
        had = {(t, p) for t, ps in two[m].items() for p in ps}
        has = {(t, p) for t, ps in three[m].items() for p in ps}
        assert has <= had, m
