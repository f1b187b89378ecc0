"""Drives the sans-I/O Raft core: persists election state and log entries (fsync),
reports durability, and delivers committed metadata records to listeners."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from keeperless.metadata.bootstrap import BOOTSTRAP_CHECKPOINT
from keeperless.metadata.codec import decode_record, encode_record
from keeperless.protocol.records import decode_records, iter_batches
from keeperless.raft.core import Entry, RaftCore
from keeperless.raft.state import ElectionState
from keeperless.storage.log import LogConfig, PartitionLog

__all__ = ["MetadataLog"]

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
Listener = Callable[[list[Any], int], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def decode_entry(data: bytes) -> list[Any]:
    """The metadata records of a data batch (control batches have none)."""
    out = []
    for pos, h in iter_batches(data, verify_crc=False):
        if h.is_control:
            continue
        for rec in decode_records(memoryview(data)[pos : pos + h.size]):
            if rec.value is not None:
                out.append(decode_record(rec.value)[0])
    return out


class MetadataLog:
    def __init__(self, node_id: int, voters: tuple[int, ...], directory: Path) -> None:
        self.node_id = node_id
        self.dir = directory
        self.log_dir = directory / f"{METADATA_TOPIC}-0"
        self.plog = PartitionLog(self.log_dir, LogConfig(segment_bytes=8 * 1024 * 1024), _now_ms())
        self.state_path = self.log_dir / "quorum-state"
        state = ElectionState(voters=voters)
        if self.state_path.exists():
            state = ElectionState.decode(self.state_path.read_bytes())
        last_epoch = self._last_epoch()
        self.core = RaftCore(node_id, voters, state, self.plog.log_end_offset, last_epoch)
        self.core.high_watermark = self.plog.log_end_offset  # single voter: all durable
        self.listeners: list[Listener] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def _last_epoch(self) -> int:
        end = self.plog.log_end_offset
        if end == 0:
            return 0
        last = -1
        for _, h in self._batches():
            last = h.partition_leader_epoch
        return last

    def _batches(self) -> Any:
        off = self.plog.log_start_offset
        while True:
            sl = self.plog.read(off, 1 << 20)
            if sl is None:
                return
            data = sl.read()
            for pos, h in iter_batches(data):
                yield data[pos : pos + h.size], h
                off = h.last_offset + 1

    def replay_existing(self) -> int:
        """Deliver every record already in the log to the listeners; returns the count."""
        n = 0
        for data, h in self._batches():
            recs = decode_entry(data)
            if recs:
                n += len(recs)
                for fn in self.listeners:
                    fn(recs, h.last_offset)
        return n

    def bootstrap_records(self) -> list[Any]:
        path = self.dir / BOOTSTRAP_CHECKPOINT
        if not path.exists():
            return []
        return decode_entry(path.read_bytes())

    def start(self) -> None:
        self.core.start(_now_ms())
        self._process()

    @property
    def committed_offset(self) -> int:
        return self.core.high_watermark - 1

    def propose(self, records: list[Any]) -> int:
        last = self.core.propose([encode_record(r) for r in records], _now_ms())
        self._process()
        return last

    async def wait_committed(self, offset: int) -> None:
        if self.core.high_watermark > offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        await fut

    def _process(self) -> None:
        ready = self.core.ready()
        if ready.state is not None:
            tmp = self.state_path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(ready.state.encode())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.state_path)
        if ready.entries:
            for e in ready.entries:
                self.plog.append(e.data, list(iter_batches(e.data)), _now_ms())
            self.plog.flush()
            self.core.on_persisted(self.plog.log_end_offset)
            ready = self._merge(ready)
        self._deliver(ready.committed)

    def _merge(self, first: Any) -> Any:
        more = self.core.ready()
        first.committed.extend(more.committed)
        return first

    def _deliver(self, committed: list[Entry]) -> None:
        for e in committed:
            if not e.control:
                recs = decode_entry(e.data)
                for fn in self.listeners:
                    fn(recs, e.last_offset)
        hw = self.core.high_watermark
        keep = []
        for off, fut in self._waiters:
            if off < hw:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((off, fut))
        self._waiters = keep

    def close(self) -> None:
        self.plog.close()
