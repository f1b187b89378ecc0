"""Scenario tests of the Raft core, step by step, after etcd's raft_paper_test.go.

Each test drives a hand-built network (tests/sim/paper_net.py) message by message to a
situation from the Raft paper (Ongaro & Ousterhout, 2014), KIP-595 or KIP-996, and
checks the rule that must hold there. ``make mutants`` plants each rule's classic bug
and shows which of these tests fail (every test here fails for at least one mutant).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from keeperless.raft import messages as m
from keeperless.raft.core import NotLeaderError, Role
from tests.sim.paper_net import CONFIG, Net


def skip_past_fetch_timeout(net: Net) -> None:
    """Let time pass (without ticking anyone) so that no one has heard from a leader
    recently: pre-votes may then be granted."""
    net.now += CONFIG.fetch_timeout_ms + 1


def campaign(net: Net, i: int, voters: list[int], tries: int = 4) -> None:
    """Node ``i`` times out until it wins with the votes of ``voters`` (a campaign that
    learns of a higher epoch ends, and the next one stands in it)."""
    group = {i, *voters}
    for _ in range(tries):
        skip_past_fetch_timeout(net)
        net.timeout(i)
        while net.wave(net.among(group)):
            if net.core(i).role is Role.LEADER:
                break
        if net.core(i).role is Role.LEADER:
            net.drop(lambda msg: msg.src == i and msg.dst not in group)
            return
    raise AssertionError(f"node {i} did not win: {net.core(i).role}")


def test_figure_8_an_earlier_epoch_is_committed_only_by_the_current_one() -> None:
    """§5.4.2: "Raft never commits log entries from previous terms by counting replicas.
    Only log entries from the leader's current term are committed by counting replicas."
    Figure 8: an entry of epoch 1 reaches a majority while a leader of epoch 3 leads; it
    must not count as committed, because a leader of epoch 4 may still erase it."""
    net = Net(5, config=dataclasses.replace(CONFIG, max_fetch_entries=1))
    net.elect(1, [2, 3, 4, 5])
    net.replicate(1, [2, 3, 4, 5])
    # (a) S1 leads epoch 1; x reaches S2 only
    x = net.propose(1, b"x")
    net.replicate(1, [2])
    assert net.core(1).high_watermark == x  # x not committed
    # (b) S1 crashes; S5 leads epoch 2 (votes of S3, S4) and appends without replicating
    net.crash(1)
    campaign(net, 5, [3, 4])
    assert net.core(5).epoch == 2
    net.crash(5)
    # (c) S1 restarts and leads epoch 3 (S2, S3); x reaches S3: a majority holds x
    net.restart(1)
    campaign(net, 1, [2, 3])
    assert net.core(1).epoch == 3
    net.wave(lambda msg: isinstance(msg, m.BeginQuorumEpoch) and msg.dst in (2, 3))
    for _ in range(6):  # fetches of S2, S3; S1's own-epoch entry never reaches them
        net.advance(1, [1, 2, 3])
        net.drop(
            lambda msg: isinstance(msg, m.FetchResponse) and any(e.epoch == 3 for e in msg.entries)
        )
        net.wave(net.among({1, 2, 3}))
    holders = [i for i in (1, 2, 3) if (x, 1) in net.log_of(i)]
    assert holders == [1, 2, 3], "x should be on a majority (S1, S2, S3)"
    assert net.core(1).high_watermark <= x, "x, of an earlier epoch, counted as committed"
    # (d) S1 crashes; S5 wins epoch 4 (S2, S3, S4: its last epoch, 2, beats theirs) and
    # replaces x everywhere: had x been committed, a committed entry would be lost now
    net.crash(1)
    net.restart(5)
    campaign(net, 5, [2, 3, 4])
    net.replicate(5, [2, 3, 4])
    for i in (2, 3, 4, 5):
        assert (x, 1) not in net.log_of(i)
        assert net.log_of(i) == net.log_of(5)


def test_a_granted_vote_of_an_older_epoch_does_not_count() -> None:
    """§5.1: terms "act as a logical clock"; a vote is for one candidate in one term.
    A vote granted to node 1 in epoch 1, delivered late while it campaigns in epoch 2,
    must not count towards epoch 2."""
    net = Net(3)
    skip_past_fetch_timeout(net)
    net.timeout(1)  # pre-vote
    net.wave(net.among({1, 2, 3}))  # pre-votes asked and ...
    net.wave(net.among({1, 2, 3}))  # ... granted: candidate in epoch 1
    assert (net.core(1).role, net.core(1).epoch) == (Role.CANDIDATE, 1)
    net.wave(lambda msg: isinstance(msg, m.VoteRequest) and msg.dst == 2)
    net.drop(lambda msg: msg.dst == 3)
    (old_grant,) = net.take(lambda msg: isinstance(msg, m.VoteResponse) and msg.dst == 1)
    assert old_grant.granted
    assert old_grant.epoch == 1
    # node 1 gives up on epoch 1 and stands in epoch 2 (pre-vote granted by node 3)
    net.timeout(1)
    net.drop(lambda msg: msg.dst == 2)
    net.wave(lambda msg: msg.dst == 3)
    net.wave(lambda msg: msg.dst == 1)
    assert (net.core(1).role, net.core(1).epoch) == (Role.CANDIDATE, 2)
    held = net.take(lambda msg: isinstance(msg, m.VoteRequest))
    net.deliver(old_grant)
    assert net.core(1).role is Role.CANDIDATE, "counted a vote from epoch 1 in epoch 2"
    for req in held:
        net.deliver(req)
    net.wave(lambda msg: msg.dst == 1)
    assert (net.core(1).role, net.core(1).epoch) == (Role.LEADER, 2)


def test_a_restarted_voter_remembers_its_vote() -> None:
    """§5.2: "Each server will vote for at most one candidate in a given term"; Figure 2:
    votedFor is persistent state, "updated on stable storage before responding". A voter
    that granted node 1 its vote in epoch 1 and restarted refuses node 3 in epoch 1 and
    grants node 1 again (its retransmitted request)."""
    net = Net(3)
    skip_past_fetch_timeout(net)
    net.timeout(1)
    net.wave(net.among({1, 2, 3}))
    net.wave(net.among({1, 2, 3}))
    (req,) = net.take(lambda msg: isinstance(msg, m.VoteRequest) and msg.dst == 2)
    net.deliver(req)
    (grant,) = net.take(lambda msg: isinstance(msg, m.VoteResponse) and msg.src == 2)
    assert grant.granted
    assert (net.nodes[2].state.epoch, net.nodes[2].state.voted_id) == (1, 1)
    net.crash(2)
    net.restart(2)
    net.deliver(m.VoteRequest(3, 2, 1, 0, 1, request_id=77))
    (refusal,) = net.take(lambda msg: isinstance(msg, m.VoteResponse) and msg.dst == 3)
    assert not refusal.granted, "voted twice in epoch 1"
    net.deliver(dataclasses.replace(req, request_id=78))
    (again,) = net.take(lambda msg: isinstance(msg, m.VoteResponse) and msg.dst == 1)
    assert again.granted
    assert net.nodes[2].state.voted_id == 1


@pytest.mark.parametrize(
    ("last_epoch", "end_offset"),
    [(0, 0), (0, 100)],
    ids=["shorter-log", "longer-log-of-an-older-epoch"],
)
def test_a_higher_epoch_with_a_less_up_to_date_log_gets_no_vote(
    last_epoch: int, end_offset: int
) -> None:
    """§5.1: "If a server receives a request with a stale term number... if one server's
    current term is smaller than the other's, then it updates its current term"; §5.4.1:
    "the voter denies its vote if its own log is more up-to-date than that of the
    candidate... If the logs have last entries with different terms, then the log with
    the later term is more up-to-date." A candidate of epoch 5 whose log ends in an
    older epoch moves the leader and a follower to epoch 5 but gets no vote."""
    net = Net(3)
    net.elect(1, [2, 3])
    net.propose(1, b"a")
    net.replicate(1, [2, 3])
    for i in (2, 1):  # a follower, then the leader itself
        net.deliver(m.VoteRequest(3, i, 5, last_epoch, end_offset, request_id=5))
        (resp,) = net.take(lambda msg, i=i: isinstance(msg, m.VoteResponse) and msg.src == i)
        core = net.core(i)
        assert not resp.granted, f"node {i} voted for a less up-to-date log"
        assert (core.epoch, core.role, net.nodes[i].state.voted_id) == (5, Role.UNATTACHED, -1)


def test_pre_vote_keeps_a_rejoining_node_from_deposing_a_live_leader() -> None:
    """KIP-996 (Raft thesis §9.6): a node that was partitioned away times out again and
    again; with pre-vote it asks whether it could win before it moves to a new epoch.
    Back in the network, its pre-votes are refused while the leader is alive, so it
    neither inflates the epoch nor deposes the leader."""
    net = Net(3)
    net.elect(1, [2, 3])
    net.replicate(1, [2, 3])
    for _ in range(10):  # node 3 is cut off; node 1 and node 2 carry on
        net.advance(50)
        net.drop(lambda msg: 3 in (msg.src, msg.dst))
        net.replicate(1, [2])
    assert net.core(3).epoch == 1, "a partitioned node moved to a new epoch on its own"
    net.timeout(3)  # reconnected, campaigning
    for _ in range(6):
        net.wave()
        net.advance(1)
    assert (net.core(1).role, net.core(1).epoch) == (Role.LEADER, 1)
    assert (net.core(2).epoch, net.core(2).leader_id) == (1, 1)


def test_a_voter_stranded_in_a_newer_epoch_brings_the_quorum_to_it() -> None:
    """KIP-996 as Kafka implements it: a pre-vote carries the sender's current epoch, and
    a voter (even the leader) that receives one from a newer epoch moves to it. Node 1,
    cut off, won a pre-vote and stood as candidate in epoch 2, but nobody heard its vote
    requests; the leader of epoch 1 goes on. Back in the network, node 1 can neither win
    epoch 2 nor go back to epoch 1; its pre-votes in epoch 2 must bring everyone to epoch
    2 so that an election in epoch 3 reunites the quorum (found by seeds 11872 and 13904
    of make sim SEEDS=20000: the node stayed out of the quorum for good)."""
    net = Net(3)
    net.elect(3, [1, 2])
    net.replicate(3, [1, 2])
    skip_past_fetch_timeout(net)  # nobody has heard from leader 3 lately
    net.timeout(1)
    net.wave(lambda msg: msg.src == 1 and msg.dst == 2)  # pre-vote to node 2 only
    net.wave(lambda msg: msg.src == 2 and msg.dst == 1)  # granted
    assert (net.core(1).role, net.core(1).epoch) == (Role.CANDIDATE, 2)
    while net.core(1).role is Role.CANDIDATE:  # its vote requests are lost until it
        net.drop(lambda msg: msg.src == 1)  # gives up the candidacy
        net.timeout(1)
    net.drop(lambda msg: msg.src == 1)
    assert (net.core(1).role, net.core(1).epoch) == (Role.PROSPECTIVE, 2)
    net.replicate(3, [2])  # node 2 hears from leader 3 again
    assert (net.core(3).role, net.core(3).epoch) == (Role.LEADER, 1)

    def reunited() -> bool:
        leaders = [i for i in net.nodes if net.core(i).role is Role.LEADER]
        return (
            len(leaders) == 1
            and all(net.core(i).epoch == net.core(leaders[0]).epoch for i in net.nodes)
            and all(net.core(i).leader_id == leaders[0] for i in net.nodes)
        )

    net.deliver_until(reunited, lambda _: True, waves=3000)
    assert net.core(1).epoch >= 3


def test_check_quorum_a_cut_off_leader_resigns() -> None:
    """KIP-595 (check quorum): a leader that has not been fetched from by a majority
    of the voters within the fetch timeout resigns, so that clients stop writing to a
    leader that cannot commit; until then it leads."""
    net = Net(3)
    net.elect(1, [2, 3])
    net.replicate(1, [2, 3])
    net.drop()
    net.advance(CONFIG.fetch_timeout_ms // 2, [1])
    net.drop()
    assert net.core(1).role is Role.LEADER
    net.advance(CONFIG.fetch_timeout_ms, [1])
    assert net.core(1).role is Role.RESIGNED
    with pytest.raises(NotLeaderError):
        net.propose(1, b"lost")


def _observer_with_divergent_tail(snapshot: bool) -> tuple[Net, list[tuple[int, int]]]:
    """Leader 1 (epoch 1) commits a, b; then writes u1, u2 (u1..u4 with a snapshot) that
    only observer 4 fetches; it crashes; node 2 leads epoch 2 and commits c, d and
    snapshots them (the observer's log then ends past the snapshot, so the leader must
    look for the divergence and find it inside the snapshot), or without a snapshot only
    c, so that its log ends where the observer's did: at 5."""
    net = Net(3, observers=1)
    net.elect(1, [2, 3])
    for v in (b"a", b"b"):
        net.propose(1, v)
    net.replicate(1, [2, 3, 4])
    uncommitted = [b"u1", b"u2", b"u3", b"u4"] if snapshot else [b"u1", b"u2"]
    for v in uncommitted:
        net.propose(1, v)
    net.replicate(1, [4])
    tail = net.log_of(4)[-len(uncommitted) :]
    assert net.core(1).high_watermark == 3  # u1, u2 are not committed
    net.crash(1)
    campaign(net, 2, [3])
    for v in (b"c", b"d") if snapshot else (b"c",):
        net.propose(2, v)
    net.replicate(2, [3])
    if snapshot:
        leader = net.core(2)
        end = leader.high_watermark
        data = json.dumps([(o, v.hex()) for o, v in net.nodes[2].applied if o < end])
        leader.take_snapshot(end, data.encode())
        assert tail[0][0] < leader.log.start_offset < net.core(4).log_end_offset
    return net, tail


def _observer_follows(net: Net) -> None:
    net.drop(lambda msg: msg.dst == 1)

    def caught_up() -> bool:
        return (
            net.log_of(4) == net.log_of(2)
            and net.core(4).high_watermark == net.core(2).high_watermark
        )

    net.deliver_until(caught_up, lambda msg: msg.dst != 1, waves=600)


def test_an_observer_diverging_inside_a_snapshot_loads_it() -> None:
    """KIP-630: when a fetcher's log diverges from the leader's at an offset the leader
    has already compacted into a snapshot, the leader sends the snapshot's id and the
    fetcher replaces its log by it; its uncommitted tail goes and nothing applied is
    lost."""
    net, tail = _observer_with_divergent_tail(snapshot=True)
    _observer_follows(net)
    observer = net.core(4)
    assert observer.log.snapshot_id == net.core(2).log.snapshot_id
    assert all(e not in net.log_of(4) for e in tail)
    assert net.nodes[4].applied == net.nodes[2].applied[: len(net.nodes[4].applied)]
    assert [v for _, v in net.nodes[4].applied] == [b"a", b"b", b"c", b"d"]


def test_a_stale_duplicate_of_a_diverging_answer_is_ignored() -> None:
    """KIP-595: a fetcher truncates to where the leader says its log diverges. A copy of
    that answer arriving again after the fetcher has truncated and grown back to the same
    offset answers a fetch it no longer has in flight: it is dropped (acting on it
    truncated applied entries: seeds 3577 and 5073 of the old simulation)."""
    net, _tail = _observer_with_divergent_tail(snapshot=False)
    copies: list[m.Message] = []

    def keep_diverging(msg: m.Message) -> bool:
        if isinstance(msg, m.FetchResponse) and msg.diverging is not None and msg.dst == 4:
            copies.append(msg)
        return msg.dst != 1

    net.drop(lambda msg: msg.dst == 1)
    net.deliver_until(
        lambda: (
            net.log_of(4) == net.log_of(2)
            and net.core(4).high_watermark == net.core(2).high_watermark
        ),
        keep_diverging,
        waves=600,
    )
    assert copies, "the observer never got a diverging answer"
    stale = copies[0]
    assert isinstance(stale, m.FetchResponse)
    assert net.core(4).log_end_offset == stale.fetch_offset, "not grown back to the offset"
    before, applied = net.log_of(4), list(net.nodes[4].applied)
    net.deliver(stale)
    assert net.log_of(4) == before
    assert net.nodes[4].applied == applied
    assert [v for _, v in applied] == [b"a", b"b", b"c"]


def test_a_fetch_answer_holds_at_most_max_fetch_bytes_of_entries_but_always_one() -> None:
    """A fetch answer is bounded in bytes as well as entries (an answer of 64 large
    metadata batches could pass what the fetcher reads in one response), and a single
    entry larger than the bound still goes (or the fetcher could never pass it)."""
    import dataclasses

    from tests.sim.paper_net import CONFIG, Net

    config = dataclasses.replace(CONFIG, max_fetch_bytes=2_500)
    net = Net(voters=3, config=config)
    net.elect(1, [2, 3])
    for value in (b"a" * 1_000, b"b" * 1_000, b"c" * 1_000, b"d" * 5_000, b"e" * 10):
        net.propose(1, value)
    answers: list[m.FetchResponse] = []

    def watch(msg: m.Message) -> bool:
        if isinstance(msg, m.FetchResponse) and msg.dst == 2 and msg.entries:
            answers.append(msg)
        return msg.dst in (1, 2) and msg.src in (1, 2)

    net.deliver_until(lambda: net.log_of(2) == net.log_of(1), watch, waves=200)
    sizes = [sum(len(e.data) for e in a.entries) for a in answers]
    assert all(s <= 2_500 or len(a.entries) == 1 for s, a in zip(sizes, answers, strict=True))
    assert any(len(a.entries) == 1 and s > 2_500 for s, a in zip(sizes, answers, strict=True))
    assert len(answers) >= 3


def test_a_snapshot_of_several_chunks_is_fetched_whole() -> None:
    """KIP-630: a snapshot larger than snapshot_chunk_bytes goes in FetchSnapshot chunks,
    each read at its position, none larger than a chunk, and the fetcher installs the
    whole of it (a snapshot past every chunk and window, issue 23's audit)."""
    from tests.sim.paper_net import CONFIG, Net

    net = Net(3, observers=1)
    net.elect(1, [2, 3])
    values = [bytes([65 + i]) * 400_000 for i in range(8)]
    for v in values:
        net.propose(1, v)
    net.replicate(1, [2, 3])
    leader = net.core(1)
    end = leader.high_watermark
    data = json.dumps([(o, v.hex()) for o, v in net.nodes[1].applied if o < end]).encode()
    assert len(data) > 3 * CONFIG.snapshot_chunk_bytes
    leader.take_snapshot(end, data)
    chunks: list[m.FetchSnapshotResponse] = []

    def watch(msg: m.Message) -> bool:
        if isinstance(msg, m.FetchSnapshotResponse) and msg.dst == 4:
            chunks.append(msg)
        return 4 in (msg.src, msg.dst)

    net.deliver_until(lambda: net.core(4).log.snapshot_id is not None, watch, waves=400)
    assert len(chunks) >= 4
    assert all(len(c.data) <= CONFIG.snapshot_chunk_bytes for c in chunks)
    by_position = {c.position: c.data for c in chunks}  # a fetch may be answered twice
    assert b"".join(by_position[pos] for pos in sorted(by_position)) == data
    assert net.core(4).log.snapshot_data() == data
    assert [v for _, v in net.nodes[4].applied][: len(values)] == values
