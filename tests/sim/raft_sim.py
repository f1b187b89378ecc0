"""A deterministic simulation of a KRaft quorum (after Kafka's RaftEventSimulationTest).

One seeded RNG drives a simulated clock, a network that drops, delays, reorders and
duplicates messages and can be partitioned (symmetrically or not), node crashes and
restarts (losing what was not fsynced, or not), proposals and snapshots. Invariants are
checked after every event; a failure names the seed, and the same seed replays exactly.
"""

from __future__ import annotations

import heapq
import json
import random
from dataclasses import dataclass, field
from typing import Any

from keeperless.protocol.records import decode_records
from keeperless.raft.core import RaftConfig, RaftCore, Role
from keeperless.raft.log import MemoryLog
from keeperless.raft.messages import Entry, Message, SnapshotId
from keeperless.raft.state import ElectionState

CONFIG = RaftConfig(
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    election_backoff_max_ms=150,
    request_timeout_ms=200,
    fetch_max_wait_ms=50,
    max_fetch_entries=8,
    snapshot_chunk_bytes=64,
)


class InvariantError(AssertionError):
    pass


@dataclass
class Disk:
    state: ElectionState
    entries: list[Entry] = field(default_factory=list)
    snapshot: tuple[SnapshotId, bytes] | None = None


@dataclass
class SimNode:
    node_id: int
    disk: Disk
    core: RaftCore | None = None
    log: MemoryLog | None = None
    applied: list[tuple[int, bytes]] = field(default_factory=list)
    incarnation: int = 0
    hw: int = 0
    epoch: int = 0
    sync_pending: bool = False
    tick_at: int = -1
    tick_token: int = 0


def _values(entry: Entry) -> list[tuple[int, bytes]]:
    if entry.control:
        return []
    return [(r.offset, r.value or b"") for r in decode_records(entry.data)]


def _has(entries: list[Entry], e: Entry) -> bool:
    for x in reversed(entries):
        if x.base_offset <= e.base_offset:
            return x == e
    return False


class Simulation:
    def __init__(
        self,
        seed: int,
        voters: int = 3,
        observers: int = 1,
        faults: bool = True,
        believers: tuple[int, ...] = (),
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.queue: list[tuple[int, int, str, Any]] = []
        self.seq = 0
        self.voter_ids = tuple(range(1, voters + 1))
        ids = list(range(1, voters + observers + 1))
        self.nodes = {i: SimNode(i, Disk(ElectionState(voters=self.voter_ids))) for i in ids}
        # nodes whose (stale) configuration still lists them as voters
        self.believers = believers
        self.blocked: set[tuple[int, int]] = set()
        self.faults = faults
        self.drop_p = self.rng.choice([0.0, 0.02, 0.1]) if faults else 0.0
        self.dup_p = self.rng.choice([0.0, 0.05]) if faults else 0.0
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.committed: dict[int, Entry] = {}  # base offset -> entry, as committed
        self.committed_hw = 0
        self.proposals = 0
        self.epoch_of_chaos = 0
        for n in self.nodes.values():
            self._boot(n)

    # -- events -------------------------------------------------------------------------

    def _at(self, t: int, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, kind, payload))

    def _boot(self, n: SimNode) -> None:
        n.incarnation += 1
        log = MemoryLog()
        if n.disk.snapshot is not None:
            sid, data = n.disk.snapshot
            log.install_snapshot(sid, data)
        log.append(list(n.disk.entries))
        n.log = log
        n.applied = self._load_snapshot(n.disk.snapshot)
        n.core = RaftCore(
            n.node_id,
            self.voter_ids,
            log,
            n.disk.state,
            CONFIG,
            random.Random(self.rng.random()),
            self.now,
        )
        n.hw = 0
        n.sync_pending = False
        n.core.start(self.now)
        self._process(n)
        n.tick_at = -1
        self._reschedule(n)

    @staticmethod
    def _load_snapshot(snap: tuple[SnapshotId, bytes] | None) -> list[tuple[int, bytes]]:
        if snap is None:
            return []
        return [(o, bytes.fromhex(v)) for o, v in json.loads(snap[1])]

    def _process(self, n: SimNode) -> None:
        core = n.core
        assert core is not None
        r = core.ready()
        if r.state is not None:
            if r.state.epoch < n.disk.state.epoch:
                raise InvariantError(f"node {n.node_id} epoch went back on disk")
            n.disk.state = r.state  # durable before any message leaves
        for msg in r.messages:
            self._send(msg)
        if r.snapshot is not None:
            sid, data = r.snapshot
            n.disk.snapshot = (sid, data)  # snapshot files are written durably
            n.disk.entries = []
            n.applied = self._load_snapshot(r.snapshot)
        for e in r.committed:
            n.applied.extend(_values(e))
        if r.sync_log and not n.sync_pending:
            n.sync_pending = True
            self._at(self.now + self.rng.randint(0, 3), "sync", (n.node_id, n.incarnation))
        self._check_node(n)

    def _send(self, msg: Message) -> None:
        if (msg.src, msg.dst) in self.blocked or self.rng.random() < self.drop_p:
            return
        copies = 2 if self.rng.random() < self.dup_p else 1
        for _ in range(copies):
            self._at(self.now + self.rng.randint(1, 15), "msg", msg)

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

    def _handle(self, kind: str, payload: Any) -> None:
        if kind == "msg":
            n = self._live(payload.dst)
            if n is not None and (payload.src, payload.dst) not in self.blocked:
                assert n.core is not None
                n.core.step(payload, self.now)
                self._process(n)
                self._reschedule(n)
        elif kind == "tick":
            node_id, incarnation, token = payload
            n = self._live(node_id, incarnation)
            if n is not None and token == n.tick_token:
                assert n.core is not None
                n.tick_at = -1
                n.core.tick(self.now)
                self._process(n)
                self._reschedule(n)
        elif kind == "sync":
            n = self._live(*payload)
            if n is not None:
                assert n.core is not None
                assert n.log is not None
                n.sync_pending = False
                n.disk.entries = list(n.log.entries)
                if n.log.snapshot_id is not None:
                    n.disk.snapshot = (n.log.snapshot_id, n.log.snapshot_data())
                n.core.on_persisted(n.log.end_offset, self.now)
                self._process(n)
                self._reschedule(n)
        elif kind == "propose":
            if payload is None or payload == self.epoch_of_chaos:
                self._propose()
        elif kind == "snapshot":
            self._snapshot(payload)
        elif kind == "crash":
            self._crash(*payload)
        elif kind == "restart":
            n = self.nodes[payload]
            if n.core is None:
                self._boot(n)
        elif kind == "partition":
            self.blocked = payload
        self._check_global()

    def _reschedule(self, n: SimNode) -> None:
        """Keep one pending tick per node, at its core's next deadline."""
        assert n.core is not None
        dl = max(n.core.next_deadline(), self.now + 1)
        if n.tick_at < 0 or dl < n.tick_at:
            n.tick_at = dl
            n.tick_token += 1
            self._at(dl, "tick", (n.node_id, n.incarnation, n.tick_token))

    # -- chaos and workload ---------------------------------------------------------------

    def _schedule_chaos(self, end: int) -> None:
        t = self.now
        self.epoch_of_chaos += 1
        while t < end:
            t += self.rng.randint(5, 40)
            self._at(t, "propose", self.epoch_of_chaos)
        if not self.faults:
            return
        ids = list(self.nodes)
        for _ in range(self.rng.randint(1, 4)):
            t = self.now + self.rng.randint(0, max(end - self.now - 400, 1))
            victim = self.rng.choice(ids)
            self._at(t, "crash", (victim, self.rng.random() < 0.5))
            self._at(t + self.rng.randint(20, 400), "restart", victim)
        for _ in range(self.rng.randint(0, 3)):
            t = self.now + self.rng.randint(0, max(end - self.now - 400, 1))
            group = set(self.rng.sample(ids, self.rng.randint(1, len(ids) - 1)))
            symmetric = self.rng.random() < 0.6
            cut = {(a, b) for a in group for b in ids if b not in group}
            if symmetric:
                cut |= {(b, a) for a, b in cut}
            self._at(t, "partition", cut)
            self._at(t + self.rng.randint(50, 600), "partition", set())
        for _ in range(self.rng.randint(0, 3)):
            self._at(
                self.now + self.rng.randint(0, end - self.now), "snapshot", self.rng.choice(ids)
            )

    def _propose(self) -> None:
        for n in self.nodes.values():
            if n.core is not None and n.core.role is Role.LEADER:
                self.proposals += 1
                n.core.propose([b"v%d" % self.proposals], self.now)
                self._process(n)
                self._reschedule(n)
                return

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
        data = json.dumps([(o, v.hex()) for o, v in n.applied if o < end]).encode()
        n.core.take_snapshot(end, data)

    def _crash(self, node_id: int, lose_unsynced: bool) -> None:
        n = self.nodes[node_id]
        if n.core is None or n.log is None:
            return
        if not lose_unsynced:
            n.disk.entries = list(n.log.entries)
            if n.log.snapshot_id is not None:
                n.disk.snapshot = (n.log.snapshot_id, n.log.snapshot_data())
        n.core = None
        n.log = None

    def heal(self) -> None:
        """End every fault and stop the workload (pending chaos events are dropped)."""
        self.epoch_of_chaos += 1
        self.queue = [ev for ev in self.queue if ev[2] in ("msg", "tick", "sync")]
        heapq.heapify(self.queue)
        self.blocked = set()
        self.drop_p = 0.0
        self.dup_p = 0.0
        for n in self.nodes.values():
            if n.core is None:
                self._boot(n)

    # -- invariants ---------------------------------------------------------------------

    def fail(self, msg: str) -> None:
        raise InvariantError(f"seed {self.seed} at t={self.now}ms: {msg}")

    def _check_node(self, n: SimNode) -> None:
        core = n.core
        assert core is not None
        if core.epoch < n.epoch:
            self.fail(f"node {n.node_id} epoch went back {n.epoch} -> {core.epoch}")
        n.epoch = core.epoch
        if core.role is Role.LEADER:
            prev = self.leaders.setdefault(core.epoch, n.node_id)
            if prev != n.node_id:
                self.fail(f"two leaders in epoch {core.epoch}: {prev} and {n.node_id}")
        if core.high_watermark < n.hw:
            self.fail(f"node {n.node_id} high watermark went back")
        n.hw = core.high_watermark
        if core.role is Role.LEADER and core.high_watermark > self.committed_hw:
            assert n.log is not None
            for e in n.log.read(self.committed_hw, 10**9):
                if e.last_offset < core.high_watermark:
                    old = self.committed.get(e.base_offset)
                    if old is not None and old != e:
                        self.fail(f"committed entry at {e.base_offset} changed")
                    self.committed[e.base_offset] = e
            self.committed_hw = core.high_watermark

    def _check_global(self) -> None:
        # Every committed entry is durable, unchanged, on a majority of voters.
        voters = [self.nodes[v] for v in self.voter_ids]
        need = len(voters) // 2 + 1
        for base, e in list(self.committed.items())[-3:]:
            have = 0
            for n in voters:
                snap = n.disk.snapshot
                in_snapshot = snap is not None and snap[0].end_offset > e.last_offset
                if in_snapshot or _has(n.disk.entries, e):
                    have += 1
            if have < need:
                self.fail(f"committed entry {base} is durable on {have} voters only")
        # Leader completeness: a leader of an epoch >= an entry's holds it once committed.
        for n in self.nodes.values():
            if n.core is not None and n.core.role is Role.LEADER and n.log is not None:
                for base, e in list(self.committed.items())[-3:]:
                    if base < n.log.start_offset or n.core.epoch < e.epoch:
                        continue
                    got = n.log.read(base, 1)
                    if not got or got[0] != e:
                        self.fail(f"leader {n.node_id} lacks committed entry {base}")
        # Applied state machines agree on their common prefix.
        seqs = [n.applied for n in self.nodes.values() if n.core is not None]
        if len(seqs) > 1:
            shortest = min(len(s) for s in seqs)
            k = max(shortest - 5, 0)
            for s in seqs[1:]:
                if s[k:shortest] != seqs[0][k:shortest]:
                    self.fail("applied state machines disagree")

    def check_full_agreement(self) -> None:
        seqs = [n.applied for n in self.nodes.values()]
        shortest = min(len(s) for s in seqs)
        for s in seqs[1:]:
            if s[:shortest] != seqs[0][:shortest]:
                self.fail("applied state machines disagree on a common prefix")
        values = [v for _, v in seqs[0]]
        if len(values) != len(set(values)):
            self.fail("a proposal was applied twice")

    def leader(self) -> SimNode | None:
        for n in self.nodes.values():
            if n.core is not None and n.core.role is Role.LEADER:
                return n
        return None
