"""A hand-driven network of RaftCores for scenario tests (etcd's raft_paper_test.go
style): nothing happens unless the test says so. Messages wait in an outbox until the
test delivers, drops or holds them; time moves only by ``advance``; a node's election
state is persisted as its Ready says, and its log is synced at once unless the test
asks otherwise. ``restart`` rebuilds a node from what it persisted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from keeperless.raft import messages as m
from keeperless.raft.core import RaftConfig, RaftCore, Role
from keeperless.raft.log import MemoryLog
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.raft.state import ElectionState
from tests.sim.checker import entry_values

CONFIG = RaftConfig(
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=100,
    request_timeout_ms=150,
    fetch_max_wait_ms=0,  # no long polls: a fetch is answered at once
    max_fetch_entries=16,
    snapshot_chunk_bytes=1 << 20,
)

Match = Callable[[m.Message], bool]


@dataclass
class Node:
    core: RaftCore
    state: ElectionState  # as persisted
    synced: list[Entry] = field(default_factory=list)
    snapshot: tuple[SnapshotId, bytes] | None = None
    applied: list[tuple[int, bytes]] = field(default_factory=list)
    auto_sync: bool = True


class Net:
    def __init__(
        self,
        voters: int = 3,
        observers: int = 0,
        config: RaftConfig = CONFIG,
        seed: int = 0,
    ) -> None:
        self.voter_ids = tuple(range(1, voters + 1))
        self.config = config
        self.now = 0
        self.rng = random.Random(seed)
        self.outbox: list[m.Message] = []
        self.down: set[int] = set()
        self.nodes: dict[int, Node] = {}
        for i in range(1, voters + observers + 1):
            state = ElectionState(voters=self.voter_ids)
            self.nodes[i] = Node(self._core(i, state, MemoryLog()), state)
        for i in self.nodes:
            self.nodes[i].core.start(self.now)
            self._process(i)

    def _core(self, i: int, state: ElectionState, log: MemoryLog) -> RaftCore:
        return RaftCore(
            i, self.voter_ids, log, state, self.config, random.Random(self.rng.random()), self.now
        )

    def core(self, i: int) -> RaftCore:
        return self.nodes[i].core

    # -- readies --------------------------------------------------------------------------

    def _process(self, i: int) -> None:
        n = self.nodes[i]
        r = n.core.ready()
        if r.state is not None:
            n.state = r.state
        self.outbox.extend(r.messages)
        if r.snapshot is not None:
            n.snapshot = r.snapshot
            n.synced = []
            n.applied = [(o, bytes.fromhex(v)) for o, v in json.loads(r.snapshot[1])]
        for e in r.committed:
            n.applied.extend(entry_values(e))
        if r.sync_log and n.auto_sync:
            self.sync(i)

    def sync(self, i: int) -> None:
        n = self.nodes[i]
        log = n.core.log
        assert isinstance(log, MemoryLog)
        n.synced = list(log.entries)
        if log.snapshot_id is not None:
            n.snapshot = (log.snapshot_id, log.snapshot_data())
        n.core.on_persisted(log.end_offset, self.now)
        self._process(i)

    # -- time and faults ----------------------------------------------------------------

    def advance(self, ms: int, nodes: Iterable[int] | None = None) -> None:
        """Move time on by ``ms`` and tick the given nodes (every live one by default)."""
        self.now += ms
        for i in nodes if nodes is not None else list(self.nodes):
            if i not in self.down:
                self.core(i).tick(self.now)
                self._process(i)

    def timeout(self, i: int) -> None:
        """Let node ``i``'s own timer expire (only its timer)."""
        self.now = max(self.now, self.core(i).next_deadline())
        self.core(i).tick(self.now)
        self._process(i)

    def crash(self, i: int) -> None:
        self.down.add(i)
        self.outbox = [msg for msg in self.outbox if msg.src != i]

    def restart(self, i: int) -> None:
        """Rebuild node ``i`` from what it persisted (unsynced log entries are lost)."""
        n = self.nodes[i]
        log = MemoryLog()
        if n.snapshot is not None:
            log.install_snapshot(*n.snapshot)
        log.append([e for e in n.synced if e.base_offset >= log.end_offset])
        n.core = self._core(i, n.state, log)
        n.applied = []
        if n.snapshot is not None:
            n.applied = [(o, bytes.fromhex(v)) for o, v in json.loads(n.snapshot[1])]
        self.down.discard(i)
        n.core.start(self.now)
        self._process(i)

    # -- messages -----------------------------------------------------------------------

    def take(self, match: Match) -> list[m.Message]:
        """Remove the matching messages from the outbox and return them (held)."""
        taken = [msg for msg in self.outbox if match(msg)]
        self.outbox = [msg for msg in self.outbox if not match(msg)]
        return taken

    def deliver(self, msg: m.Message) -> None:
        if msg.dst in self.down:
            return
        self.core(msg.dst).step(msg, self.now)
        self._process(msg.dst)

    def wave(self, match: Match = lambda _: True) -> int:
        """Deliver the matching messages now in the outbox (what they cause waits for
        the next wave). Returns how many were delivered."""
        batch = self.take(match)
        for msg in batch:
            self.deliver(msg)
        return len(batch)

    def deliver_until(self, done: Callable[[], bool], match: Match, waves: int = 50) -> None:
        for _ in range(waves):
            if done():
                return
            self.wave(match)
            self.advance(1)  # time moves on: timeouts fire as they would
        assert done(), "the scenario did not reach its state"

    def drop(self, match: Match = lambda _: True) -> None:
        self.take(match)

    def among(self, group: Iterable[int]) -> Match:
        g = set(group)
        return lambda msg: msg.src in g and msg.dst in g

    # -- helpers ------------------------------------------------------------------------

    def elect(self, i: int, voters: Iterable[int]) -> None:
        """Node ``i`` times out and campaigns; only ``voters`` hear it. Asserts it wins;
        what it sends to others is dropped."""
        group = {i, *voters}
        self.timeout(i)
        self.deliver_until(lambda: self.core(i).role is Role.LEADER, self.among(group))
        self.drop(lambda msg: msg.src == i and msg.dst not in group)

    def propose(self, i: int, value: bytes) -> int:
        last = self.core(i).propose([value], self.now)
        self._process(i)
        return last

    def replicate(self, leader: int, to: Iterable[int]) -> None:
        """Followers ``to`` fetch from ``leader`` (and nobody else hears anything) until
        logs and high watermarks stop changing."""
        group = sorted({leader, *to})

        def signature() -> list[tuple[int, int]]:
            return [(self.core(i).log_end_offset, self.core(i).high_watermark) for i in group]

        steady, last = 0, signature()
        for _ in range(100):
            if not self.wave(self.among(group)):
                self.advance(1, group)
            now = signature()
            steady = steady + 1 if now == last else 0
            last = now
            if steady >= 4:
                return
        raise AssertionError("replication did not settle")

    def log_of(self, i: int) -> list[tuple[int, int]]:
        """(offset, epoch) of every entry in node ``i``'s log."""
        return [(e.base_offset, e.epoch) for e in self.core(i).log.read(0, 10**6)]
