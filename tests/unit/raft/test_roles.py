"""The Raft role states (raft/roles.py): each role has its own object, a transition gives
the new role a fresh one, and nothing of a role is left behind when it ends."""

from __future__ import annotations

import random

from keeperless.raft import messages as m
from keeperless.raft.core import RaftConfig, RaftCore
from keeperless.raft.log import MemoryLog
from keeperless.raft.roles import (
    CandidateState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from keeperless.raft.state import ElectionState, Role

CONFIG = RaftConfig()


def _core(node_id: int = 1, voters: tuple[int, ...] = (1, 2, 3), now: int = 0) -> RaftCore:
    core = RaftCore(node_id, voters, MemoryLog(), ElectionState(), CONFIG, random.Random(7), now)
    core.start(now)
    core.ready()
    return core


def _lead(core: RaftCore, now: int) -> None:
    """Win an election: pre-votes, then votes, from voter 2."""
    core.tick(now + 10 * CONFIG.election_timeout_ms)
    for pre_vote in (True, False):
        (req,) = [x for x in core.ready().messages if isinstance(x, m.VoteRequest) and x.dst == 2]
        assert req.pre_vote is pre_vote
        core.step(m.VoteResponse(2, 1, req.epoch, True, -1, pre_vote, m.NONE, req.request_id), now)
    assert core.role is Role.LEADER


def test_each_role_has_one_state_class_naming_it() -> None:
    classes = [
        UnattachedState,
        FollowerState,
        ProspectiveState,
        CandidateState,
        LeaderState,
        ResignedState,
    ]
    assert sorted(c.role.value for c in classes) == sorted(r.value for r in Role)


def test_a_leader_that_resigns_keeps_nothing_of_its_leadership() -> None:
    core = _core()
    _lead(core, 0)
    leader = core.current
    assert isinstance(leader, LeaderState)
    assert set(leader.progress) == {2, 3}
    # a caught-up voter long-polls: its fetch is parked at the leader
    end = core.log.end_offset
    core.step(m.FetchRequest(2, 1, core.epoch, end, core.epoch, 500, 11, None), 20_000)
    core.tick(20_000)
    core.ready()
    core.step(m.FetchRequest(3, 1, core.epoch, end, core.epoch, 500, 12, None), 20_001)
    assert [r.request_id for r, _ in leader.parked] == [12]
    core.resign(20_002)
    assert isinstance(core.current, ResignedState)
    # the parked fetch learns at once that this node no longer leads
    answers = [x for x in core.ready().messages if isinstance(x, m.FetchResponse)]
    assert [(a.request_id, a.error) for a in answers] == [(12, m.NOT_LEADER_OR_FOLLOWER)]
    assert core.describe(20_003) is None  # no replica progress outlives the leadership
    assert not hasattr(core.current, "progress")


def test_a_fetch_in_flight_does_not_outlive_the_follower_that_sent_it() -> None:
    core = _core(node_id=2)
    core.step(m.BeginQuorumEpoch(1, 2, 1, 1), 0)
    follower = core.current
    assert isinstance(follower, FollowerState)
    assert follower.leader_contact_ms == 0
    core.tick(1)
    (fetch,) = [x for x in core.ready().messages if isinstance(x, m.FetchRequest)]
    assert follower.fetch.request == fetch
    # the leader goes quiet: the follower stands for election, then follows again
    core.tick(1 + CONFIG.fetch_timeout_ms + 1)
    assert isinstance(core.current, ProspectiveState)
    assert core.current.votes == {2: True}
    core.step(m.BeginQuorumEpoch(1, 2, 1, 1), 5_000)
    again = core.current
    assert isinstance(again, FollowerState)
    assert again is not follower
    core.ready()
    # the answer to the first fetch arrives late: it answers no fetch of this follower
    late = m.FetchResponse(
        1, 2, 1, 1, m.NONE, 0, 0, (), None, None, fetch.fetch_offset,
        fetch.last_fetched_epoch, fetch.request_id,
    )  # fmt: skip
    core.step(late, 5_001)
    assert again.leader_contact_ms == 5_000  # (the late answer did not count as contact)


def _follow(core: RaftCore, now: int) -> m.FetchRequest:
    """Follow leader 1 of epoch 1; the fetch the follower then sends."""
    core.step(m.BeginQuorumEpoch(1, 2, 1, 1), now)
    core.tick(now)
    (fetch,) = [x for x in core.ready().messages if isinstance(x, m.FetchRequest)]
    return fetch


def test_a_snapshot_half_fetched_starts_over_in_the_next_role() -> None:
    """As Kafka's FollowerState holds the snapshot being fetched: a role change drops it,
    so chunks of two leaders' copies are never spliced together."""
    core = _core(node_id=2)
    fetch = _follow(core, 0)
    sid = m.SnapshotId(10, 1)
    core.step(
        m.FetchResponse(1, 2, 1, 1, m.NONE, 10, 10, (), None, sid, fetch.fetch_offset,
                        fetch.last_fetched_epoch, fetch.request_id),
        1,
    )  # fmt: skip
    (chunk_req,) = [x for x in core.ready().messages if isinstance(x, m.FetchSnapshotRequest)]
    assert (chunk_req.snapshot, chunk_req.position) == (sid, 0)
    core.step(
        m.FetchSnapshotResponse(1, 2, 1, 1, m.NONE, sid, 1000, 0, b"x" * 500,
                                chunk_req.request_id),
        2,
    )  # fmt: skip
    (next_req,) = [x for x in core.ready().messages if isinstance(x, m.FetchSnapshotRequest)]
    assert next_req.position == 500
    # the leader goes quiet: the follower stands for election, then follows again
    core.tick(2 + CONFIG.fetch_timeout_ms + 1)
    assert isinstance(core.current, ProspectiveState)
    core.ready()
    again = _follow(core, 5_000)
    follower = core.current
    assert isinstance(follower, FollowerState)
    assert follower.snapshot is None
    assert isinstance(again, m.FetchRequest)  # from the log, as the leader then says


def test_only_contact_with_the_leader_it_follows_makes_a_follower_refuse_pre_votes() -> None:
    core = _core(node_id=2)
    fetch = _follow(core, 0)
    # leader 1 answers: node 3 leads epoch 2 now (hearsay about 3, contact with 1)
    core.step(
        m.FetchResponse(1, 2, 2, 3, m.FENCED_LEADER_EPOCH, fetch_offset=fetch.fetch_offset,
                        last_fetched_epoch=fetch.last_fetched_epoch,
                        request_id=fetch.request_id),
        100,
    )  # fmt: skip
    follower = core.current
    assert isinstance(follower, FollowerState)
    assert (core.epoch, core.leader_id) == (2, 3)
    core.ready()
    core.step(m.VoteRequest(1, 2, 2, 0, core.log.end_offset, pre_vote=True, request_id=5), 200)
    (answer,) = [x for x in core.ready().messages if isinstance(x, m.VoteResponse)]
    assert answer.granted  # it never heard from 3 itself
    # once 3 announces itself, the follower refuses pre-votes while 3 is live
    core.step(m.BeginQuorumEpoch(3, 2, 2, 3), 300)
    core.step(m.VoteRequest(1, 2, 2, 0, core.log.end_offset, pre_vote=True, request_id=6), 400)
    (answer,) = [x for x in core.ready().messages if isinstance(x, m.VoteResponse)]
    assert not answer.granted
