"""The voter set of a dynamic quorum (KIP-853): its records, its history in the log, and
the leader's refusals of voter changes in Kafka's words."""

from __future__ import annotations

import uuid

import pytest

from keeperless.protocol.records import build_batch
from keeperless.raft import messages as m
from keeperless.raft.core import MembershipError
from keeperless.raft.voters import (
    Endpoint,
    Voter,
    VoterHistory,
    VoterSet,
    voters_in_batch,
    voters_in_snapshot,
    voters_records,
)
from tests.sim.raft_sim import Simulation

D1, D2, D3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def test_voters_record_round_trip_with_kraft_version_and_endpoints() -> None:
    vs = VoterSet.of(
        [Voter(2, D2, (Endpoint("CONTROLLER", "h2", 9093),)), Voter(1, D1), Voter(3, None)]
    )
    assert vs.ids == (1, 2, 3)
    assert voters_in_batch(voters_records(vs)) == (None, vs)
    assert voters_in_batch(voters_records(vs, kraft_version=1)) == (1, vs)
    # a snapshot: the voters' control batch, then the state machine's own batches
    data = voters_records(vs, kraft_version=1) + build_batch([(None, b"x", ())])
    assert voters_in_snapshot(data) == (1, vs)
    assert voters_in_snapshot(build_batch([(None, b"x", ())])) == (None, None)
    assert voters_in_snapshot(b"not batches") == (None, None)


def test_a_voter_is_its_id_and_its_directory() -> None:
    vs = VoterSet.of([Voter(1, D1), Voter(2, None)])
    assert vs.has(1, D1)
    assert not vs.has(1, D2)  # the same controller with another disk is not that voter
    assert not vs.has(1, None)
    assert vs.has(2, D3)  # a static voter is known by id only
    with pytest.raises(ValueError, match="twice"):
        VoterSet.of([Voter(1, D1), Voter(1, D2)])


def test_history_follows_truncation_snapshots_and_compaction() -> None:
    a, b, c = VoterSet.static([1]), VoterSet.static([1, 2]), VoterSet.static([1, 2, 3])
    h = VoterHistory(a)
    h.add(10, b)
    h.add(20, c)
    assert (h.latest, h.latest_offset) == (c, 20)
    assert h.at(9) == a
    assert h.at(10) == b
    assert h.at(19) == b
    assert h.at(25) == c
    h.truncate(20)  # the record at 20 is cut off: the set before it is back
    assert (h.latest, h.latest_offset) == (b, 10)
    h.compact(15)  # a snapshot ending at 15 holds the set recorded at 10
    assert (h.latest, h.latest_offset) == (b, 10)
    assert h.at(12) == b
    h.truncate(0)  # never below the base
    assert h.latest == b
    h.reset(c, 99)
    assert (h.latest, h.latest_offset) == (c, 99)


def _leader_of_dynamic_quorum() -> Simulation:
    sim = Simulation(7, voters=3, observers=2, faults=False, membership=True)
    sim.run(1500, chaos=False)
    return sim


def _refusal(sim: Simulation, fn) -> MembershipError:  # type: ignore[no-untyped-def]
    leader = sim.leader()
    assert leader is not None
    assert leader.core is not None
    with pytest.raises(MembershipError) as e:
        fn(leader.core, sim._local(leader))  # (the node's own clock)
    return e.value


def test_voter_changes_and_kafkas_refusals() -> None:
    sim = _leader_of_dynamic_quorum()
    leader = sim.leader()
    assert leader is not None
    assert leader.core is not None
    core = leader.core
    # the bootstrap voter set was written into the log by the first leader
    assert core.voter_set.ids == (1, 2, 3)
    assert core._history.latest_offset >= 0
    n4 = sim.nodes[4]
    err = _refusal(sim, lambda c, now: c.add_voter(Voter(2, sim.nodes[2].directory_id), now))
    assert err.code == m.DUPLICATE_VOTER
    assert "already part of the set of voters" in str(err)
    err = _refusal(sim, lambda c, now: c.add_voter(Voter(4, uuid.uuid4()), now))
    assert err.code == m.REQUEST_TIMED_OUT
    assert "lagging behind" in str(err)
    err = _refusal(sim, lambda c, now: c.remove_voter(2, uuid.uuid4(), now))
    assert err.code == m.VOTER_NOT_FOUND
    assert "Cannot remove voter" in str(err)
    offset = core.add_voter(Voter(4, n4.directory_id), sim._local(leader))
    err = _refusal(sim, lambda c, now: c.remove_voter(2, sim.nodes[2].directory_id, now))
    assert err.code == m.REQUEST_TIMED_OUT
    assert "commit the latest voter change" in str(err)
    assert core.pending_voter_change() == offset
    sim._process(leader)
    sim.run(500, chaos=False)
    assert core.pending_voter_change() is None
    assert all(
        n.core is not None and n.core.voter_set.ids == (1, 2, 3, 4) for n in sim.nodes.values()
    )
    assert sim.nodes[4].core is not None
    assert sim.nodes[4].core.is_voter
    # the leader removes itself: it commits the change without itself, then resigns
    me = leader.node_id
    core.remove_voter(me, leader.directory_id, sim._local(leader))
    sim._process(leader)
    sim.run(3000, chaos=False)
    new = sim.leader()
    assert new is not None
    assert new.node_id != me
    assert me not in new.core.voters  # type: ignore[union-attr]
    assert leader.core is not None
    assert not leader.core.is_voter
    assert leader.core.applied == new.core.applied  # type: ignore[union-attr]
    sim.check_full_agreement()


def test_a_static_quorum_refuses_voter_changes() -> None:
    sim = Simulation(3, voters=3, observers=1, faults=False)
    sim.run(1500, chaos=False)
    err = _refusal(sim, lambda c, now: c.add_voter(Voter(4), now))
    assert err.code == m.UNSUPPORTED_VERSION
    assert str(err) == "Cluster doesn't support adding voter because the kraft.version feature is 0"


def test_kraft_version_upgrade_needs_every_voters_directory_id() -> None:
    sim = Simulation(3, voters=3, observers=1, faults=False)
    sim.run(1500, chaos=False)
    err = _refusal(sim, lambda c, now: c.upgrade_kraft_version(1, {}, now))
    assert err.code == m.INVALID_UPDATE_VERSION
    assert "has not fetched with a directory id" in str(err)
    err = _refusal(sim, lambda c, now: c.upgrade_kraft_version(2, {}, now))
    assert "only supports versions 0-1" in str(err)
    # a dry run (kafka-features --dry-run) makes the same checks and changes nothing
    err = _refusal(sim, lambda c, now: c.upgrade_kraft_version(1, {}, now, dry_run=True))
    assert "has not fetched with a directory id" in str(err)
    leader = sim.leader()
    assert leader is not None
    assert leader.core is not None
    assert leader.core.kraft_version == 0


def test_a_change_that_would_leave_no_live_majority_is_refused() -> None:
    """Voter 2 of 1-2-3 is down: removing the live voter 3 would leave 1-2, whose
    majority needs the dead one; the leader refuses, naming who is down."""
    sim = _leader_of_dynamic_quorum()
    leader = sim.leader()
    assert leader is not None
    live = [i for i in (1, 2, 3) if i != leader.node_id]
    sim.crash(live[0])
    sim.run(1000, chaos=False)
    leader = sim.leader()
    assert leader is not None
    other = sim.nodes[live[1]]
    err = _refusal(sim, lambda c, now: c.remove_voter(other.node_id, other.directory_id, now))
    assert err.code == m.INVALID_REQUEST
    assert "without a live majority" in str(err)
    assert f"{live[0]}-" in str(err).split("majority:")[1]
    # removing the dead voter is what the operator should do, and is taken
    dead = sim.nodes[live[0]]
    core = leader.core
    assert core is not None
    core.remove_voter(dead.node_id, dead.directory_id, sim._local(leader))
