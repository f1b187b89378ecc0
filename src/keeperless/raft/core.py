"""The KRaft consensus core, sans-I/O, in the shape of etcd's RawNode.

The driver calls ``start``/``propose``/``tick`` and then ``ready()``, which hands back
what must be made durable (election state, then log entries), messages to send, and
entries that became committed. After persisting, the driver reports the durable log end
with ``on_persisted``. This slice runs a single voter, which elects itself; the
multi-voter protocol (Vote, BeginQuorumEpoch, Fetch) plugs into the same interface.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from keeperless.protocol.control import control_batch, leader_change
from keeperless.protocol.records import build_batch
from keeperless.raft.state import ElectionState

__all__ = ["Entry", "NotLeaderError", "RaftCore", "Ready"]

log = logging.getLogger(__name__)


class NotLeaderError(RuntimeError):
    """Proposals go to the leader; this node is not it (or has no quorum)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A record batch of the metadata log, with its offsets assigned."""

    base_offset: int
    last_offset: int
    epoch: int
    data: bytes
    control: bool = False


@dataclass(slots=True)
class Ready:
    state: ElectionState | None = None  # persist (fsync) first
    entries: list[Entry] = field(default_factory=list)  # then append and fsync
    committed: list[Entry] = field(default_factory=list)  # then apply, in order
    high_watermark: int | None = None

    def empty(self) -> bool:
        return self.state is None and not self.entries and not self.committed


class RaftCore:
    def __init__(
        self,
        node_id: int,
        voters: tuple[int, ...],
        state: ElectionState,
        log_end_offset: int,
        last_epoch: int,
    ) -> None:
        self.node_id = node_id
        self.voters = voters
        self.state = state
        self.log_end_offset = log_end_offset  # next offset to assign
        self.durable_end_offset = log_end_offset
        self.high_watermark = 0
        self.last_epoch = last_epoch
        self._ready = Ready()
        self._unpersisted: list[Entry] = []
        self._uncommitted: list[Entry] = []

    # -- role ---------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.state.leader_id == self.node_id

    @property
    def epoch(self) -> int:
        return self.state.epoch

    def start(self, now_ms: int) -> None:
        """Begin participating. A sole voter becomes leader of a new epoch at once."""
        if self.voters == (self.node_id,):
            self._transition(
                ElectionState(self.state.epoch + 1, self.node_id, self.node_id, self.voters),
                "Leader",
            )
            batch = control_batch(
                leader_change(self.node_id, list(self.voters), [self.node_id]),
                timestamp_ms=now_ms,
            )
            self._append(batch, 1, now_ms, control=True)
        elif self.node_id not in self.voters:
            log.info("[node %d] Observer of the metadata quorum", self.node_id)

    def _transition(self, new: ElectionState, name: str) -> None:
        old = self.state
        self.state = new
        self._ready.state = new
        log.info(
            "[node %d] Completed transition to %s(epoch=%d, leader=%d) from epoch %d",
            self.node_id,
            name,
            new.epoch,
            new.leader_id,
            old.epoch,
        )

    # -- proposals ------------------------------------------------------------------------

    def propose(self, records: list[bytes], now_ms: int) -> int:
        """Append metadata records as one batch; returns the last offset assigned."""
        if not self.is_leader:
            raise NotLeaderError(f"node {self.node_id} is not the leader")
        batch = build_batch([(None, r, ()) for r in records], timestamp_ms=now_ms)
        return self._append(batch, len(records), now_ms)

    def _append(self, batch: bytes, count: int, now_ms: int, control: bool = False) -> int:
        base = self.log_end_offset
        data = bytearray(batch)
        # offsets and leader epoch are outside the CRC: patch in place
        data[0:8] = base.to_bytes(8, "big", signed=True)
        data[12:16] = self.state.epoch.to_bytes(4, "big", signed=True)
        entry = Entry(base, base + count - 1, self.state.epoch, bytes(data), control)
        self.log_end_offset = entry.last_offset + 1
        self.last_epoch = self.state.epoch
        self._unpersisted.append(entry)
        self._ready.entries.append(entry)
        return entry.last_offset

    # -- driver interface -------------------------------------------------------------

    def ready(self) -> Ready:
        out = self._ready
        self._ready = Ready()
        return out

    def on_persisted(self, durable_end_offset: int) -> None:
        """The log is durable up to (excluding) ``durable_end_offset``."""
        self.durable_end_offset = durable_end_offset
        while self._unpersisted and self._unpersisted[0].last_offset < durable_end_offset:
            self._uncommitted.append(self._unpersisted.pop(0))
        if self.is_leader and len(self.voters) == 1:
            self._advance_high_watermark(durable_end_offset)

    def _advance_high_watermark(self, hw: int) -> None:
        if hw <= self.high_watermark:
            return
        self.high_watermark = hw
        self._ready.high_watermark = hw
        while self._uncommitted and self._uncommitted[0].last_offset < hw:
            self._ready.committed.append(self._uncommitted.pop(0))
