"""A deterministic simulation of a KRaft quorum (after Kafka's RaftEventSimulationTest).

One seeded RNG drives everything: a simulated clock (each node reads it through its
own drifting, offset clock); a network that drops, duplicates, delays (sometimes by
several election timeouts, so messages overtake each other by seconds) and partitions
(symmetrically or not), and that delivers stale copies of old messages long after,
also to nodes that restarted meanwhile; crashes that lose unsynced log data, keep it,
or keep part of it (a torn tail); crashes in the middle of writing the election state
(the write is lost, or it is durable and the messages after it never leave); nodes
started with a stale voter set; proposals and snapshots. With ``membership`` the quorum
is dynamic (KIP-853): voters are added and removed (the leader too) while all that goes
on, and a node's disk is replaced by an empty one with a new directory id, after which
the old voter is removed and the node may be added again.

Every observation goes to ``SafetyChecker`` (tests/sim/checker.py), which checks Raft's
safety properties over the whole history after every event. A failure names the seed
and the last events before it; the same seed replays exactly.
"""

from __future__ import annotations

import collections
import heapq
import json
import math
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from keeperless.protocol.records import build_batch
from keeperless.raft.core import MembershipError, RaftConfig, RaftCore, Role
from keeperless.raft.log import MemoryLog
from keeperless.raft.messages import (
    INCONSISTENT_VOTER_SET,
    Entry,
    FetchResponse,
    Message,
    SnapshotId,
    VoteResponse,
)
from keeperless.raft.state import ElectionState
from keeperless.raft.voters import Voter, VoterSet
from tests.sim.checker import (
    DiskView,
    Key,
    SafetyChecker,
    entry_values,
    key_of,
    snapshot_key,
    snapshot_values,
)

CONFIG = RaftConfig(
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    election_backoff_max_ms=150,
    request_timeout_ms=200,
    fetch_max_wait_ms=50,
    max_fetch_entries=8,
    snapshot_chunk_bytes=64,
)
NEVER = 2**62


class InvariantError(AssertionError):
    pass


@dataclass
class SimNode:
    node_id: int
    disk: DiskView
    voters: tuple[int, ...]  # as its configuration says (stale for a "believer")
    core: RaftCore | None = None
    log: SimLog | None = None
    applied: list[tuple[int, bytes]] = field(default_factory=list)
    applied_end: int = 0
    incarnation: int = 0
    hw: int = 0
    epoch: int = 0
    leader_epoch: int | None = None
    role: Role | None = None
    sync_pending: bool = False
    dirty_from: int = NEVER  # the log changed at and after this offset since the last sync
    tick_at: int = -1
    tick_token: int = 0
    clock_rate: float = 1.0
    clock_skew: int = 0
    crash_armed: bool = False  # crash at the next election-state write
    directory_id: uuid.UUID | None = None  # a dynamic quorum's nodes have one per disk
    bootstrap: VoterSet = field(default_factory=VoterSet)  # as storage format wrote it


def _precious(msg: Message) -> bool:
    """Messages rare and consequential enough that a stale copy is always worth keeping."""
    if isinstance(msg, FetchResponse):
        return msg.diverging is not None or msg.snapshot is not None
    return isinstance(msg, VoteResponse) and msg.granted


class SimLog(MemoryLog):
    """The in-memory log of a simulated node, reporting every change to the checker;
    snapshots are written to the node's disk at once, as the runtime writes their files
    durably before it goes on."""

    def __init__(self, sim: Simulation, node: SimNode) -> None:
        super().__init__()
        self.sim = sim
        self.node = node
        self.hooked = False

    def _leading(self) -> bool:
        core = self.node.core
        return core is not None and core.role is Role.LEADER

    def _last_key(self) -> Key | None:
        if self.entries:
            return key_of(self.entries[-1])
        return snapshot_key(self._snapshot) if self._snapshot else None

    def append(self, entries: list[Entry]) -> None:
        if self.hooked and entries:
            core = self.node.core
            epoch = core.epoch if core is not None and self._leading() else None
            read = self.read if epoch is not None else None
            self.sim.checker.appended(self.node.node_id, self._last_key(), entries, epoch, read)
            self.node.dirty_from = min(self.node.dirty_from, entries[0].base_offset)
        super().append(entries)

    def truncate_to(self, offset: int) -> None:
        if self.hooked:
            removed = [e for e in self.entries if e.last_offset >= offset]
            n = self.node
            self.sim.checker.truncated(n.node_id, offset, removed, self._leading(), n.applied_end)
            if removed:
                n.dirty_from = min(n.dirty_from, removed[0].base_offset)
                self.sim.stir(n.node_id, 200)
        super().truncate_to(offset)

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        if self.hooked:
            n = self.node
            if self._leading():
                self.sim.fail(f"leader {n.node_id} replaced its log by a snapshot")
            self.sim.checker.snapshot_made(n.node_id, snapshot, data, n.applied_end)
            n.disk.snapshot = (snapshot, data)
            n.disk.entries = []
            n.dirty_from = NEVER
            self.sim.checker.disk_changed(n.node_id, n.disk, None)
        super().install_snapshot(snapshot, data)

    def take_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        n = self.node
        self.sim.checker.snapshot_made(n.node_id, snapshot, data, None)
        super().take_snapshot(snapshot, data)
        n.disk.snapshot = (snapshot, data)
        n.disk.entries = [e for e in n.disk.entries if e.last_offset >= snapshot.end_offset]
        self.sim.checker.disk_changed(n.node_id, n.disk, snapshot.end_offset)


class Simulation:
    def __init__(
        self,
        seed: int,
        voters: int = 3,
        observers: int = 1,
        faults: bool = True,
        believers: tuple[int, ...] = (),
        membership: bool = False,
        upgrade: bool = False,
    ) -> None:
        """``membership``: a dynamic quorum (KIP-853) whose voters change; with
        ``upgrade`` it starts static (kraft.version 0) and is upgraded under the faults."""
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.queue: list[tuple[int, int, str, Any]] = []
        self.seq = 0
        self.voter_ids = tuple(range(1, voters + 1))
        self.membership = membership
        self.changes: collections.Counter[str] = collections.Counter()
        ids = tuple(range(1, voters + observers + 1))
        dirs = {i: self._new_dir(i) for i in self.voter_ids}
        initial = VoterSet.of(Voter(i, None if upgrade else dirs[i]) for i in self.voter_ids)
        self.kraft_version = 0 if upgrade else 1
        self.checker = SafetyChecker(
            self.voter_ids, self.fail, initial if membership else None, ids if membership else ()
        )
        self.trace: collections.deque[str] = collections.deque(maxlen=40)
        # nodes whose (stale) configuration still lists them as voters
        self.believers = believers
        self.nodes: dict[int, SimNode] = {}
        self.faults = faults
        rng = self.rng
        self.drop_p = rng.choice([0.0, 0.02, 0.1]) if faults else 0.0
        self.dup_p = rng.choice([0.0, 0.05]) if faults else 0.0
        self.slow_p = rng.choice([0.0, 0.02, 0.05]) if faults else 0.0
        self.slow_max_ms = rng.choice([4 * CONFIG.election_timeout_ms, 2000])
        self.replay_p = rng.choice([0.0, 0.05, 0.2]) if faults else 0.0
        drift = rng.choice([0.0, 0.05, 0.1]) if faults else 0.0
        self.fsync_max_ms = rng.choice([3, 3, 40]) if faults else 3  # sometimes a slow disk
        # old messages, for stale redelivery (the rare, consequential ones kept apart so
        # that the everyday ones do not push them out)
        self.pool: list[Message] = []
        self.precious: list[Message] = []
        self.blocked: set[tuple[int, int]] = set()
        self.proposals = 0
        self.epoch_of_chaos = 0
        self.told: dict[int, int] = {}  # node -> INCONSISTENT_VOTER_SET answers it got
        for i in ids:
            configured = self.voter_ids + ((i,) if i in believers else ())
            n = SimNode(i, DiskView(ElectionState(voters=configured)), configured)
            n.clock_rate = 1.0 + rng.uniform(-drift, drift)
            if membership:
                n.directory_id = dirs[i] if i in dirs else self._new_dir(i)
                # the first voters were formatted with --initial-controllers, the others
                # with --no-initial-controllers (a static quorum's all know its voters)
                n.bootstrap = initial if i in self.voter_ids or upgrade else VoterSet()
            self.nodes[i] = n
            self.checker.dirs[i] = n.directory_id
        for n in self.nodes.values():
            self._boot(n)

    def _new_dir(self, node_id: int) -> uuid.UUID:
        """A new directory id for ``node_id`` (a formatted disk)."""
        self.seq += 1
        return uuid.UUID(int=(node_id << 32) + self.seq)

    # -- clocks ---------------------------------------------------------------------

    def _local(self, n: SimNode) -> int:
        return n.clock_skew + int(self.now * n.clock_rate)

    def _sim_time(self, n: SimNode, local_ms: int) -> int:
        t = math.ceil((local_ms - n.clock_skew) / n.clock_rate)
        while n.clock_skew + int(t * n.clock_rate) < local_ms:
            t += 1
        return t

    # -- events -------------------------------------------------------------------------

    def _at(self, t: int, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, kind, payload))

    def _boot(self, n: SimNode) -> None:
        n.incarnation += 1
        log = SimLog(self, n)
        applied: list[tuple[int, bytes]] = []
        if n.disk.snapshot is not None:
            sid, data = n.disk.snapshot
            log.install_snapshot(sid, data)
            applied = snapshot_values(data)
        log.append(list(n.disk.entries))
        log.hooked = True
        n.log = log
        n.applied = applied
        n.applied_end = log.start_offset
        n.dirty_from = NEVER
        n.clock_skew = self.rng.randrange(10**6)  # a restarted monotonic clock
        n.core = RaftCore(
            n.node_id,
            n.bootstrap if self.membership else n.voters,
            log,
            n.disk.state,
            CONFIG,
            random.Random(self.rng.random()),
            self._local(n),
            directory_id=n.directory_id,
            kraft_version=self.kraft_version if self.membership else 0,
            bootstrap=self.voter_ids,
        )
        n.hw = n.core.high_watermark  # what its snapshot holds: committed before
        if n.hw > 0:
            self.checker.high_watermark(n.node_id, n.hw, None, log.read)
        n.epoch = n.disk.state.epoch
        n.leader_epoch = None
        n.role = None
        n.sync_pending = False
        n.crash_armed = False
        self.trace.append(f"t={self.now} boot node {n.node_id} (epoch {n.epoch})")
        n.core.start(self._local(n))
        if self._process(n):
            n.tick_at = -1
            self._reschedule(n)

    def _process(self, n: SimNode) -> bool:
        """Carry out the core's Ready as the runtime does; False if the node crashed."""
        core, log = n.core, n.log
        assert core is not None
        assert log is not None
        r = core.ready()
        if r.state is not None:
            if n.crash_armed:
                # a crash while the election state is written: the rename did not happen
                # (the old state stays), or it did and nothing after it was sent
                if self.rng.random() < 0.5:
                    self.checker.state_written(n.node_id, n.disk.state, r.state)
                    n.disk.state = r.state
                elif r.state.leader_id == n.node_id and (
                    n.disk.state.epoch,
                    n.disk.state.leader_id,
                ) != (r.state.epoch, n.node_id):
                    # its leadership never became durable: what it appended as the leader
                    # was neither written nor sent, and its epoch may be won again
                    self.checker.forget_leader(n.node_id, r.state.epoch)
                self.trace.append(f"t={self.now} node {n.node_id} crashed writing {r.state}")
                self._crash(n, "lose")
                self._at(self.now + self.rng.randint(20, 400), "restart", n.node_id)
                return False
            self.checker.state_written(n.node_id, n.disk.state, r.state)
            n.disk.state = r.state  # durable before any message leaves
        for msg in r.messages:
            self.checker.sent(n.node_id, msg, n.disk)
            self._send(msg)
        if r.snapshot is not None:
            sid, data = r.snapshot
            n.applied = snapshot_values(data)
            n.applied_end = sid.end_offset
        self._check_node(n)  # (a leader's new high watermark commits what it applies)
        for e in r.committed:
            self.checker.applied(n.node_id, e, n.applied_end)
            n.applied.extend(entry_values(e))
            n.applied_end = e.last_offset + 1
        if r.sync_log and not n.sync_pending:
            n.sync_pending = True
            delay = self.rng.randint(0, self.fsync_max_ms)
            self._at(self.now + delay, "sync", (n.node_id, n.incarnation))
        return True

    def _delay(self) -> int:
        if self.slow_p and self.rng.random() < self.slow_p:
            return self.rng.randint(16, self.slow_max_ms)
        return self.rng.randint(1, 15)

    def _send(self, msg: Message) -> None:
        if self.replay_p:
            pool = self.precious if _precious(msg) else self.pool
            if pool is self.precious or self.rng.random() < self.replay_p:
                if len(pool) < 64:
                    pool.append(msg)
                else:
                    pool[self.rng.randrange(64)] = msg
        if (msg.src, msg.dst) in self.blocked or self.rng.random() < self.drop_p:
            return
        self._at(self.now + self._delay(), "msg", msg)
        if self.rng.random() < self.dup_p:  # the copy may come much later
            late = self.rng.random() < 0.5
            delay = self.rng.randint(16, self.slow_max_ms) if late else self._delay()
            self._at(self.now + delay, "msg", msg)

    def _live(self, node_id: int, incarnation: int | None = None) -> SimNode | None:
        n = self.nodes[node_id]
        if n.core is None or (incarnation is not None and incarnation != n.incarnation):
            return None
        return n

    def run(self, duration_ms: int, chaos: bool = True) -> None:
        end = self.now + duration_ms
        if chaos:
            self._schedule_chaos(end)
        while self.queue and self.queue[0][0] <= end:
            t, _, kind, payload = heapq.heappop(self.queue)
            self.now = max(self.now, t)
            self._handle(kind, payload)
        self.now = end

    def _step(self, n: SimNode, fn: Any) -> None:
        """Run ``fn(core, local_now)`` on a live node, then carry out its Ready."""
        assert n.core is not None
        fn(n.core, self._local(n))
        if self._process(n):
            self._reschedule(n)

    def _handle(self, kind: str, payload: Any) -> None:
        if kind == "msg":
            n = self._live(payload.dst)
            if n is not None and (payload.src, payload.dst) not in self.blocked:
                if getattr(payload, "error", 0) == INCONSISTENT_VOTER_SET:
                    self.told[payload.dst] = self.told.get(payload.dst, 0) + 1
                self._step(n, lambda core, now: core.step(payload, now))
        elif kind == "tick":
            node_id, incarnation, token = payload
            n = self._live(node_id, incarnation)
            if n is not None and token == n.tick_token:
                n.tick_at = -1
                self._step(n, lambda core, now: core.tick(now))
        elif kind == "sync":
            n = self._live(*payload)
            if n is not None:
                assert n.log is not None
                n.sync_pending = False
                n.disk.entries = list(n.log.entries)
                self.checker.disk_changed(n.node_id, n.disk, n.dirty_from)
                n.dirty_from = NEVER
                end = n.log.end_offset
                self._step(n, lambda core, now: core.on_persisted(end, now))
        elif kind == "propose":
            if payload is None or payload == self.epoch_of_chaos:
                self._propose()
        elif kind == "snapshot":
            self._snapshot(payload)
        elif kind == "crash":
            if self.nodes[payload[0]].core is not None:
                self.crash(*payload)
        elif kind == "arm":
            n = self._live(payload)
            if n is not None:
                n.crash_armed = True
        elif kind == "restart":
            n = self.nodes[payload]
            if n.core is None:
                self._boot(n)
                if self.replay_p:
                    self._at(self.now + self.rng.randint(1, 50), "replay", n.node_id)
        elif kind == "replay":
            self._replay(payload)
        elif kind == "partition":
            self.trace.append(f"t={self.now} partition {sorted(payload)}")
            self.blocked = payload
        elif kind == "member":
            self._change_voters()
        elif kind == "upgrade":
            self._upgrade()
        elif kind == "wipe":
            self._wipe(payload)
        self.checker.check_durable({i: n.disk for i, n in self.nodes.items()})

    def _reschedule(self, n: SimNode) -> None:
        """Keep one pending tick per node, at its core's next deadline."""
        assert n.core is not None
        dl = max(self._sim_time(n, n.core.next_deadline()), self.now + 1)
        if n.tick_at < 0 or dl < n.tick_at:
            n.tick_at = dl
            n.tick_token += 1
            self._at(dl, "tick", (n.node_id, n.incarnation, n.tick_token))

    # -- chaos and workload ---------------------------------------------------------------

    def _schedule_chaos(self, end: int) -> None:
        rng = self.rng
        t = self.now
        self.epoch_of_chaos += 1
        while t < end:
            t += rng.randint(5, 40)
            self._at(t, "propose", self.epoch_of_chaos)
        if not self.faults:
            return
        ids = list(self.nodes)

        def some_time() -> int:
            return self.now + rng.randint(0, max(end - self.now - 400, 1))

        for _ in range(rng.randint(1, 4)):
            t = some_time()
            victim = rng.choice(ids)
            if rng.random() < 0.25:
                self._at(t, "arm", victim)  # crash at its next election-state write
            else:
                self._at(t, "crash", (victim, rng.choice(["keep", "lose", "partial"])))
                self._at(t + rng.randint(20, 400), "restart", victim)
        for _ in range(rng.randint(0, 3)):
            t = some_time()
            group = set(rng.sample(ids, rng.randint(1, len(ids) - 1)))
            symmetric = rng.random() < 0.6
            cut = {(a, b) for a in group for b in ids if b not in group}
            if symmetric:
                cut |= {(b, a) for a, b in cut}
            self._at(t, "partition", cut)
            self._at(t + rng.randint(50, 600), "partition", set())
        for _ in range(rng.randint(0, 3)):
            self._at(self.now + rng.randint(0, end - self.now), "snapshot", rng.choice(ids))
        if self.membership:
            for _ in range(rng.randint(2, 8)):
                self._at(some_time(), "member", None)
            if self.kraft_version == 0:
                for _ in range(rng.randint(1, 3)):
                    self._at(some_time(), "upgrade", None)
            for _ in range(rng.randint(0, 2)):
                self._at(some_time(), "wipe", rng.choice(ids))
        if self.replay_p:
            for _ in range(rng.randint(2, 12)):
                self._at(some_time(), "replay", None)

    def stir(self, node_id: int, within_ms: int) -> None:
        """``node_id`` just changed state (role, or its log was cut): stale copies of old
        messages to it are likely to arrive within ``within_ms``, when they matter most."""
        if self.replay_p and self.rng.random() < 0.3:
            for _ in range(self.rng.randint(1, 3)):
                self._at(self.now + self.rng.randint(0, within_ms), "replay", node_id)

    def _replay(self, target: int | None) -> None:
        """Deliver stale copies of old messages to ``target`` (a random live node if
        None). Like a nemesis that knows the protocol, it prefers the copies the node
        could still mistake for current: answers to a fetch at its present log end, vote
        answers while it campaigns."""
        if target is None:
            live = [n for n in self.nodes.values() if n.core is not None]
            if not live:
                return
            target = self.rng.choice(live).node_id
        n = self.nodes[target]
        pool = [msg for msg in self.pool + self.precious if msg.dst == target]
        if n.core is not None and n.log is not None and self.rng.random() < 0.7:
            end, role = n.log.end_offset, n.core.role
            apt = [
                msg
                for msg in pool
                if (isinstance(msg, FetchResponse) and msg.fetch_offset == end)
                or (
                    isinstance(msg, VoteResponse)
                    and role in (Role.PROSPECTIVE, Role.CANDIDATE)
                    and msg.granted
                )
            ]
            pool = apt or pool
        for msg in self.rng.sample(pool, min(len(pool), self.rng.randint(1, 5))):
            self._at(self.now + self.rng.randint(0, 10), "msg", msg)

    def _propose(self) -> None:
        """A client writes to a node that believes it leads (a deposed leader that has
        not noticed yet gathers entries that must never commit)."""
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.is_leader]
        if leaders:
            self.proposals += 1
            value = b"v%d" % self.proposals
            self._step(self.rng.choice(leaders), lambda core, now: core.propose([value], now))

    def _snapshot(self, node_id: int) -> None:
        n = self._live(node_id)
        if n is None or n.core is None or n.log is None:
            return
        end = min(n.core.applied, n.core.high_watermark)
        if end <= n.log.start_offset:
            return
        entries = n.log.read(end - 1, 1)
        if not entries or entries[0].last_offset != end - 1:
            return
        values = json.dumps([(o, v.hex()) for o, v in n.applied if o < end]).encode()
        data = n.core.snapshot_voters_records(end) + build_batch([(None, values, ())])
        n.core.take_snapshot(end, data)

    def _change_voters(self) -> None:
        """An operator's voter change at the leader (refusals are part of the game): add
        a node that is not a voter, or remove a voter (the leader too; a voter whose disk
        was replaced first), keeping between one and five voters."""
        leader = self.leader()
        if leader is None or leader.core is None:
            return
        rng = self.rng
        vs = leader.core.voter_set
        stale = [v for v in vs if self.nodes[v.id].directory_id != v.directory_id]
        outside = [n for n in self.nodes.values() if n.node_id not in vs.ids]
        ops = (["add"] if outside and len(vs) < 5 else []) + (["remove"] if len(vs) > 1 else [])
        if not ops:
            return
        op = rng.choice(ops)
        if op == "add":
            n = rng.choice(outside)
            voter = Voter(n.node_id, n.directory_id)
        else:
            voter = stale[0] if stale else rng.choice(list(vs))

        def change(core: RaftCore, now: int) -> None:
            try:
                if op == "add":
                    core.add_voter(voter, now)
                else:
                    core.remove_voter(voter.id, voter.directory_id, now)
            except MembershipError as e:
                self.trace.append(f"t={self.now} {op} {voter} refused: {e}")
                return
            self.changes[op] += 1
            if op == "remove" and voter.id == leader.node_id:
                self.changes["remove-leader"] += 1
            self.trace.append(f"t={self.now} {op} {voter} at leader {leader.node_id}")

        self._step(leader, change)

    def _upgrade(self) -> None:
        """kafka-features upgrade --feature kraft.version=1 at the leader."""
        leader = self.leader()
        if leader is None or leader.core is None:
            return

        def upgrade(core: RaftCore, now: int) -> None:
            try:
                core.upgrade_kraft_version(1, {}, now)
            except MembershipError as e:
                self.trace.append(f"t={self.now} upgrade refused: {e}")
                return
            self.changes["upgrade"] += 1
            self.trace.append(f"t={self.now} kraft.version 1 at leader {leader.node_id}")

        self._step(leader, upgrade)

    def _wipe(self, node_id: int) -> None:
        """Replace ``node_id``'s disk by an empty one (a new directory id, formatted to
        join): one disk at a time, only once the voter set is settled, and only if the
        other voters hold every committed entry in each majority (as an operator replaces
        a disk in a healthy quorum; replacing a majority's disks loses data by design)."""
        n = self.nodes[node_id]
        config = self.checker.config
        live = [x.core for x in self.nodes.values() if x.core is not None]
        if any(self.nodes[v.id].directory_id != v.directory_id for v in config):
            return  # a replaced disk's voter is still to be removed
        if any(c.voter_set != config for c in live):
            return  # a voter change is under way
        if node_id in config.ids:
            if len(config) < 3 or any(v.directory_id is None for v in config):
                return  # (a static voter's lost disk is the hazard KIP-853 removes)
            disks = {i: x.disk for i, x in self.nodes.items()}
            have = self.checker.holders(disks, self.checker.committed_end) - {node_id}
            if len(have) < self.checker.need() - 1:
                return
        self.trace.append(f"t={self.now} wipe node {node_id}")
        self._crash(n, "lose")
        n.disk = DiskView(ElectionState())
        n.directory_id = self._new_dir(node_id)
        n.bootstrap = VoterSet()  # formatted with --no-initial-controllers
        self.checker.wiped(node_id, n.directory_id)
        self.checker.disk_changed(node_id, n.disk, None)
        self.changes["wipe"] += 1
        self._at(self.now + self.rng.randint(20, 400), "restart", node_id)

    def _crash(self, n: SimNode, mode: str) -> None:
        """Stop ``n``. Its disk keeps what was synced ("lose"), everything ("keep"), or
        the part of the unsynced tail that reached the disk ("partial", a torn tail that
        recovery cuts back to whole batches)."""
        if n.core is None or n.log is None:
            return
        mem, disk = n.log.entries, n.disk.entries
        if mode == "keep":
            n.disk.entries = list(mem)
            self.checker.disk_changed(n.node_id, n.disk, n.dirty_from)
        elif mode == "partial":
            common = 0
            while common < min(len(mem), len(disk)) and mem[common] == disk[common]:
                common += 1
            n.disk.entries = list(mem[: self.rng.randint(common, len(mem))])
            self.checker.disk_changed(n.node_id, n.disk, None)
        if n.leader_epoch is not None:
            self.checker.leader_gone(n.node_id)
        n.core = None
        n.log = None

    def crash(self, node_id: int, mode: str = "lose") -> None:
        self.trace.append(f"t={self.now} crash node {node_id} ({mode})")
        self._crash(self.nodes[node_id], mode)

    def restart(self, node_id: int) -> None:
        if self.nodes[node_id].core is None:
            self._boot(self.nodes[node_id])

    def heal(self) -> None:
        """End every fault and stop the workload (pending chaos events are dropped;
        messages already on their way still arrive)."""
        self.epoch_of_chaos += 1
        self.queue = [ev for ev in self.queue if ev[2] in ("msg", "tick", "sync")]
        heapq.heapify(self.queue)
        self.blocked = set()
        self.drop_p = self.dup_p = self.slow_p = self.replay_p = 0.0
        for n in self.nodes.values():
            n.crash_armed = False
            if n.core is None:
                self._boot(n)

    # -- invariants ---------------------------------------------------------------------

    def fail(self, msg: str) -> None:
        history = "\n  ".join(self.trace)
        raise InvariantError(
            f"seed {self.seed} at t={self.now}ms: {msg}\n last events:\n  {history}"
        )

    def _check_node(self, n: SimNode) -> None:
        core, log = n.core, n.log
        assert core is not None
        assert log is not None
        if core.epoch < n.epoch:
            self.fail(f"node {n.node_id} epoch went back {n.epoch} -> {core.epoch}")
        if core.role is not n.role:
            n.role = core.role
            campaigning = core.role in (Role.PROSPECTIVE, Role.CANDIDATE)
            self.stir(n.node_id, 10 if campaigning else 40)  # a campaign is over quickly
        if core.epoch != n.epoch or (core.role is Role.LEADER) != (n.leader_epoch is not None):
            self.trace.append(
                f"t={self.now} node {n.node_id}: {core.role.value} epoch {core.epoch} "
                f"leader {core.leader_id} log {log.start_offset}-{log.end_offset} "
                f"hw {core.high_watermark}"
            )
        n.epoch = core.epoch
        leading = core.role is Role.LEADER
        hw = core.high_watermark
        if hw < n.hw:
            self.fail(f"node {n.node_id} high watermark went back {n.hw} -> {hw}")
        if not leading and n.leader_epoch == core.epoch and hw > n.hw:
            # it committed as the leader, then resigned in the same step (a leader that
            # removed itself from the voters resigns once that commits)
            self.checker.high_watermark(n.node_id, hw, n.leader_epoch, log.read)
            n.hw = hw
        if leading and n.leader_epoch != core.epoch:
            if n.leader_epoch is not None:
                self.checker.leader_gone(n.node_id)
            n.leader_epoch = core.epoch
            self.checker.leader_elected(n.node_id, core.epoch, log.read, log.start_offset)
        elif not leading and n.leader_epoch is not None:
            n.leader_epoch = None
            self.checker.leader_gone(n.node_id)
        if hw > n.hw:
            self.checker.high_watermark(n.node_id, hw, n.leader_epoch, log.read)
        n.hw = hw

    def check_full_agreement(self) -> None:
        seqs = [n.applied for n in self.nodes.values()]
        shortest = min(len(s) for s in seqs)
        for s in seqs[1:]:
            if s[:shortest] != seqs[0][:shortest]:
                self.fail("applied state machines disagree on a common prefix")
        values = [v for _, v in seqs[0]]
        if len(values) != len(set(values)):
            self.fail("a proposal was applied twice")

    @property
    def committed_hw(self) -> int:
        return self.checker.committed_end

    def leader(self) -> SimNode | None:
        for n in self.nodes.values():
            if n.core is not None and n.core.role is Role.LEADER:
                return n
        return None
