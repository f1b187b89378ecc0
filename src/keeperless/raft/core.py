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
from dataclasses import dataclass, field

from keeperless.protocol.records import build_batch
from keeperless.raft import election
from keeperless.raft import messages as m
from keeperless.raft import replication as rep
from keeperless.raft.log import RaftLog
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.raft.quorum import majority, majority_offset
from keeperless.raft.state import ElectionState, Progress, Role

__all__ = ["NotLeaderError", "RaftConfig", "RaftCore", "Ready", "Role"]

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
        voters: tuple[int, ...],
        raft_log: RaftLog,
        state: ElectionState,
        config: RaftConfig,
        rng: random.Random,
        now_ms: int,
        high_watermark: int = 0,
    ) -> None:
        self.node_id = node_id
        self.voters = tuple(sorted(voters))
        self.log = raft_log
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

    # -- public ----------------------------------------------------------------------

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

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
        if self.voters == (self.node_id,):
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
        for v in order:
            self._send(m.EndQuorumEpoch(self.node_id, v, self.epoch, self.node_id, tuple(order)))
        self._transition(Role.RESIGNED, self.epoch, self.node_id, self.state.voted_id, now_ms)

    def describe(self, now_ms: int) -> dict[str, object] | None:
        """The leader's view for DescribeQuorum: high watermark and, per replica, its log
        end offset, last fetch and last caught-up times (None unless leader)."""
        if self.role is not Role.LEADER:
            return None

        def replica(node: int) -> dict[str, int]:
            if node == self.node_id:
                return {
                    "replica_id": node,
                    "log_end_offset": self.log.end_offset,
                    "last_fetch_timestamp": now_ms,
                    "last_caught_up_timestamp": now_ms,
                }
            p = self.progress.get(node, Progress())
            return {
                "replica_id": node,
                "log_end_offset": p.fetch_offset,
                "last_fetch_timestamp": max(p.last_fetch_ms, -1),
                "last_caught_up_timestamp": p.caught_up_ms,
            }

        return {
            "high_watermark": self.high_watermark,
            "current_voters": [replica(v) for v in self.voters],
            "observers": [replica(o) for o in sorted(self.progress) if o not in self.voters],
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
            if self.role is Role.FOLLOWER and not self.is_voter:
                self._transition(Role.UNATTACHED, self.epoch, -1, -1, now_ms)
        if now_ms >= self._deadline:
            self._on_deadline(now_ms)
        election.retry_votes(self, now_ms)
        rep.maybe_fetch(self, now_ms)

    def _on_deadline(self, now_ms: int) -> None:
        role = self.role
        if role is Role.LEADER:
            self._check_quorum(now_ms)
        elif not self.is_voter:
            if role is Role.FOLLOWER:  # lost the leader: look for it again
                self._transition(Role.UNATTACHED, self.epoch, -1, -1, now_ms)
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
        if len(self.voters) == 1:
            return
        recent = [
            v
            for v, p in self.progress.items()
            if p.last_fetch_ms >= now_ms - cfg.fetch_timeout_ms and v in self.voters
        ]
        if len(recent) + 1 >= majority(len(self.voters)):
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
        elif role is Role.UNATTACHED and not self.is_voter:
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
        self._ready.sync_log = True
        rep.release_parked(self, now_ms)
        return entry.last_offset

    def _maybe_advance_hw(self, now_ms: int) -> None:
        offsets = [self.durable_end] + [
            p.fetch_offset for v, p in self.progress.items() if v in self.voters
        ]
        hw = majority_offset(offsets, len(self.voters))
        if hw > self.high_watermark and hw > self.epoch_start_offset:
            self.high_watermark = hw
            self._ready.high_watermark = hw
            rep.release_parked(self, now_ms)

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
                if msg.epoch >= self.epoch and self.is_voter:
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
        if req.epoch < self.epoch or not self.is_voter:
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
