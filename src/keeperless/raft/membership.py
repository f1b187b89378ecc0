"""Voter changes (KIP-853) made by the leader: add, remove and update a voter, and the
kraft.version upgrade that turns a static quorum dynamic. Functions of a RaftNode, split
out by concern as elections and replication are.

A change is made one at a time, once the leader has committed an entry of its epoch,
and never when the voters that fetched lately would not be a majority of the new set;
it is appended as a VotersRecord, in force at once (the latest voter set in the log),
and done when the high watermark passes it.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from keeperless.raft import messages as m
from keeperless.raft.quorum import majority
from keeperless.raft.roles import LeaderState
from keeperless.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    Endpoint,
    Voter,
    VoterSet,
    voters_records,
)

if TYPE_CHECKING:
    from keeperless.raft.node import RaftNode

__all__ = [
    "MembershipError",
    "add_voter",
    "pending_voter_change",
    "remove_voter",
    "update_voter",
    "upgrade_kraft_version",
]

log = logging.getLogger("keeperless.raft.core")


class MembershipError(RuntimeError):
    """A voter change refused, with Kafka's error code and message (KIP-853)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def leading(core: RaftNode) -> LeaderState:
    """The leader's state; raises NOT_LEADER_OR_FOLLOWER unless this node leads."""
    leader = core.current
    if not isinstance(leader, LeaderState):
        raise MembershipError(m.NOT_LEADER_OR_FOLLOWER, f"node {core.node_id} is not the leader")
    return leader


def require_epoch_committed(core: RaftNode, leader: LeaderState) -> None:
    """A leader changes the voters only once it has committed an entry of its own
    epoch (Raft's fix of single-server changes: an earlier leader's uncommitted
    change is settled, committed or truncated, before another is made)."""
    if core.high_watermark <= leader.epoch_start_offset:
        raise MembershipError(
            m.REQUEST_TIMED_OUT,
            "Request timed out waiting for leader to establish HWM and fence previous "
            "voter changes",
        )


def check_change(core: RaftNode, what: str) -> LeaderState:
    """KIP-853's preconditions of a voter change, in Kafka's words; the leader's state."""
    leader = leading(core)
    require_epoch_committed(core, leader)
    if not core.dynamic:
        raise MembershipError(
            m.UNSUPPORTED_VERSION,
            f"Cluster doesn't support {what} voter because the kraft.version feature "
            f"is {core.kraft_version}",
        )
    latest = core._history.latest_offset
    if latest >= core.high_watermark:
        raise MembershipError(
            m.REQUEST_TIMED_OUT,
            "Request timed out waiting for voters to commit the latest voter change at "
            f"{latest} with HWM {core.high_watermark}",
        )
    return leader


def check_live_majority(
    core: RaftNode, leader: LeaderState, voters: VoterSet, what: str, now_ms: int
) -> None:
    """Refuse a change after which the voters that fetched lately would not be a
    majority: it could never commit, and the quorum would be left without one (a
    live voter removed while another is down, say)."""
    fresh = now_ms - core.config.fetch_timeout_ms
    live = [
        v
        for v in voters
        if (v.id == core.node_id and v.matches(v.id, core.directory_id))
        or (
            (p := leader.progress.get(v.id)) is not None
            and v.matches(v.id, p.directory_id)
            and p.last_fetch_ms >= fresh
        )
    ]
    if len(live) < majority(len(voters)):
        down = ", ".join(str(v) for v in voters if v not in live)
        raise MembershipError(
            m.INVALID_REQUEST,
            f"{what} would leave the voters {voters} without a live majority: "
            f"{down} fetched nothing in the last {core.config.fetch_timeout_ms} ms",
        )


def append_voters(core: RaftNode, voters: VoterSet, now_ms: int) -> int:
    offset = core._append_local(voters_records(voters, timestamp_ms=now_ms), 1, now_ms, True)
    core._maybe_advance_hw(now_ms)  # (a single voter commits at once)
    return offset


def add_voter(core: RaftNode, voter: Voter, now_ms: int) -> int:
    """Add a caught-up observer as a voter (AddRaftVoter): append the new voter set;
    returns its offset, done when the high watermark passes it. Raises
    MembershipError as Kafka answers."""
    leader = check_change(core, "adding")
    vs = core.voter_set
    if voter.id in vs.ids:
        raise MembershipError(
            m.DUPLICATE_VOTER,
            f"The voter id for {voter} is already part of the set of voters {vs}.",
        )
    p = leader.progress.get(voter.id)
    fresh = now_ms - core.config.fetch_timeout_ms
    if (
        p is None
        or p.directory_id != voter.directory_id
        or p.last_fetch_ms < fresh
        or p.caught_up_ms < fresh
    ):
        raise MembershipError(
            m.REQUEST_TIMED_OUT,
            f"Aborted add voter operation for {voter} since it is lagging behind",
        )
    new = vs.with_voter(voter)
    check_live_majority(core, leader, new, f"Adding voter {voter}", now_ms)
    return append_voters(core, new, now_ms)


def remove_voter(core: RaftNode, node_id: int, directory_id: uuid.UUID | None, now_ms: int) -> int:
    """Remove a voter (RemoveRaftVoter): as add_voter. A leader that removes itself
    leads until the change commits, then resigns and goes on as an observer."""
    leader = check_change(core, "removing")
    vs = core.voter_set
    v = vs.get(node_id)
    if v is None or v.directory_id != directory_id or len(vs) == 1:
        raise MembershipError(
            m.VOTER_NOT_FOUND,
            f"Cannot remove voter {Voter(node_id, directory_id)} from the set of voters {vs}",
        )
    new = vs.without(node_id)
    check_live_majority(core, leader, new, f"Removing voter {v}", now_ms)
    return append_voters(core, new, now_ms)


def update_voter(core: RaftNode, voter: Voter, now_ms: int) -> int:
    """Change a voter's endpoints (UpdateRaftVoter)."""
    check_change(core, "updating")
    vs = core.voter_set
    old = vs.get(voter.id)
    if old is None or old.directory_id != voter.directory_id:
        raise MembershipError(
            m.VOTER_NOT_FOUND,
            f"Voter {voter} is not part of the set of voters {vs}",
        )
    if old == voter:
        return core._history.latest_offset
    return append_voters(core, vs.with_voter(voter), now_ms)


def upgrade_kraft_version(
    core: RaftNode,
    version: int,
    endpoints: dict[int, tuple[Endpoint, ...]],
    now_ms: int,
    dry_run: bool = False,
) -> int:
    """kafka-features upgrade --feature kraft.version=1: a static quorum becomes a
    dynamic one. The voters keep their ids and get the directory ids they fetch
    with (each must have fetched lately, this one aside) and ``endpoints``; the
    leader appends KRaftVersionRecord and VotersRecord; returns their offset.
    ``dry_run``: the same checks, nothing appended (-1)."""
    leader = leading(core)
    if version == core.kraft_version:
        return core._kraft.latest_offset
    if version < core.kraft_version:
        raise MembershipError(
            m.INVALID_UPDATE_VERSION,
            f"Invalid update version {version} for feature kraft.version. Downgrading "
            "kraft.version is not supported.",
        )
    if version != KRAFT_VERSION_DYNAMIC:
        raise MembershipError(
            m.INVALID_UPDATE_VERSION,
            f"Invalid update version {version} for feature kraft.version. Local "
            f"controller {core.node_id} only supports versions 0-1",
        )
    require_epoch_committed(core, leader)
    fresh = now_ms - core.config.fetch_timeout_ms
    voters = []
    for v in core.voter_set:
        if v.id == core.node_id:
            d = core.directory_id
        else:
            p = leader.progress.get(v.id)
            d = p.directory_id if p is not None and p.last_fetch_ms >= fresh else None
        if d is None:
            raise MembershipError(
                m.INVALID_UPDATE_VERSION,
                f"Invalid update version {version} for feature kraft.version. Voter "
                f"{v.id} has not fetched with a directory id lately (is it running a "
                "version with KIP-853, with its metadata directory formatted?)",
            )
        voters.append(Voter(v.id, d, endpoints.get(v.id, ())))
    if dry_run:
        return -1
    batch = voters_records(VoterSet.of(voters), kraft_version=version, timestamp_ms=now_ms)
    offset = core._append_local(batch, 2, now_ms, True)
    core._maybe_advance_hw(now_ms)
    log.info(
        "[node %d] kraft.version %d at offset %d: the quorum is dynamic, voters %s",
        core.node_id,
        version,
        offset,
        core.voter_set,
    )
    return offset


def pending_voter_change(core: RaftNode) -> int | None:
    """The offset of an uncommitted voter change (None: none)."""
    latest = core._history.latest_offset
    return latest if latest >= core.high_watermark and latest >= 0 else None


# -- public ----------------------------------------------------------------------
