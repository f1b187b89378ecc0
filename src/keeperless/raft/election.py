"""Elections (KIP-595 with KIP-996 pre-vote): a voter that lost its leader becomes
prospective and asks for pre-votes, then a candidate in the next epoch asking for real
votes; voters grant at most one real vote per epoch, durably, and only to a candidate
whose log is at least as up to date as theirs.

As in Kafka, a pre-vote request carries the prospective's current epoch. A voter that
receives one from a higher epoch moves to that epoch first (a leader of an older epoch
resigns): this is how a voter that stood as a candidate while cut off, and so is in a
newer epoch than the leader, brings the quorum to its epoch instead of being stranded.

Functions of a RaftCore, split out by role as replication is. A vote request stays in
flight until it is answered or times out (``request_timeout_ms``), when it is sent
again with a new request id; a response counts only if it answers the request in
flight to that voter.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from keeperless.protocol.control import control_batch, leader_change
from keeperless.protocol.records import build_batch, decode_records
from keeperless.raft import messages as m
from keeperless.raft.quorum import majority
from keeperless.raft.roles import FollowerState, NomineeState
from keeperless.raft.state import Role
from keeperless.raft.voters import Voter, voters_records

if TYPE_CHECKING:
    from keeperless.raft.node import RaftNode

__all__ = [
    "become_candidate",
    "become_prospective",
    "on_vote_request",
    "on_vote_response",
    "retry_votes",
    "vote_deadline",
]

log = logging.getLogger("keeperless.raft.core")


def become_prospective(core: RaftNode, now_ms: int) -> None:
    if not core.electable:
        return
    core._transition(Role.PROSPECTIVE, core.epoch, -1, core.state.voted_id, now_ms)
    if not _tally(core, now_ms):
        retry_votes(core, now_ms)


def become_candidate(core: RaftNode, now_ms: int) -> None:
    core._transition(Role.CANDIDATE, core.epoch + 1, -1, core.node_id, now_ms)
    if not _tally(core, now_ms):
        retry_votes(core, now_ms)


def retry_votes(core: RaftNode, now_ms: int) -> None:
    """(Re)send a vote request to every voter that has not answered and has no request
    in flight (a first request, or one that timed out)."""
    nominee = core.current
    if not isinstance(nominee, NomineeState):
        return
    pre_vote = nominee.role is Role.PROSPECTIVE
    for v in core.voters:
        if v == core.node_id or v in nominee.votes:
            continue
        pending = nominee.requests.get(v)
        if pending is not None and pending[1] > now_ms:
            continue
        voter = core.voter_set.get(v)
        req = m.VoteRequest(
            core.node_id,
            v,
            core.epoch,
            core.log.last_epoch(),
            core.log.end_offset,
            pre_vote=pre_vote,
            request_id=core._new_request_id(),
            candidate_dir=core.directory_id,
            voter_dir=voter.directory_id if voter is not None else None,
        )
        nominee.requests[v] = (req, now_ms + core.config.request_timeout_ms)
        core._send(req)


def vote_deadline(core: RaftNode) -> int | None:
    """When the next vote request times out (None if none is in flight)."""
    nominee = core.current
    if not isinstance(nominee, NomineeState) or not nominee.requests:
        return None
    return min(d for _, d in nominee.requests.values())


def _tally(core: RaftNode, now_ms: int) -> bool:
    nominee = core.current
    if not isinstance(nominee, NomineeState):
        return False
    # (a removed voter standing to commit its removal does not count itself)
    granted = sum(1 for v, g in nominee.votes.items() if g and v in core.voters)
    rejected = sum(1 for g in nominee.votes.values() if not g)
    need = majority(len(core.voters))
    if granted >= need:
        if core.role is Role.PROSPECTIVE:
            become_candidate(core, now_ms)
        else:
            _become_leader(core, nominee, now_ms)
        return True
    if len(core.voters) - rejected < need:
        # lost: try again after a randomized backoff
        core._deadline = core._backoff(now_ms)
    return False


def _become_leader(core: RaftNode, nominee: NomineeState, now_ms: int) -> None:
    granted = [v for v, g in nominee.votes.items() if g] or [core.node_id]
    core._transition(Role.LEADER, core.epoch, core.node_id, core.node_id, now_ms)
    batch = control_batch(
        leader_change(core.node_id, list(core.voters), granted), timestamp_ms=now_ms
    )
    count = 1
    me = core.voter_set.get(core.node_id)
    moved = (
        me is not None
        and bool(core.endpoints)
        and me.endpoints != core.endpoints
        and core._history.latest_offset < core.high_watermark  # (no change in flight)
    )
    if core.dynamic and (core._history.latest_offset < 0 or moved):
        # the voter set came from the bootstrap checkpoint (the first leader writes it
        # into the log, with kraft.version), or this leader listens elsewhere now (its
        # new endpoints): beside its LeaderChange, as Kafka's LeaderState does
        vs = core.voter_set
        if moved and me is not None:
            vs = vs.with_voter(Voter(me.id, me.directory_id, core.endpoints))
        extra = voters_records(vs, kraft_version=core.kraft_version)
        records = [(r.key, r.value, ()) for b in (batch, extra) for r in decode_records(b)]
        batch = build_batch(records, timestamp_ms=now_ms, control=True)
        count = len(records)
    core._append_local(batch, count, now_ms, control=True)
    for v in core.voters:
        if v != core.node_id:
            core._send(m.BeginQuorumEpoch(core.node_id, v, core.epoch, core.node_id))


def _leave_voter_set(core: RaftNode, told_by: int, now_ms: int) -> None:
    """A voter says we are not in its voter set: we were removed. Go on observing."""
    log.warning(
        "[node %d] Voter %d says node %d is not one of its voters (removed from "
        "controller.quorum.voters?): continuing as an observer",
        core.node_id,
        told_by,
        core.node_id,
    )
    core._history.reset(core.voter_set.without(core.node_id))
    core._transition(Role.UNATTACHED, core.epoch, -1, core.state.voted_id, now_ms)


def _log_ok(core: RaftNode, last_epoch: int, end_offset: int) -> bool:
    return (last_epoch, end_offset) >= (core.log.last_epoch(), core.log.end_offset)


def on_vote_request(core: RaftNode, req: m.VoteRequest, now_ms: int) -> None:
    def reply(granted: bool, error: int = m.NONE) -> None:
        core._send(
            m.VoteResponse(
                core.node_id,
                req.src,
                core.epoch,
                granted,
                core.leader_id,
                req.pre_vote,
                error,
                req.request_id,
            )
        )

    if not core.dynamic:
        if req.src not in core.voters and core.is_voter:
            # tell a node that thinks it is a voter that our configuration says otherwise
            reply(False, m.INCONSISTENT_VOTER_SET)
            return
        if not core.is_voter:
            reply(False)
            return
    if req.epoch < core.epoch:
        reply(False)
        return
    if req.epoch > core.epoch:
        core._transition(Role.UNATTACHED, req.epoch, -1, -1, now_ms)
    if core.dynamic and req.voter_dir not in (None, core.directory_id):
        # (KIP-853) the candidate asks another disk of ours: the voter it counts on may
        # have voted, or held entries, that this directory never saw
        reply(False, m.INVALID_VOTER_KEY)
        return
    if req.pre_vote:
        # Grant if we would vote for it in the next epoch and have no live leader
        # (KIP-996); the epoch stays where it is.
        follower = core.current
        has_leader = core.role is Role.LEADER or (
            isinstance(follower, FollowerState)
            and now_ms - follower.leader_contact_ms < core.config.fetch_timeout_ms
            and core.leader_id != req.src  # our own leader campaigning has given up
        )
        # (a vote already cast in this epoch, even for ourselves, does not matter: the
        # pre-vote is for the next epoch, as in Kafka 4)
        reply(not has_leader and _log_ok(core, req.last_epoch, req.end_offset))
        return
    s = core.state
    grant = (
        core.role is Role.UNATTACHED
        and s.leader_id == -1
        and s.voted_id in (-1, req.src)
        and _log_ok(core, req.last_epoch, req.end_offset)
    )
    if grant and s.voted_id != req.src:
        # the vote is durable before the response leaves (Ready orders them)
        core._transition(Role.UNATTACHED, s.epoch, -1, req.src, now_ms)
    reply(grant)


def on_vote_response(core: RaftNode, resp: m.VoteResponse, now_ms: int) -> None:
    nominee = core.current
    if not isinstance(nominee, NomineeState):
        return  # a late answer: the election it was for is over
    pending = nominee.requests.get(resp.src)
    if pending is None or pending[0].request_id != resp.request_id:
        return  # it answers no request of ours still in flight: late or duplicated
    req = pending[0]
    del nominee.requests[resp.src]
    if resp.error == m.INCONSISTENT_VOTER_SET and core.is_voter and not core.dynamic:
        _leave_voter_set(core, resp.src, now_ms)
        return
    if req.pre_vote:
        if core.role is not Role.PROSPECTIVE:
            return
        if not resp.granted and (
            resp.epoch > core.epoch or (resp.leader_id >= 0 and resp.leader_id != core.node_id)
        ):
            # a newer epoch, or a live leader: stop campaigning and follow it
            core._observe_epoch(resp.epoch, resp.leader_id, now_ms)
            return
        if resp.granted and resp.epoch != core.epoch:
            return  # granted in another epoch
        nominee.votes[resp.src] = resp.granted
        _tally(core, now_ms)
        return
    if resp.epoch > core.epoch:
        core._observe_epoch(resp.epoch, resp.leader_id, now_ms)
    elif core.role is Role.CANDIDATE and resp.epoch == core.epoch == req.epoch:
        nominee.votes[resp.src] = resp.granted
        _tally(core, now_ms)
