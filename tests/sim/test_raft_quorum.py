"""Seeded simulations of 3- and 5-voter KRaft quorums with observers.

`make test` runs SIM_SEEDS seeds (default 2000); `make sim SEEDS=N` runs more. A failure
prints its seed: replay it with  pytest tests/sim -k 'q3_seed_123' .
"""

from __future__ import annotations

import os

import pytest

from tests.sim.raft_sim import Simulation

SEEDS = int(os.environ.get("SIM_SEEDS", "2000"))


def run_seed(seed: int, voters: int, membership: bool = False, upgrade: bool = False) -> Simulation:
    observers = 1 + seed % 2
    # every fifth run, the first observer's configuration still lists it as a voter
    believers = (voters + 1,) if seed % 5 == 2 and not membership else ()
    sim = Simulation(
        seed,
        voters=voters,
        observers=observers,
        believers=believers,
        membership=membership,
        upgrade=upgrade,
    )
    sim.run(2000)
    sim.heal()
    sim.run(2000, chaos=False)
    sim.check_full_agreement()
    leader = sim.leader()
    assert leader is not None, f"seed {seed}: no leader 2 s after the faults healed"
    assert leader.core is not None
    for n in sim.nodes.values():
        assert n.core is not None
        assert n.core.applied == leader.core.applied, (
            f"seed {seed}: node {n.node_id} applied {n.core.applied}, "
            f"leader {leader.node_id} {leader.core.applied}"
        )
    return sim


@pytest.mark.parametrize("seed", range(SEEDS * 3 // 4), ids=lambda s: f"q3_seed_{s}")
def test_three_voters(seed: int) -> None:
    run_seed(seed, 3)


@pytest.mark.parametrize("seed", range(SEEDS // 4), ids=lambda s: f"q5_seed_{s}")
def test_five_voters(seed: int) -> None:
    run_seed(10_000 + seed, 5)


@pytest.mark.parametrize("seed", range(SEEDS // 4), ids=lambda s: f"m_seed_{s}")
def test_voter_changes(seed: int) -> None:
    """A dynamic quorum (KIP-853) of 3 voters and 1-2 observers: voters added and removed
    (the leader too), disks replaced, under every fault of the other runs."""
    run_seed(50_000 + seed, 3, membership=True, upgrade=seed % 4 == 1)


def test_voter_changes_happen() -> None:
    """The membership runs do change the voters: adds, removals, the leader's own
    removal, and replaced disks, across the first seeds."""
    seen: dict[str, int] = {}
    for seed in range(40):
        sim = run_seed(50_000 + seed, 3, membership=True, upgrade=seed % 4 == 1)
        for k, v in sim.changes.items():
            seen[k] = seen.get(k, 0) + v
    kinds = ("add", "remove", "remove-leader", "wipe", "upgrade")
    assert all(seen.get(k, 0) > 0 for k in kinds), seen


def test_no_faults_elects_quickly_and_commits() -> None:
    sim = Simulation(1, voters=3, observers=1, faults=False)
    sim.run(1000)
    leader = sim.leader()
    assert leader is not None
    assert sim.committed_hw > 10
    sim.check_full_agreement()


@pytest.mark.parametrize("seed", range(100), ids=lambda s: f"q1_seed_{s}")
def test_single_voter_with_crashes(seed: int) -> None:
    sim = Simulation(20_000 + seed, voters=1, observers=1)
    sim.run(1500)
    sim.heal()
    sim.run(1000, chaos=False)
    sim.check_full_agreement()
    leader = sim.leader()
    assert leader is not None
    assert leader.core is not None
    for n in sim.nodes.values():
        assert n.core is not None
        assert n.core.applied == leader.core.applied


@pytest.mark.parametrize("seed", range(50), ids=lambda s: f"majority_seed_{s}")
def test_majority_lost_and_regained(seed: int) -> None:
    """Kill the leader and a follower at once; restart the follower: the two live voters
    must elect a leader, even though both last followed the dead one."""
    sim = Simulation(30_000 + seed, voters=3, observers=1, faults=False)
    sim.run(600, chaos=False)
    leader = sim.leader()
    assert leader is not None
    follower = next(i for i in sim.voter_ids if i != leader.node_id)
    sim.crash(leader.node_id, "keep")
    sim.crash(follower, "lose" if seed % 2 == 0 else "keep")
    sim.run(300 + seed * 20, chaos=False)
    sim.restart(follower)
    sim.run(3000, chaos=False)
    new = sim.leader()
    assert new is not None, f"seed {seed}: no leader after the majority returned"
    assert new.node_id != leader.node_id


@pytest.mark.parametrize("seed", range(30), ids=lambda s: f"removed_seed_{s}")
def test_removed_voter_is_told_and_observes(seed: int) -> None:
    """Node 4 was removed from the voters but its configuration still lists it. Without
    a leader it campaigns; the voters answer INCONSISTENT_VOTER_SET and it goes on as an
    observer (until a restart with the same stale configuration). It never leads, is
    never counted in a quorum (the checker counts only real voters), and applies the
    same log as everyone."""
    sim = Simulation(40_000 + seed, voters=3, observers=1, believers=(4,))
    sim.run(2000)
    sim.heal()
    sim.run(2000, chaos=False)
    assert sim.told.get(4, 0) > 0, "node 4 was never told it is not a voter"
    assert all(sim.checker.leaders[e] != 4 for e in sim.checker.leaders)
    node4 = sim.nodes[4].core
    leader = sim.leader()
    assert node4 is not None
    assert leader is not None
    assert leader.core is not None
    # told and observing, or (restarted with its stale configuration) following a live
    # leader, which it can do without ever campaigning
    assert not node4.is_voter or node4.leader_id == leader.node_id
    assert node4.applied == leader.core.applied
    sim.check_full_agreement()
