"""Replication of the log by fetching (KIP-595): the leader answers Fetch and
FetchSnapshot (detecting divergence, pointing laggards at the snapshot, long-polling the
caught-up), the followers and observers fetch, truncate, append and load snapshots.

Functions of a RaftCore, split out by role (as etcd's raft has step functions per
role) so that each part stays readable.

A follower or observer has at most one fetch (or snapshot fetch) in flight and acts on
a response only if it answers that request: same request id, same destination, same
echoed fetch offset and last fetched epoch. A response to a request that timed out, was
superseded by a role change, or was duplicated on the way is dropped: acting on a stale
"diverging" answer after the log had moved on once truncated applied entries.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from keeperless.raft import messages as m
from keeperless.raft.log import CorruptSnapshotError
from keeperless.raft.messages import SnapshotId
from keeperless.raft.roles import FetchState, FollowerState, LeaderState, Progress
from keeperless.raft.state import Role

if TYPE_CHECKING:
    from keeperless.raft.node import RaftNode

__all__ = [
    "RaftSafetyError",
    "maybe_fetch",
    "on_fetch_request",
    "on_fetch_response",
    "on_fetch_snapshot_request",
    "on_fetch_snapshot_response",
]

log = logging.getLogger("keeperless.raft.core")


class RaftSafetyError(AssertionError):
    """The core was asked to break a safety rule (truncate committed entries); it stops
    rather than lose them. Assertions of invariants stay on in production."""


def on_fetch_request(core: RaftNode, req: m.FetchRequest, now_ms: int) -> None:
    if req.epoch > core.epoch:
        core._observe_epoch(req.epoch, -1, now_ms)
        core._fetch_error(req, m.UNKNOWN_LEADER_EPOCH)
        return
    leader = core.current
    if not isinstance(leader, LeaderState):
        core._fetch_error(req, m.NOT_LEADER_OR_FOLLOWER)
        return
    if req.epoch < core.epoch:
        core._fetch_error(req, m.FENCED_LEADER_EPOCH)
        return

    def answer(snapshot: SnapshotId | None = None, diverging: SnapshotId | None = None) -> None:
        core._leader_response(req, diverging=diverging, snapshot=snapshot)

    sid = core.log.snapshot_id
    if req.fetch_offset < core.log.start_offset or (
        req.fetch_offset == 0 and sid is not None and sid.end_offset > 0
    ):
        answer(snapshot=sid)
        return
    if req.fetch_offset > 0:
        at = core.log.end_offset_for_epoch(req.last_fetched_epoch)
        if at.epoch != req.last_fetched_epoch or at.end_offset < req.fetch_offset:
            if sid is not None and at.end_offset <= core.log.start_offset:
                answer(snapshot=sid)  # the divergence lies inside our snapshot: start over
            else:
                answer(diverging=at)
            return
    p = leader.progress.setdefault(req.src, Progress())
    if p.directory_id != req.replica_dir:
        # another disk of that replica (or another replica under its id): start afresh
        p = leader.progress[req.src] = Progress(directory_id=req.replica_dir)
    p.fetch_offset = req.fetch_offset
    p.last_fetch_ms = now_ms
    if req.fetch_offset >= core.log.end_offset:
        p.caught_up_ms = now_ms
    if core._is_voter_replica(req.src, req.replica_dir):
        core._maybe_advance_hw(now_ms)
    if (
        req.fetch_offset >= core.log.end_offset
        and req.max_wait_ms > 0
        and core.high_watermark >= req.fetch_offset
    ):
        leader.parked.append((req, now_ms + req.max_wait_ms))
        return
    core._answer_fetch(req)


def on_fetch_snapshot_request(core: RaftNode, req: m.FetchSnapshotRequest, now_ms: int) -> None:
    sid = core.log.snapshot_id
    leader = core.current
    if not isinstance(leader, LeaderState) or req.epoch != core.epoch:
        core._send(
            m.FetchSnapshotResponse(
                core.node_id,
                req.src,
                core.epoch,
                core.leader_id,
                m.NOT_LEADER_OR_FOLLOWER,
                request_id=req.request_id,
            )
        )
        return
    if sid != req.snapshot:
        core._send(
            m.FetchSnapshotResponse(
                core.node_id,
                req.src,
                core.epoch,
                core.node_id,
                m.SNAPSHOT_NOT_FOUND,
                request_id=req.request_id,
            )
        )
        return
    p = leader.progress.get(req.src)
    if p is not None and p.directory_id == req.replica_dir:
        # a voter loading the snapshot is following us: check-quorum counts it, or a
        # leader with one other voter resigns while that voter loads a large snapshot
        p.last_fetch_ms = now_ms
    chunk, size = core.log.snapshot_chunk(
        req.position, min(req.max_bytes, core.config.snapshot_chunk_bytes)
    )
    core._send(
        m.FetchSnapshotResponse(
            core.node_id,
            req.src,
            core.epoch,
            core.node_id,
            m.NONE,
            sid,
            size,
            req.position,
            chunk,
            req.request_id,
        )
    )


def maybe_fetch(core: RaftNode, now_ms: int) -> None:
    fetch = core._fetch  # (a leader, a nominee or a resigned leader fetches nothing)
    if fetch is None or fetch.until_ms >= 0:
        return
    if core.log.end_offset != core.durable_end:
        return  # appended entries must be durable before we fetch (and report) more
    target = core.leader_id
    if target < 0 and core.electable:
        return
    if target < 0:
        # an observer looks for the leader among the voters it knows, else the bootstrap
        known = [v for v in core.voters if v != core.node_id] or list(core.bootstrap)
        if not known:
            fetch.until_ms = now_ms + core.config.request_timeout_ms
            return
        target = core.rng.choice(known)
    fetch.until_ms = now_ms + core.config.request_timeout_ms
    req: m.FetchRequest | m.FetchSnapshotRequest
    follower = core.current
    if isinstance(follower, FollowerState) and follower.snapshot is not None:
        req = m.FetchSnapshotRequest(
            core.node_id,
            target,
            core.epoch,
            follower.snapshot,
            len(follower.snapshot_buf),
            core.config.snapshot_chunk_bytes,
            core._new_request_id(),
            core.directory_id,
        )
    else:
        req = m.FetchRequest(
            core.node_id,
            target,
            core.epoch,
            core.log.end_offset,
            core.log.last_epoch(),
            core.config.fetch_max_wait_ms,
            core._new_request_id(),
            core.directory_id,
        )
    fetch.request = req
    core._send(req)


def _answers(core: RaftNode, fetch: FetchState, resp: m.FetchResponse) -> bool:
    """Whether ``resp`` answers the fetch in flight, and our log is still where that
    fetch said it was."""
    req = fetch.request
    return (
        isinstance(req, m.FetchRequest)
        and resp.request_id == req.request_id
        and resp.src == req.dst
        and resp.fetch_offset == req.fetch_offset == core.log.end_offset
        and resp.last_fetched_epoch == req.last_fetched_epoch == core.log.last_epoch()
    )


def on_fetch_response(core: RaftNode, resp: m.FetchResponse, now_ms: int) -> None:
    fetch = core._fetch
    if fetch is None or not _answers(core, fetch, resp):
        return  # a stale, duplicated or superseded response
    fetch.clear()
    if resp.error != m.NONE:
        if (
            resp.leader_id >= 0
            and resp.epoch >= core.epoch
            and (resp.leader_id != resp.src or resp.epoch > core.epoch)
        ):
            core._observe_epoch(resp.epoch, resp.leader_id, now_ms)
        elif resp.epoch > core.epoch:
            core._observe_epoch(resp.epoch, -1, now_ms)
        elif resp.src == core.leader_id or not core.electable:
            # our leader no longer leads (or an observer asked a non-leader): forget it
            voted = core.state.voted_id  # (a vote is kept for its epoch, voter or not)
            core._transition(Role.UNATTACHED, core.epoch, -1, voted, now_ms)
            if not core.electable and (backoff := core._fetch) is not None:
                backoff.until_ms = now_ms + core.config.election_backoff_max_ms // 10
        return
    if resp.epoch < core.epoch or (resp.epoch == core.epoch and core.role is Role.LEADER):
        return
    core._observe_epoch(resp.epoch, resp.leader_id, now_ms)
    follower = core.current
    if not isinstance(follower, FollowerState):
        return
    core._deadline = now_ms + core.config.fetch_timeout_ms
    follower.leader_contact_ms = now_ms
    if resp.snapshot is not None:
        follower.snapshot = resp.snapshot
        follower.snapshot_buf = bytearray()
        return
    if resp.diverging is not None:
        # keep only what we share with the leader: up to the end of its epoch in
        # both logs (the follower's copy of that epoch may be shorter)
        mine = core.log.end_offset_for_epoch(resp.diverging.epoch).end_offset
        cut = min(resp.diverging.end_offset, mine, core.log.end_offset)
        if cut < max(core.applied, min(core.high_watermark, core.log.end_offset)):
            # Committed entries are never truncated (Kafka refuses the same way); only a
            # stale answer could ask it, and those are dropped above.
            raise RaftSafetyError(
                f"node {core.node_id}: asked by leader {resp.src} (epoch {resp.epoch}) to "
                f"truncate to {cut}, below its high watermark {core.high_watermark} or "
                f"applied offset {core.applied}"
            )
        core.log.truncate_to(cut)
        core._truncate_history(core.log.end_offset)
        core.durable_end = min(core.durable_end, core.log.end_offset)
        core._ready.sync_log = True
        return
    new = [e for e in resp.entries if e.base_offset >= core.log.end_offset]
    if new and new[0].base_offset == core.log.end_offset:
        core.log.append(new)
        for e in new:
            core._note_voters(e)
        core._ready.sync_log = True
    if resp.high_watermark > core.high_watermark:
        core.high_watermark = resp.high_watermark
        core._ready.high_watermark = resp.high_watermark


def on_fetch_snapshot_response(core: RaftNode, resp: m.FetchSnapshotResponse, now_ms: int) -> None:
    follower = core.current  # (only a follower fetches a snapshot: the leader sent it)
    if not isinstance(follower, FollowerState):
        return  # a late answer: the role that asked is over
    req = follower.fetch.request
    if (
        not isinstance(req, m.FetchSnapshotRequest)
        or resp.request_id != req.request_id
        or resp.src != req.dst
    ):
        return  # a stale, duplicated or superseded response
    follower.fetch.clear()
    target = follower.snapshot
    if target is None or resp.snapshot != target or resp.position != len(follower.snapshot_buf):
        if resp.error != m.NONE:
            follower.snapshot = None  # that snapshot is gone: fetch from the log again
        return
    core._deadline = now_ms + core.config.fetch_timeout_ms
    follower.snapshot_buf += resp.data
    if len(follower.snapshot_buf) < resp.size:
        return
    data = bytes(follower.snapshot_buf)
    follower.snapshot = None
    follower.snapshot_buf = bytearray()
    if target.end_offset < core.applied:
        raise RaftSafetyError(
            f"node {core.node_id}: asked by leader {resp.src} to replace its log by snapshot "
            f"{target}, which ends below its applied offset {core.applied}"
        )
    try:
        core.log.install_snapshot(target, data)
    except CorruptSnapshotError as e:
        log.warning(
            "[node %d] Snapshot %s fetched from node %d is damaged (%s): fetching it again",
            core.node_id,
            target,
            resp.src,
            e,
        )
        return
    core._reset_history(data, target.end_offset)
    core.durable_end = target.end_offset
    core.applied = target.end_offset
    core.high_watermark = max(core.high_watermark, target.end_offset)
    core._ready.snapshot = (target, data)
    core._ready.committed = []
    log.info(
        "[node %d] Loaded snapshot %020d-%010d from leader %d",
        core.node_id,
        target.end_offset,
        target.epoch,
        core.leader_id,
    )
