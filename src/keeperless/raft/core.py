"""The KRaft consensus core (KIP-595 pull-based Raft, KIP-996 pre-vote), sans-I/O.

Shaped like etcd's RawNode: the driver feeds messages (``step``), time (``tick``) and
proposals, then takes ``ready()`` and handles it in order: (1) write the election state
durably, and only then (2) send the messages; (3) fsync the log when asked and report
it with ``on_persisted``; (4) load a snapshot, (5) apply the committed entries.

What must be durable before a message leaves is made so by the core itself, so the
driver need not hold messages back while the log is being fsynced: a vote, a candidacy
or a leadership is in the election state of step 1; a follower or observer sends its
next fetch (whose offset the leader counts towards the high watermark) only once
``on_persisted`` has covered its whole log; a leader counts only its own durable end,
so a fetch response may carry entries it has not fsynced yet, as in Kafka. Committed
entries are handed out only once durable locally.

Roles follow Kafka's QuorumState: unattached, prospective, candidate, leader, follower,
resigned; a node outside the voter set is an observer that only fetches. Every role
change goes through ``_transition``, which queues the new election state to be written
durably before any message that depends on it is sent.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field

from keeperless.protocol.records import build_batch
from keeperless.raft import election, membership
from keeperless.raft import messages as m
from keeperless.raft import replication as rep
from keeperless.raft.log import RaftLog
from keeperless.raft.membership import MembershipError
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.raft.quorum import majority, majority_offset
from keeperless.raft.state import ElectionState, Progress, Role
from keeperless.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    Endpoint,
    LogHistory,
    Voter,
    VoterSet,
    voters_in_batch,
    voters_in_snapshot,
    voters_records,
)

__all__ = ["MembershipError", "NotLeaderError", "RaftConfig", "RaftCore", "Ready", "Role"]

log = logging.getLogger(__name__)


class NotLeaderError(RuntimeError):
    """Proposals go to the leader; this node is not it."""


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


class RaftCore:
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
        self.role = Role.UNATTACHED
        self.durable_end = raft_log.end_offset
        self.high_watermark = max(high_watermark, raft_log.start_offset)
        self.applied = raft_log.start_offset  # next offset to hand to the state machine
        self._ready = Ready()
        self._deadline = now_ms
        # leader
        self.progress: dict[int, Progress] = {}
        self.epoch_start_offset = -1
        self._parked: list[tuple[m.FetchRequest, int]] = []
        self._leader_since_ms = now_ms
        self._last_quorum_warning_ms = -(2**62)
        # elections: votes received, and the vote request in flight to each voter
        self._votes: dict[int, bool] = {}
        self._vote_requests: dict[int, tuple[m.VoteRequest, int]] = {}
        # when we last heard from the leader itself (not about it): only that makes us
        # refuse pre-votes, so hearsay about a dead leader cannot livelock an election
        self._leader_contact_ms = -(2**62)
        # follower / observer: the one fetch (or snapshot fetch) in flight, and until
        # when it may be answered (or, with none in flight, a backoff before the next)
        self._fetching: m.FetchRequest | m.FetchSnapshotRequest | None = None
        self._inflight_until = -1
        self._snapshot_buf = bytearray()
        self._snapshot_target: SnapshotId | None = None

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
        vs = self.voter_set
        return [
            (v, p)
            for v, p in self.progress.items()
            if v != self.node_id and vs.has(v, p.directory_id)
        ]

    # voter changes (KIP-853): raft/membership.py

    def add_voter(self, voter: Voter, now_ms: int) -> int:
        return membership.add_voter(self, voter, now_ms)

    def remove_voter(self, node_id: int, directory_id: uuid.UUID | None, now_ms: int) -> int:
        return membership.remove_voter(self, node_id, directory_id, now_ms)

    def update_voter(self, voter: Voter, now_ms: int) -> int:
        return membership.update_voter(self, voter, now_ms)

    def upgrade_kraft_version(
        self,
        version: int,
        endpoints: dict[int, tuple[Endpoint, ...]],
        now_ms: int,
        dry_run: bool = False,
    ) -> int:
        return membership.upgrade_kraft_version(self, version, endpoints, now_ms, dry_run)

    def pending_voter_change(self) -> int | None:
        return membership.pending_voter_change(self)

    # -- public ----------------------------------------------------------------------

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
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    def start(self, now_ms: int) -> None:
        s = self.state
        if self.voters == (self.node_id,) and self.is_voter:
            election.become_candidate(self, now_ms)
        elif s.leader_id not in (-1, self.node_id):
            self._transition(Role.FOLLOWER, s.epoch, s.leader_id, s.voted_id, now_ms)
        else:
            # A restarted leader never leads its old epoch again: it waits, then runs.
            self._transition(Role.UNATTACHED, s.epoch, -1, s.voted_id, now_ms)
        self._deliver()
        rep.maybe_fetch(self, now_ms)

    def propose(self, records: list[bytes], now_ms: int) -> int:
        """Append records as one batch; returns the last offset assigned."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(f"node {self.node_id} is not the leader")
        batch = build_batch([(None, r, ()) for r in records], timestamp_ms=now_ms)
        return self._append_local(batch, len(records), now_ms)

    def ready(self) -> Ready:
        out = self._ready
        self._ready = Ready()
        return out

    def next_deadline(self) -> int:
        deadlines = [self._deadline]
        if self._parked:
            deadlines.append(min(d for _, d in self._parked))
        if self._inflight_until >= 0:
            deadlines.append(self._inflight_until)
        vote = election.vote_deadline(self)
        if vote is not None:
            deadlines.append(vote)
        return min(deadlines)

    def on_persisted(self, durable_end_offset: int, now_ms: int) -> None:
        self.durable_end = min(durable_end_offset, self.log.end_offset)
        if self.role is Role.LEADER:
            self._maybe_advance_hw(now_ms)
        self._deliver()
        rep.maybe_fetch(self, now_ms)

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of the leader: tell the voters so a successor is elected
        without waiting for a timeout (EndQuorumEpoch)."""
        if self.role is not Role.LEADER:
            return
        order = sorted(
            (v for v in self.voters if v != self.node_id),
            key=lambda v: -self.progress.get(v, Progress()).fetch_offset,
        )
        self._resign(order, now_ms)

    def _resign(self, order: list[int], now_ms: int) -> None:
        for v in order:
            self._send(m.EndQuorumEpoch(self.node_id, v, self.epoch, self.node_id, tuple(order)))
        self._transition(Role.RESIGNED, self.epoch, self.node_id, self.state.voted_id, now_ms)

    def describe(self, now_ms: int) -> dict[str, object] | None:
        """The leader's view for DescribeQuorum: high watermark and, per replica, its
        directory id, log end offset, last fetch and last caught-up times (None unless
        leader). A replica fetching with another directory id than its voter's is listed
        among the observers."""
        if self.role is not Role.LEADER:
            return None

        def replica(node: int, p: Progress | None) -> dict[str, object]:
            if p is None:
                return {
                    "replica_id": node,
                    "replica_directory_id": self.directory_id,
                    "log_end_offset": self.log.end_offset,
                    "last_fetch_timestamp": now_ms,
                    "last_caught_up_timestamp": now_ms,
                }
            return {
                "replica_id": node,
                "replica_directory_id": p.directory_id,
                "log_end_offset": p.fetch_offset,
                "last_fetch_timestamp": max(p.last_fetch_ms, -1),
                "last_caught_up_timestamp": p.caught_up_ms,
            }

        voters = []
        for v in self.voter_set:
            if v.id == self.node_id and self.is_voter:
                voters.append(replica(v.id, None))
            else:
                p = self.progress.get(v.id)
                if p is None or not v.matches(v.id, p.directory_id):
                    p = Progress(directory_id=v.directory_id)
                voters.append(replica(v.id, p))
        counted = {v for v, _ in self._voter_progress()}
        observers = [
            replica(o, p)
            for o, p in sorted(self.progress.items())
            if o not in counted and o != self.node_id
        ]
        if not self.is_voter:
            observers.append(replica(self.node_id, None))
        return {
            "high_watermark": self.high_watermark,
            "current_voters": voters,
            "observers": observers,
        }

    def snapshot_id(self, end_offset: int) -> SnapshotId:
        """The id a snapshot of every record below ``end_offset`` gets; raises ValueError
        unless they are applied and committed and ``end_offset`` is a batch boundary."""
        if end_offset > min(self.high_watermark, self.applied):
            raise ValueError("a snapshot may only cover applied, committed records")
        entries = self.log.read(end_offset - 1, 1)
        if not entries or entries[0].last_offset != end_offset - 1:
            raise ValueError(f"snapshot end {end_offset} is not at a batch boundary")
        return SnapshotId(end_offset, entries[0].epoch)

    def take_snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        """Record the state machine's image of every record below ``end_offset`` and drop
        the log it covers."""
        sid = self.snapshot_id(end_offset)
        self.log.take_snapshot(sid, data)
        self._history.compact(self.log.start_offset)
        self._kraft.compact(self.log.start_offset)
        return sid

    # -- time -------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        if self._parked:
            due = [(r, d) for r, d in self._parked if d <= now_ms]
            if due:
                self._parked = [(r, d) for r, d in self._parked if d > now_ms]
                for req, _ in due:
                    rep.answer_fetch(self, req, now_ms)
        if 0 <= self._inflight_until <= now_ms:
            self._inflight_until = -1
            self._fetching = None  # timed out: a late answer to it will be dropped
            if self.role is Role.FOLLOWER and not self.electable:
                self._transition(Role.UNATTACHED, self.epoch, -1, self.state.voted_id, now_ms)
        if now_ms >= self._deadline:
            self._on_deadline(now_ms)
        election.retry_votes(self, now_ms)
        rep.maybe_fetch(self, now_ms)

    def _on_deadline(self, now_ms: int) -> None:
        role = self.role
        if role is Role.LEADER:
            self._check_quorum(now_ms)
        elif not self.electable:
            if role is not Role.UNATTACHED:  # lost the leader (or the vote): look for it
                self._transition(Role.UNATTACHED, self.epoch, -1, self.state.voted_id, now_ms)
            self._deadline = now_ms + self.config.fetch_timeout_ms
        elif role is Role.FOLLOWER:
            log.info(
                "[node %d] No fetch from leader %d within %d ms",
                self.node_id,
                self.leader_id,
                self.config.fetch_timeout_ms,
            )
            election.become_prospective(self, now_ms)
        elif role in (Role.UNATTACHED, Role.RESIGNED, Role.PROSPECTIVE, Role.CANDIDATE):
            election.become_prospective(self, now_ms)

    def _check_quorum(self, now_ms: int) -> None:
        cfg = self.config
        self._deadline = now_ms + cfg.fetch_timeout_ms // 4
        if self.voters == (self.node_id,) and self.is_voter:
            return
        recent = [
            v for v, p in self._voter_progress() if p.last_fetch_ms >= now_ms - cfg.fetch_timeout_ms
        ]
        me = 1 if self.is_voter else 0
        if len(recent) + me >= majority(len(self.voters)):
            return
        if now_ms - self._leader_since_ms < cfg.fetch_timeout_ms:
            return
        unreachable = [v for v in self.voters if v != self.node_id and v not in recent]
        log.warning(
            "[node %d] Cannot reach a majority of the voters: no fetch within %d ms from "
            "%s; resigning leadership of epoch %d",
            self.node_id,
            cfg.fetch_timeout_ms,
            ",".join(map(str, unreachable)),
            self.epoch,
        )
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
        new = ElectionState(epoch, leader, voted, self.voters)
        if new != self.state:
            self._ready.state = new
        old_role, old_epoch = self.role, self.state.epoch
        self.state = new
        self.role = role
        self._votes = {}
        self._vote_requests = {}
        parked, self._parked = self._parked, []
        for req, _ in parked:  # long-polling fetchers learn at once that we moved on
            rep.fetch_error(self, req, m.NOT_LEADER_OR_FOLLOWER)
        self._inflight_until = -1
        self._fetching = None  # an answer to a request of the previous state is dropped
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
        rep.release_parked(self, now_ms)
        return entry.last_offset

    def _maybe_advance_hw(self, now_ms: int) -> None:
        """Commit what a majority of the latest voter set has durably; the leader counts
        itself only while it is one of them (KIP-853: a leader removing itself commits
        its removal with the new majority, then resigns)."""
        mine = [self.durable_end] if self.is_voter else []
        offsets = mine + [p.fetch_offset for _, p in self._voter_progress()]
        hw = majority_offset(offsets, len(self.voters))
        if hw > self.high_watermark and hw > self.epoch_start_offset:
            self.high_watermark = hw
            self._ready.high_watermark = hw
            rep.release_parked(self, now_ms)
        if (
            self.role is Role.LEADER
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
            order = sorted(
                self.voters, key=lambda v: -self.progress.get(v, Progress()).fetch_offset
            )
            self._resign(order, now_ms)

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

    # -- messages ---------------------------------------------------------------------

    def step(self, msg: m.Message, now_ms: int) -> None:
        match msg:
            case m.VoteRequest():
                election.on_vote_request(self, msg, now_ms)
            case m.VoteResponse():
                election.on_vote_response(self, msg, now_ms)
            case m.BeginQuorumEpoch():
                if msg.epoch >= self.epoch and self.electable:
                    self._observe_epoch(msg.epoch, msg.leader_id, now_ms)
                    if self.role is Role.FOLLOWER and self.leader_id == msg.src:
                        self._leader_contact_ms = now_ms
            case m.EndQuorumEpoch():
                self._on_end_quorum_epoch(msg, now_ms)
            case m.FetchRequest():
                rep.on_fetch_request(self, msg, now_ms)
            case m.FetchResponse():
                rep.on_fetch_response(self, msg, now_ms)
            case m.FetchSnapshotRequest():
                rep.on_fetch_snapshot_request(self, msg, now_ms)
            case m.FetchSnapshotResponse():
                rep.on_fetch_snapshot_response(self, msg, now_ms)
        self._deliver()
        rep.maybe_fetch(self, now_ms)

    def _on_end_quorum_epoch(self, req: m.EndQuorumEpoch, now_ms: int) -> None:
        if req.epoch < self.epoch or not self.electable:
            return
        if req.epoch > self.epoch or self.leader_id == req.leader_id:
            self._transition(
                Role.UNATTACHED,
                req.epoch,
                -1,
                self.state.voted_id if req.epoch == self.epoch else -1,
                now_ms,
            )
            rank = (
                req.preferred_successors.index(self.node_id)
                if self.node_id in req.preferred_successors
                else len(self.voters)
            )
            # the best-placed successor runs first; the others give it a head start
            self._deadline = now_ms + rank * self.config.election_backoff_max_ms // max(
                len(self.voters), 1
            )
