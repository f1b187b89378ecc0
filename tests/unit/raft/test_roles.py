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
