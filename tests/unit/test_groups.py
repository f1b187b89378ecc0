"""The classic group protocol as Kafka's GroupCoordinator runs it: static membership
(KIP-345), member ids handed out and never used, repeated joins."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol

from keeperless.broker.groups import Group, GroupState, JoinResult

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
    return await out if isinstance(out, asyncio.Future) else out


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
        if isinstance(s, asyncio.Future):
            await s
    assert g.state == GroupState.STABLE
    return ra.member_id, rb.member_id


def test_a_restarted_static_member_gets_its_assignment_without_a_rebalance() -> None:
    async def go() -> None:
        g = Group("g", 0, 1)
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
        g = Group("g", 0, 1)
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
        g = Group("g", 0, 1)
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
        g = Group("g", 0, 1)
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
