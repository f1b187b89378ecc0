"""The state a KRaft replica keeps in every role, and the steps every role's rules take:
its durable election state and role (``_transition``), the voter set in its log, the
appends, the high watermark and the committed entries handed out, and the leader's
answers to fetches.

``RaftNode`` is what the rule modules act on: ``raft/election.py`` (votes and
leadership), ``raft/replication.py`` (fetching) and ``raft/membership.py`` (voter
changes) are functions of a RaftNode, split by concern as etcd's raft has step functions
per role; ``raft/core.py``'s RaftCore is the RaftNode the driver holds, with the
driver's API (step, tick, propose, ready). The state only one role has is in
``raft/roles.py``: ``self.current`` is the role's object, replaced on every transition.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field

from keeperless.raft import messages as m
from keeperless.raft.log import RaftLog
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.raft.quorum import majority_offset
from keeperless.raft.roles import (
    CandidateState,
    FetchState,
    FollowerState,
    LeaderState,
    Progress,
    ProspectiveState,
    ResignedState,
    RoleState,
    UnattachedState,
)
from keeperless.raft.state import ElectionState, Role
from keeperless.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    Endpoint,
    LogHistory,
    VoterSet,
    voters_in_batch,
    voters_in_snapshot,
    voters_records,
)

__all__ = ["RaftConfig", "RaftNode", "Ready"]

log = logging.getLogger("keeperless.raft.core")


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Kafka's controller.quorum.* settings and their defaults."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    fetch_max_wait_ms: int = 500
    max_fetch_entries: int = 64
    # a fetch answer holds at most this many bytes of entries (at least one entry): the
    # bound the runtime asks for (Kafka's fetch max bytes for the metadata log)
    max_fetch_bytes: int = 8 << 20
    snapshot_chunk_bytes: int = 1 << 20


@dataclass(slots=True)
class Ready:
    state: ElectionState | None = None  # 1. persist (fsync) the election state
    sync_log: bool = False  # 2. fsync the log, then call on_persisted(end offset)
    messages: list[m.Message] = field(default_factory=list)  # 3. then send these
    snapshot: tuple[SnapshotId, bytes] | None = None  # 4. reload the state machine
    committed: list[Entry] = field(default_factory=list)  # 5. then apply these in order
    high_watermark: int | None = None

    def empty(self) -> bool:
        return (
            self.state is None
            and not self.sync_log
            and not self.messages
            and self.snapshot is None
            and not self.committed
        )


class RaftNode:
    def __init__(
        self,
        node_id: int,
        voters: tuple[int, ...] | VoterSet,
        raft_log: RaftLog,
        state: ElectionState,
        config: RaftConfig,
        rng: random.Random,
        now_ms: int,
        high_watermark: int = 0,
        *,
        directory_id: uuid.UUID | None = None,
        kraft_version: int = 0,
        bootstrap: tuple[int, ...] = (),
        endpoints: tuple[Endpoint, ...] = (),
    ) -> None:
        """``voters``: the static voter set (kraft.version 0, from
        controller.quorum.voters), or the bootstrap voter set of a dynamic quorum
        (kraft.version 1, from the bootstrap checkpoint; empty for a controller formatted
        to join one). The log and its snapshot override both. ``bootstrap``: whom an
        observer that knows no voter asks for the leader."""
        self.node_id = node_id
        self.directory_id = directory_id
        self.bootstrap = bootstrap
        self.endpoints = endpoints  # where this controller listens (a voter's endpoints)
        base = voters if isinstance(voters, VoterSet) else VoterSet.static(voters)
        self._kraft: LogHistory[int] = LogHistory(kraft_version)
        self._history: LogHistory[VoterSet] = LogHistory(base)
        self.log = raft_log
        self._load_voters()
        self.config = config
        self.rng = rng
        self.state = state
        self.durable_end = raft_log.end_offset
        self.high_watermark = max(high_watermark, raft_log.start_offset)
        self.applied = raft_log.start_offset  # next offset to hand to the state machine
        self._ready = Ready()
        self._deadline = now_ms
        # what the role alone knows (raft/roles.py), replaced on every transition
        self.current: RoleState = UnattachedState()

    # -- voters (KIP-853) ---------------------------------------------------------------

    def _load_voters(self) -> None:
        """The voter set and kraft.version as the snapshot and log hold them."""
        sid = self.log.snapshot_id
        if sid is not None:
            version, voters = voters_in_snapshot(self.log.snapshot_data())
            if version is not None:
                self._kraft.reset(version, sid.end_offset - 1)
            if voters is not None:
                self._history.reset(voters, sid.end_offset - 1)
        offset = self.log.start_offset
        while offset < self.log.end_offset:
            entries = self.log.read(offset, 256)
            if not entries:
                break
            for e in entries:
                self._note_voters(e)
            offset = entries[-1].last_offset + 1

    def _note_voters(self, e: Entry) -> None:
        """Track a VotersRecord (and kraft.version) appended to the log."""
        if not e.control:
            return
        version, voters = voters_in_batch(e.data)
        if version is not None and e.last_offset > self._kraft.latest_offset:
            self._kraft.add(e.last_offset, version)
        if voters is not None and e.last_offset > self._history.latest_offset:
            old = self._history.latest
            self._history.add(e.last_offset, voters)
            if voters != old:
                log.info(
                    "[node %d] Voter set %s at offset %d (was %s)",
                    self.node_id,
                    voters,
                    e.last_offset,
                    old,
                )

    @property
    def voter_set(self) -> VoterSet:
        """The latest voter set in the log, committed or not (KIP-853)."""
        return self._history.latest

    @property
    def voters(self) -> tuple[int, ...]:
        return self._history.latest.ids

    @property
    def kraft_version(self) -> int:
        """The latest kraft.version in the log (0: a static quorum)."""
        return self._kraft.latest

    def _truncate_history(self, end_offset: int) -> None:
        self._history.truncate(end_offset)
        self._kraft.truncate(end_offset)

    def _reset_history(self, data: bytes, end_offset: int) -> None:
        """A snapshot ending at ``end_offset`` replaced the log: its voter set and
        kraft.version (a static quorum's snapshot has neither: they stay)."""
        version, voters = voters_in_snapshot(data)
        if version is not None:
            self._kraft.reset(version, end_offset - 1)
        else:
            self._kraft.truncate(0)
        if voters is not None:
            self._history.reset(voters, end_offset - 1)
        else:
            self._history.truncate(0)

    @property
    def dynamic(self) -> bool:
        return self.kraft_version >= KRAFT_VERSION_DYNAMIC

    def voters_at(self, offset: int) -> VoterSet:
        """The voter set in force after the record at ``offset`` (what a snapshot ending
        at ``offset + 1`` holds)."""
        return self._history.at(offset)

    def snapshot_voters_records(self, end_offset: int) -> bytes:
        """The control batch a snapshot of the records below ``end_offset`` carries: the
        kraft.version and the voter set then (empty for a static quorum)."""
        if not self.dynamic:
            return b""
        version = self._kraft.at(end_offset - 1)
        return voters_records(self.voters_at(end_offset - 1), kraft_version=version)

    def _is_voter_replica(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        return self.voter_set.has(node_id, directory_id)

    def _voter_progress(self) -> list[tuple[int, Progress]]:
        """The leader's progress of each other voter, counted only when the replica that
        fetched is that voter (same directory id): a controller with a new disk is not."""
        leader = self.current
        if not isinstance(leader, LeaderState):
            return []
        vs = self.voter_set
        return [
            (v, p)
            for v, p in leader.progress.items()
            if v != self.node_id and vs.has(v, p.directory_id)
        ]

    @property
    def is_voter(self) -> bool:
        return self._is_voter_replica(self.node_id, self.directory_id)

    @property
    def electable(self) -> bool:
        """Whether this replica may stand for election: a voter, or a voter that the
        latest voter change removes while that change is not known to be committed.
        Such a replica (a leader that removed itself, then restarted, say) may hold the
        change that the remaining voters need and lack: it may lead, counting the votes
        of the new voter set only, to commit the change and then resign, as a removed
        leader does (Raft's thesis, 4.2.2)."""
        if self.is_voter:
            return True
        h = self._history
        if not self.dynamic or h.latest_offset < self.high_watermark:
            return False
        return h.at(h.latest_offset - 1).has(self.node_id, self.directory_id)

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        return self.state.leader_id

    @property
    def role(self) -> Role:
        return self.current.role

    @property
    def _fetch(self) -> FetchState | None:
        """The fetch in flight of a follower or an observer looking for the leader."""
        cur = self.current
        return cur.fetch if isinstance(cur, UnattachedState | FollowerState) else None

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    def _voters_by_progress(self, leader: LeaderState, voters: tuple[int, ...]) -> list[int]:
        """``voters`` by how far they have fetched, furthest first: the order a resigning
        leader names its preferred successors in."""
        return sorted(voters, key=lambda v: -leader.progress.get(v, Progress()).fetch_offset)

    def _resign(self, order: list[int], now_ms: int) -> None:
        for v in order:
            self._send(m.EndQuorumEpoch(self.node_id, v, self.epoch, self.node_id, tuple(order)))
        self._transition(Role.RESIGNED, self.epoch, self.node_id, self.state.voted_id, now_ms)

    def _election_timeout(self, now_ms: int) -> int:
        t = self.config.election_timeout_ms
        return now_ms + t + self.rng.randrange(t)

    def _backoff(self, now_ms: int) -> int:
        return now_ms + 1 + self.rng.randrange(max(self.config.election_backoff_max_ms, 1))

    def _new_request_id(self) -> int:
        # random rather than counted, so that a restarted node never reuses the id of a
        # request its previous incarnation sent (whose answer may still be on its way)
        return self.rng.getrandbits(62)

    # -- transitions --------------------------------------------------------------------

    def _transition(self, role: Role, epoch: int, leader: int, voted: int, now_ms: int) -> None:
        """Into ``role``: the new election state is queued to be written durably before
        any message that depends on it leaves, and the old role's state is dropped with
        its object (a fetch or vote request in flight: a late answer to it is ignored)."""
        new = ElectionState(epoch, leader, voted, self.voters)
        if new != self.state:
            self._ready.state = new
        old = self.current
        old_role, old_epoch = old.role, self.state.epoch
        self.state = new
        self.current = self._role_state(role, now_ms)
        if isinstance(old, LeaderState):
            for req, _ in old.parked:  # long-polling fetchers learn at once we moved on
                self._fetch_error(req, m.NOT_LEADER_OR_FOLLOWER)
        if role is Role.FOLLOWER:
            self._deadline = now_ms + self.config.fetch_timeout_ms
        elif role is Role.LEADER:
            self._deadline = now_ms
        elif role is Role.UNATTACHED and not self.electable:
            self._deadline = now_ms + self.config.fetch_timeout_ms
        else:
            self._deadline = self._election_timeout(now_ms)
        if (role, epoch) != (old_role, old_epoch):
            log.info(
                "[node %d] Completed transition to %s(epoch=%d, leader=%d, voted=%d) "
                "from %s(epoch=%d)",
                self.node_id,
                role.value,
                epoch,
                leader,
                voted,
                old_role.value,
                old_epoch,
            )

    def _role_state(self, role: Role, now_ms: int) -> RoleState:
        match role:
            case Role.UNATTACHED:
                return UnattachedState()
            case Role.FOLLOWER:
                return FollowerState()
            case Role.PROSPECTIVE:
                return ProspectiveState(votes={self.node_id: True})
            case Role.CANDIDATE:
                return CandidateState(votes={self.node_id: True})
            case Role.LEADER:
                progress = {
                    v.id: Progress(directory_id=v.directory_id)
                    for v in self.voter_set
                    if v.id != self.node_id
                }
                return LeaderState(self.log.end_offset, now_ms, progress)
            case Role.RESIGNED:
                return ResignedState()

    def _follow(self, epoch: int, leader: int, now_ms: int) -> None:
        voted = self.state.voted_id if epoch == self.epoch else -1
        if self.role is not Role.FOLLOWER or (self.epoch, self.leader_id) != (epoch, leader):
            self._transition(Role.FOLLOWER, epoch, leader, voted, now_ms)

    def _observe_epoch(self, epoch: int, leader: int, now_ms: int) -> bool:
        """Adopt a higher epoch (and its leader, if known). False if ``epoch`` is stale."""
        if epoch < self.epoch:
            return False
        if (
            leader >= 0
            and leader != self.node_id
            and (epoch > self.epoch or self.leader_id in (-1, leader))
            and self.role is not Role.LEADER
        ):
            self._follow(epoch, leader, now_ms)
        elif epoch > self.epoch:
            self._transition(Role.UNATTACHED, epoch, -1, -1, now_ms)
        return True

    # -- log --------------------------------------------------------------------------

    def _append_local(self, batch: bytes, count: int, now_ms: int, control: bool = False) -> int:
        base = self.log.end_offset
        data = bytearray(batch)
        data[0:8] = base.to_bytes(8, "big", signed=True)
        data[12:16] = self.epoch.to_bytes(4, "big", signed=True)
        entry = Entry(base, base + count - 1, self.epoch, bytes(data), control)
        self.log.append([entry])
        self._note_voters(entry)
        self._ready.sync_log = True
        self._release_parked(now_ms)
        return entry.last_offset

    def _maybe_advance_hw(self, now_ms: int) -> None:
        """Commit what a majority of the latest voter set has durably; the leader counts
        itself only while it is one of them (KIP-853: a leader removing itself commits
        its removal with the new majority, then resigns)."""
        leader = self.current
        if not isinstance(leader, LeaderState):
            return
        mine = [self.durable_end] if self.is_voter else []
        offsets = mine + [p.fetch_offset for _, p in self._voter_progress()]
        hw = majority_offset(offsets, len(self.voters))
        if hw > self.high_watermark and hw > leader.epoch_start_offset:
            self.high_watermark = hw
            self._ready.high_watermark = hw
            self._release_parked(now_ms)
        if (
            self.current is leader
            and not self.is_voter
            and self.high_watermark > self._history.latest_offset
        ):
            log.info(
                "[node %d] Resigning leadership of epoch %d: its removal from the voters "
                "(offset %d) is committed",
                self.node_id,
                self.epoch,
                self._history.latest_offset,
            )
            self._resign(self._voters_by_progress(leader, self.voters), now_ms)

    def _deliver(self) -> None:
        limit = min(self.high_watermark, self.durable_end)
        while self.applied < limit:
            entries = self.log.read(self.applied, 256)
            if not entries:
                break
            for e in entries:
                if e.last_offset >= limit:
                    return
                if e.base_offset >= self.applied:
                    self._ready.committed.append(e)
                self.applied = e.last_offset + 1

    def _send(self, msg: m.Message) -> None:
        self._ready.messages.append(msg)

    # -- the leader's answers to fetches --------------------------------------------------

    def _fetch_error(self, req: m.FetchRequest, error: int) -> None:
        leader = -1 if self.role is Role.RESIGNED else self.leader_id
        self._send(
            m.FetchResponse(
                self.node_id,
                req.src,
                self.epoch,
                leader,
                error,
                fetch_offset=req.fetch_offset,
                last_fetched_epoch=req.last_fetched_epoch,
                request_id=req.request_id,
            )
        )

    def _leader_response(
        self,
        req: m.FetchRequest,
        entries: tuple[m.Entry, ...] = (),
        diverging: SnapshotId | None = None,
        snapshot: SnapshotId | None = None,
    ) -> None:
        """The leader's successful answer to a fetch: entries, or where to truncate, or
        which snapshot to load, always with the high watermark and log start."""
        self._send(
            m.FetchResponse(
                self.node_id,
                req.src,
                self.epoch,
                self.node_id,
                m.NONE,
                self.high_watermark,
                self.log.start_offset,
                entries,
                diverging,
                snapshot,
                req.fetch_offset,
                req.last_fetched_epoch,
                req.request_id,
            )
        )

    def _answer_fetch(self, req: m.FetchRequest) -> None:
        if self.role is not Role.LEADER:
            self._fetch_error(req, m.NOT_LEADER_OR_FOLLOWER)
            return
        entries = self.log.read(req.fetch_offset, self.config.max_fetch_entries)
        size = 0
        for n, e in enumerate(entries):
            size += len(e.data)
            if size > self.config.max_fetch_bytes and n > 0:
                entries = entries[:n]
                break
        self._leader_response(req, tuple(entries))

    def _release_parked(self, now_ms: int) -> None:
        """Answer the long-polling fetches: there is more to send, or the high watermark
        moved."""
        leader = self.current
        if isinstance(leader, LeaderState):
            parked, leader.parked = leader.parked, []
            for req, _ in parked:
                self._answer_fetch(req)
