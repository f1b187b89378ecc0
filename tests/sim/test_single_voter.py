"""Seeded simulation of the one-voter metadata quorum: the Raft core, the controller and
the metadata image, on a simulated disk that loses unsynced writes at crashes.

Invariants after every step: the epoch only grows; the high watermark never decreases
within an incarnation; every committed entry survives every crash unchanged; an image
rebuilt from the durable log equals the controller's image of what committed.
A failure names its seed; run one with  pytest tests/sim -k 'seed_17'.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from uuid import UUID

import pytest

from keeperless.controller.quorum_controller import NewTopic, QuorumController
from keeperless.metadata.codec import encode_record
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.raft.core import Entry, RaftCore
from keeperless.raft.state import ElectionState
from keeperless.runtime.metadata_log import decode_entry

SEEDS = range(300)


@dataclass
class Disk:
    state: ElectionState = field(default_factory=lambda: ElectionState(voters=(1,)))
    durable: list[Entry] = field(default_factory=list)
    unsynced: list[Entry] = field(default_factory=list)

    def crash(self, rng: random.Random) -> None:
        # A crash keeps a random prefix of what was written but not synced.
        keep = rng.randint(0, len(self.unsynced))
        self.durable.extend(self.unsynced[:keep])
        self.unsynced = []


def rebuild(entries: list[Entry]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage())
    for e in entries:
        if not e.control:
            for rec in decode_entry(e.data):
                delta.replay(rec)
    return delta.apply()


class Sim:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.disk = Disk()
        self.committed: list[Entry] = []
        self.now = 0
        self.boot()

    def boot(self) -> None:
        d = self.disk
        end = d.durable[-1].last_offset + 1 if d.durable else 0
        self.core = RaftCore(1, (1,), d.state, end, d.durable[-1].epoch if d.durable else 0)
        self.core.high_watermark = end
        self.controller = QuorumController(
            1,
            random.Random(self.rng.random()),
            {"num.partitions": 2, "default.replication.factor": 1},
        )
        self.controller.replay(
            [r for e in d.durable if not e.control for r in decode_entry(e.data)], end - 1
        )
        self.last_epoch = d.state.epoch
        self.hw = end
        self.core.start(self.now)
        self.drain(sync=True)
        assert self.core.epoch > self.last_epoch or self.last_epoch == 0

    def drain(self, sync: bool) -> None:
        ready = self.core.ready()
        if ready.state is not None:
            self.disk.state = ready.state  # written and fsynced before anything else
        self.disk.unsynced.extend(ready.entries)
        if sync and self.disk.unsynced:
            self.disk.durable.extend(self.disk.unsynced)
            self.disk.unsynced = []
            self.core.on_persisted(self.disk.durable[-1].last_offset + 1)
            ready = self.core.ready()
        self.committed.extend(ready.committed)

    def step(self) -> None:
        self.now += self.rng.randint(1, 50)
        roll = self.rng.random()
        if roll < 0.08:
            self.disk.crash(self.rng)
            self.boot()
            return
        c = self.controller
        if roll < 0.2 or not c.image.brokers:
            res = c.register_broker(
                self.rng.randint(1, 3),
                UUID(int=self.rng.getrandbits(128)),
                [("PLAINTEXT", "h", 1)],
                None,
                self.core.log_end_offset,
                self.now,
            )
            records = list(res.records)
            if records:
                last = self.core.propose([encode_record(r) for r in records], self.now)
                c.replay(records, last)
                b = records[0]
                hb = c.broker_heartbeat(b.broker_id, b.broker_epoch, False, True, self.now)
                records = list(hb.records)
        elif roll < 0.7:
            res2 = c.create_topics([NewTopic(f"t{self.rng.randint(0, 20)}")], False)
            records = list(res2.records)
        else:
            names = list(c.image.topic_ids)
            res3 = c.delete_topics([self.rng.choice(names)] if names else ["none"], [])
            records = list(res3.records)
        if records:
            last = self.core.propose([encode_record(r) for r in records], self.now)
            c.replay(records, last)
        self.drain(sync=self.rng.random() < 0.7)
        assert self.core.high_watermark >= self.hw, "high watermark went back"
        self.hw = self.core.high_watermark

    def check(self) -> None:
        durable = {e.base_offset: e for e in self.disk.durable}
        for e in self.committed:
            assert durable.get(e.base_offset) == e, f"committed entry {e.base_offset} lost"
        offsets = [e.base_offset for e in self.disk.durable]
        assert offsets == sorted(set(offsets)), "durable log offsets must be contiguous"
        committed_end = self.core.high_watermark
        image = rebuild([e for e in self.disk.durable if e.last_offset < committed_end])
        if not self.core._unpersisted and not self.core._uncommitted:
            assert image.topic_ids == self.controller.image.topic_ids
            assert image.brokers == self.controller.image.brokers


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed_{s}" for s in SEEDS])
def test_single_voter_quorum(seed: int) -> None:
    sim = Sim(seed)
    for _ in range(60):
        sim.step()
        sim.check()
    sim.drain(sync=True)
    sim.check()
