"""The classic group protocol as Kafka's GroupCoordinator runs it: static membership
(KIP-345), member ids handed out and never used, repeated joins."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol

from keeperless.coordinator.classic_group import Group, GroupState, JoinResult
from keeperless.coordinator.deferred import Deferred
from keeperless.coordinator.runtime import LoopTimer, wait

SESSION = datetime.timedelta(seconds=10)


def _req(member_id: str = "", instance: str | None = None, meta: bytes = b"m") -> Any:
    return JoinGroupRequest(
        group_id="g",
        session_timeout=SESSION,
        rebalance_timeout=SESSION,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=meta),),
        reason=None,
    )


async def _join(g: Group, req: Any, version: int = 9, now: float = 0.0) -> JoinResult:
    out = g.join(req, "c", "/h", version, now)
    return await wait(out) if isinstance(out, Deferred) else out


async def _stable_group_of_two(g: Group) -> tuple[str, str]:
    """Members a (static 'ia') and b (static 'ib'), stable with assignments."""
    ja = asyncio.ensure_future(_join(g, _req(instance="ia")))
    jb = asyncio.ensure_future(_join(g, _req(instance="ib")))
    ra, rb = await asyncio.gather(ja, jb)
    assert ra.error == rb.error == ErrorCode.none
    leader = ra.leader
    assert leader in (ra.member_id, rb.member_id)
    assigns = {ra.member_id: b"A", rb.member_id: b"B"}
    sa = g.sync(ra.member_id, ra.generation, assigns, 0.0, "ia")
    sb = g.sync(rb.member_id, rb.generation, assigns, 0.0, "ib")
    for s in (sa, sb):
        if isinstance(s, Deferred):
            await wait(s)
    assert g.state == GroupState.STABLE
    return ra.member_id, rb.member_id


def test_a_restarted_static_member_gets_its_assignment_without_a_rebalance() -> None:
    async def go() -> None:
        g = Group("g", 0, LoopTimer(), 1)
        a, b = await _stable_group_of_two(g)
        generation = g.generation
        follower_instance = "ib" if g.leader == a else "ia"
        old = b if g.leader == a else a
        res = await _join(g, _req(instance=follower_instance))  # restarted: no member id
        assert res.error == ErrorCode.none
        assert res.member_id != old
        assert g.state == GroupState.STABLE
        assert g.generation == generation
        assert res.members == ()
        err, assignment = g.sync(res.member_id, generation, {}, 0.0, follower_instance)  # type: ignore[misc]
        assert (err, assignment) == (ErrorCode.none, b"B" if old == b else b"A")
        # the old member id is fenced wherever it shows up
        assert g.heartbeat(old, generation, 0.0, follower_instance) == ErrorCode.fenced_instance_id
        stale = await _join(g, _req(member_id=old, instance=follower_instance))
        assert stale.error == ErrorCode.fenced_instance_id

    asyncio.run(go())


def test_a_restarted_static_leader_is_told_to_skip_the_assignment() -> None:
    async def go() -> None:
        g = Group("g", 0, LoopTimer(), 1)
        a, _b = await _stable_group_of_two(g)
        generation = g.generation
        leader_instance = "ia" if g.leader == a else "ib"
        res = await _join(g, _req(instance=leader_instance), version=9)
        assert res.skip_assignment
        assert res.leader == res.member_id
        assert g.generation == generation
        older = await _join(g, _req(instance=leader_instance), version=8)
        assert not older.skip_assignment
        assert older.leader != older.member_id  # before v9 the client must not assign

    asyncio.run(go())


def test_member_ids_handed_out_and_never_used_expire() -> None:
    """A client told MEMBER_ID_REQUIRED that never comes back (it unsubscribed) must not
    hold every later rebalance for the whole rebalance timeout."""

    async def go() -> None:
        g = Group("g", 0, LoopTimer(), 1)
        first = await _join(g, _req())
        one = await _join(g, _req(member_id=first.member_id))
        g.sync(one.member_id, one.generation, {one.member_id: b"A"}, 0.0)
        assert g.state == GroupState.STABLE
        ghost = await _join(g, _req())
        assert ghost.error == ErrorCode.member_id_required
        second = await _join(g, _req())
        joins = [
            asyncio.ensure_future(_join(g, _req(member_id=second.member_id))),
            asyncio.ensure_future(_join(g, _req(member_id=first.member_id))),
        ]
        await asyncio.sleep(0.01)
        assert g.state == GroupState.PREPARING
        assert not any(j.done() for j in joins)  # both joined: waiting for the ghost
        g.expire_sessions(SESSION.total_seconds() + 1)
        results = await asyncio.wait_for(asyncio.gather(*joins), 1)
        assert [r.error for r in results] == [ErrorCode.none, ErrorCode.none]
        assert results[0].generation == 2

    asyncio.run(go())


def test_a_repeated_join_while_completing_does_not_start_another_round() -> None:
    async def go() -> None:
        g = Group("g", 0, LoopTimer(), 1)
        ids = [(await _join(g, _req())).member_id for _ in range(2)]
        joins = [asyncio.ensure_future(_join(g, _req(member_id=i))) for i in ids]
        results = await asyncio.gather(*joins)
        assert g.state == GroupState.COMPLETING
        generation = g.generation
        again = await _join(g, _req(member_id=ids[0]))
        assert (again.error, again.generation) == (ErrorCode.none, generation)
        assert g.state == GroupState.COMPLETING  # the leader's SyncGroup is still due
        assert results[0].leader == again.leader

    asyncio.run(go())


def test_a_stored_generation_is_handed_out_once_stored_and_restored_as_it_was() -> None:
    """With persist (the coordinator stores each generation, Kafka's storeGroup): the
    leader's assignment waits until it is stored; a failed store gives every member the
    error and a rebalance; a group restored from what was stored takes the same member,
    generation and assignment without a rebalance."""
    from keeperless.coordinator.group_records import decode_group_value, encode_group_value

    async def go() -> None:
        g = Group("g", 0, LoopTimer(), 1)
        g.persist = True
        ja = asyncio.ensure_future(_join(g, _req(instance="ia")))
        jb = asyncio.ensure_future(_join(g, _req(instance="ib")))
        ra, rb = await asyncio.gather(ja, jb)
        leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
        assigns = {ra.member_id: b"A", rb.member_id: b"B"}
        waiting = g.sync(
            follower.member_id,
            g.generation,
            {},
            0.0,
            g.members[follower.member_id].group_instance_id,
        )
        mine = g.sync(
            leader.member_id,
            g.generation,
            assigns,
            0.0,
            g.members[leader.member_id].group_instance_id,
        )
        assert isinstance(waiting, Deferred)
        assert isinstance(mine, Deferred)
        assert g.store_due == g.generation
        assert g.state == GroupState.COMPLETING
        await asyncio.sleep(0)
        assert not waiting.done()  # nothing handed out before it is stored
        g.synced(g.generation, ErrorCode.none, 0.0)
        assert g.state == GroupState.STABLE
        assert (await wait(waiting))[1] == assigns[follower.member_id]
        stored = decode_group_value(encode_group_value(g.snapshot(1234)))
        assert stored is not None
        assert stored.generation == g.generation
        back = Group.restore("g", stored, 0, LoopTimer(), 2, now=5.0)
        assert back.state == GroupState.STABLE
        assert back.leader == g.leader
        assert back.static == {"ia": ra.member_id, "ib": rb.member_id}
        for m in (ra, rb):
            assert back.members[m.member_id].assignment == assigns[m.member_id]
            assert back.heartbeat(m.member_id, g.generation, 6.0) == ErrorCode.none
        assert back.heartbeat(ra.member_id, g.generation - 1, 6.0) == ErrorCode.illegal_generation
        # the next generation's store fails: the members hear it and rejoin
        ia, ib = ("ia", "ib") if leader is ra else ("ib", "ia")
        j2 = asyncio.ensure_future(_join(back, _req(leader.member_id, ia, meta=b"n")))
        j3 = asyncio.ensure_future(_join(back, _req(follower.member_id, ib, meta=b"n")))
        r2, r3 = await asyncio.gather(j2, j3)
        lead = r2 if r2.leader == r2.member_id else r3
        back.persist = True
        out = back.sync(lead.member_id, back.generation, assigns, 7.0, ia if lead is r2 else ib)
        back.synced(back.generation, ErrorCode.coordinator_not_available, 7.0)
        assert isinstance(out, Deferred)
        assert (await wait(out))[0] == ErrorCode.coordinator_not_available
        assert back.state == GroupState.PREPARING

    asyncio.run(go())


def test_group_metadata_values_read_back_and_damage_is_refused() -> None:
    from keeperless.coordinator.group_records import (
        GroupSnapshot,
        MemberSnapshot,
        decode_group_value,
        encode_group_value,
        group_key,
    )

    snap = GroupSnapshot("consumer", 7, "range", "m1", 99, (
        MemberSnapshot("m1", None, "c1", "/h", 300, 10, b"sub", b"as"),
        MemberSnapshot("m2", "static-2", "c2", "/h2", 200, 20, b"", b""),
    ))  # fmt: skip
    value = encode_group_value(snap)
    assert decode_group_value(value) == snap
    assert group_key("g") == b"\x00\x02\x00\x01g"
    assert decode_group_value(value[:-3]) is None  # cut short
    assert decode_group_value(b"\x00\x04" + value[2:]) is None  # the flexible version


_ALL = (GroupState.EMPTY, GroupState.PREPARING, GroupState.COMPLETING, GroupState.STABLE,
        GroupState.DEAD)  # fmt: skip
_KAFKA = {  # Kafka's ClassicGroupState: a state and where a group may come to it from
    GroupState.EMPTY: {GroupState.PREPARING},
    GroupState.PREPARING: {GroupState.STABLE, GroupState.COMPLETING, GroupState.EMPTY},
    GroupState.COMPLETING: {GroupState.PREPARING},
    GroupState.STABLE: {GroupState.COMPLETING},
    GroupState.DEAD: set(_ALL),
}


@pytest.mark.parametrize(("src", "dst"), [(a, b) for a in _ALL for b in _ALL])
def test_classic_group_transitions_row_by_row(src: str, dst: str) -> None:
    g = Group("g", 0, LoopTimer(), state=src)
    if src in _KAFKA[dst]:
        g.become(dst)
        assert g.state == dst
    else:
        with pytest.raises(ValueError, match="should be in one of"):
            g.become(dst)
        assert g.state == src


def test_the_last_member_leaving_a_stable_group_rebalances_it_to_empty() -> None:
    """Kafka's path: Stable -> PreparingRebalance -> Empty, with a new generation (no
    shortcut from Stable to Empty, which Kafka's table does not allow)."""

    class Recorded(Group):
        def become(self, state: str) -> None:
            moves.append((self.state, state))
            super().become(state)

    moves: list[tuple[str, str]] = []

    async def run() -> None:
        g = Recorded("g", 0, LoopTimer())
        seen: list[str] = []
        g.on_empty = lambda e: seen.append(e.state)
        res = await _join(g, _req(), version=3)
        out = g.sync(res.member_id, res.generation, {res.member_id: b"a"}, 0.0)
        assert (await wait(out) if isinstance(out, Deferred) else out) == (ErrorCode.none, b"a")
        assert g.state == GroupState.STABLE
        moves.clear()
        assert g.leave(res.member_id, 1.0) == ErrorCode.none
        assert (g.state, g.generation, seen) == (GroupState.EMPTY, res.generation + 1, ["Empty"])
        assert moves == [(GroupState.STABLE, GroupState.PREPARING),
                         (GroupState.PREPARING, GroupState.EMPTY)]  # fmt: skip

    asyncio.run(run())


class _ManualTimer:
    """The coordinator's timer, fired by hand: the rules need no event loop."""

    def __init__(self) -> None:
        self.due: dict[str, tuple[float, Any]] = {}

    def schedule(self, key: str, delay_s: float, fn: Any) -> None:
        self.due[key] = (delay_s, fn)

    def cancel(self, key: str) -> None:
        self.due.pop(key, None)

    def fire(self, key: str) -> None:
        _, fn = self.due.pop(key)
        fn()


def test_the_first_generation_waits_for_the_initial_delay_timer_without_an_event_loop() -> None:
    """group.initial.rebalance.delay.ms as a timer of the coordinator's: the joins wait
    (deferred answers) until it fires, then all get the first generation; a rebalance
    completed early cancels its deadline."""
    timer = _ManualTimer()
    g = Group("g", 3000, timer, 1)
    a = g.join(_req(instance="ia"), "c", "/h", 9, 0.0)
    b = g.join(_req(instance="ib"), "c", "/h", 9, 0.5)
    assert isinstance(a, Deferred)
    assert isinstance(b, Deferred)
    key = "classic-group-join:g"
    assert timer.due[key][0] == 3.0  # the initial delay, not the rebalance timeout
    assert not a.done()
    assert not b.done()
    timer.fire(key)
    assert a.result().generation == b.result().generation == 1
    assert g.state == GroupState.COMPLETING
    assert g.join_deadline is None
    # a member leaves during the next rebalance and the other rejoins: it completes at
    # once, and the deadline's timer is dropped
    ra = a.result()
    g.sync(ra.member_id, 1, {ra.member_id: b"A", b.result().member_id: b"B"}, 1.0, "ia")
    assert g.state == GroupState.STABLE
    again = g.join(_req(ra.member_id, "ia", meta=b"new"), "c", "/h", 9, 2.0)
    assert isinstance(again, Deferred)
    assert timer.due[key][0] == SESSION.total_seconds()  # the rebalance timeout
    assert g.leave(b.result().member_id, 2.5, "ib") == ErrorCode.none
    assert again.result().generation == 2
    assert key not in timer.due
