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
change goes through ``_transition`` (raft/node.py), which queues the new election state
to be written durably before any message that depends on it is sent, and gives the new
role a fresh state object of its own (raft/roles.py).

Where each rule is: the state every role shares and the steps every role takes
(transitions, appends, the high watermark, the leader's answers to fetches) are
RaftNode's (raft/node.py); votes and leadership are in raft/election.py, fetching in
raft/replication.py, voter changes in raft/membership.py, each a set of functions of a
RaftNode. This module is the driver's face of it, and holds the rules of time and of
the leader's own announcements: timeouts (``tick``, ``_on_deadline``), check-quorum
(``_check_quorum``), BeginQuorumEpoch and EndQuorumEpoch (``step``), and graceful
resignation.
"""

from __future__ import annotations

import logging
import uuid

from keeperless.protocol.records import build_batch
from keeperless.raft import election, membership
from keeperless.raft import messages as m
from keeperless.raft import replication as rep
from keeperless.raft.membership import MembershipError
from keeperless.raft.messages import SnapshotId
from keeperless.raft.node import RaftConfig, RaftNode, Ready
from keeperless.raft.quorum import majority
from keeperless.raft.roles import FollowerState, LeaderState, Progress
from keeperless.raft.state import Role
from keeperless.raft.voters import Endpoint, Voter

__all__ = ["MembershipError", "NotLeaderError", "RaftConfig", "RaftCore", "Ready", "Role"]

log = logging.getLogger(__name__)


class NotLeaderError(RuntimeError):
    """Proposals go to the leader; this node is not it."""


class RaftCore(RaftNode):
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
        cur, fetch = self.current, self._fetch
        if isinstance(cur, LeaderState) and cur.parked:
            deadlines.append(min(d for _, d in cur.parked))
        if fetch is not None and fetch.until_ms >= 0:
            deadlines.append(fetch.until_ms)
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
        leader = self.current
        if not isinstance(leader, LeaderState):
            return
        others = tuple(v for v in self.voters if v != self.node_id)
        self._resign(self._voters_by_progress(leader, others), now_ms)

    def describe(self, now_ms: int) -> dict[str, object] | None:
        """The leader's view for DescribeQuorum: high watermark and, per replica, its
        directory id, log end offset, last fetch and last caught-up times (None unless
        leader). A replica fetching with another directory id than its voter's is listed
        among the observers."""
        leader = self.current
        if not isinstance(leader, LeaderState):
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
                p = leader.progress.get(v.id)
                if p is None or not v.matches(v.id, p.directory_id):
                    p = Progress(directory_id=v.directory_id)
                voters.append(replica(v.id, p))
        counted = {v for v, _ in self._voter_progress()}
        observers = [
            replica(o, p)
            for o, p in sorted(leader.progress.items())
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
        cur, fetch = self.current, self._fetch
        if isinstance(cur, LeaderState) and cur.parked:
            due = [(r, d) for r, d in cur.parked if d <= now_ms]
            if due:
                cur.parked = [(r, d) for r, d in cur.parked if d > now_ms]
                for req, _ in due:
                    self._answer_fetch(req)
        if fetch is not None and 0 <= fetch.until_ms <= now_ms:
            fetch.clear()  # timed out: a late answer to it will be dropped
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
        leader = self.current
        if isinstance(leader, LeaderState) and now_ms - leader.since_ms < cfg.fetch_timeout_ms:
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
                    follower = self.current
                    if isinstance(follower, FollowerState) and self.leader_id == msg.src:
                        follower.leader_contact_ms = now_ms
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
