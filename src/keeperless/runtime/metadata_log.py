"""Drives the sans-I/O Raft core on the asyncio loop: persists the election state and
the log (fsync), sends its messages, schedules its timers, and delivers committed
metadata records (and snapshots) to the listeners — the controller and the broker."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import os
import pickle
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from keeperless.metadata.codec import decode_record, encode_record
from keeperless.metadata.features import record_version
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import SnapshotWriter
from keeperless.protocol.records import CorruptBatchError, iter_batches, record_values
from keeperless.raft.core import MembershipError, NotLeaderError, RaftConfig, RaftCore
from keeperless.raft.messages import (
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    Entry,
    Message,
    SnapshotId,
)
from keeperless.raft.state import ElectionState
from keeperless.raft.voters import Endpoint, VoterSet
from keeperless.runtime.forked import run_forked
from keeperless.runtime.raft_log import FileRaftLog, snapshot_file_name
from keeperless.storage.durable import write_atomically

__all__ = ["METADATA_TOPIC", "MetadataLog", "decode_entry", "image_of_snapshot", "iter_entry"]

log = logging.getLogger(__name__)
_DRAIN_SLICE_S = 0.05
# the snapshot child's niceness: background work, as Kafka's snapshot thread is; on a busy
# machine the nodes go first (weight 15 against 1024), and it uses what they leave
SNAPSHOT_NICE = 19

METADATA_TOPIC = "__cluster_metadata"
Listener = Callable[[Sequence[Any], int], None]
# (the delta from an empty image that the snapshot is, the image it built, its id)
SnapshotListener = Callable[[MetadataDelta, MetadataImage, SnapshotId], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def iter_entry(data: bytes) -> Iterator[Any]:
    """The metadata records of the data batches in ``data`` (control batches have none)."""
    view = memoryview(data)
    for pos, h in iter_batches(data, verify_crc=True):
        if h.is_control:
            continue
        for value in record_values(view[pos : pos + h.size]):
            if value is not None:
                yield decode_record(value)[0]


def decode_entry(data: bytes) -> list[Any]:
    return list(iter_entry(data))


class _Decoded(Sequence[Any]):
    """A committed entry's records, decoded when first read. The active controller
    commits the image it built as it appended them and never reads them back: decoding
    its own million records of a controlled shutdown was a sixth of its CPU."""

    __slots__ = ("_data", "_records")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._records: list[Any] | None = None

    def _get(self) -> list[Any]:
        if self._records is None:
            self._records = decode_entry(self._data)
        return self._records

    def __getitem__(self, i: Any) -> Any:
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._get())


def image_of_snapshot(data: bytes, sid: SnapshotId) -> tuple[MetadataDelta, MetadataImage]:
    """Replay a snapshot's records as they are decoded (never all in memory at once)."""
    delta = MetadataDelta(MetadataImage())
    # a million new long-lived objects would otherwise trigger full collections on the way
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for rec in iter_entry(data):
            delta.replay(rec)
    finally:
        if was_enabled:
            gc.enable()
    delta.offset = sid.end_offset - 1
    return delta, delta.apply()


class MetadataLog:
    def __init__(
        self,
        node_id: int,
        voters: tuple[int, ...] | VoterSet,
        directory: Path,
        config: RaftConfig | None = None,
        send: Callable[[Message], None] | None = None,
        segment_bytes: int = 8 * 1024 * 1024,
        snapshot_every_bytes: int = 20 * 1024 * 1024,
        snapshot_every_ms: int = 3_600_000,
        append_linger_ms: int = 0,
        *,
        directory_id: uuid.UUID | None = None,
        kraft_version: int = 0,
        bootstrap: tuple[int, ...] = (),
        endpoints: tuple[Endpoint, ...] = (),
    ) -> None:
        """``voters``: controller.quorum.voters (a static quorum), or for a dynamic one
        (kraft.version 1) the voter set of the bootstrap checkpoint, which the log
        overrides; ``bootstrap``: the ids the transport gave the bootstrap servers."""
        self.node_id = node_id
        self.dir = directory
        self.log_dir = directory / f"{METADATA_TOPIC}-0"
        self.raft_log = FileRaftLog(self.log_dir, segment_bytes)
        # KIP-630: snapshot the applied image every so many bytes or milliseconds
        self.snapshot_source: Callable[[], MetadataImage] | None = None
        self.snapshot_every_bytes = snapshot_every_bytes
        self.snapshot_every_ms = snapshot_every_ms
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = _now_ms()
        self.state_path = self.log_dir / "quorum-state"
        state = ElectionState(voters=voters if isinstance(voters, tuple) else voters.ids)
        if self.state_path.exists():
            try:
                state = ElectionState.decode(self.state_path.read_bytes())
            except ValueError as e:
                raise ValueError(
                    f"{self.state_path}: {e}. It holds this node's vote and epoch; starting "
                    "without it could vote twice in one epoch. Restore it from a backup, or "
                    "wipe this controller's metadata log directory and let it rejoin"
                ) from None
        self.core = RaftCore(
            node_id,
            voters,
            self.raft_log,
            state,
            config or RaftConfig(),
            random.Random(),
            _now_ms(),
            directory_id=directory_id,
            kraft_version=kraft_version,
            bootstrap=bootstrap,
            endpoints=endpoints,
        )
        self.send = send
        self.listeners: list[Listener] = []
        self.snapshot_listeners: list[SnapshotListener] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        # committed entries not yet applied to the listeners (see _drain)
        self._backlog: collections.deque[Entry] = collections.deque()
        self._drain_scheduled = False
        self._delivered = -1  # the last offset applied to the listeners
        self._snapshotting = False
        self._closed = False
        self._snapshot_task: asyncio.Task[None] | None = None
        self._snapshot_child: int | None = None  # the pid encoding one
        self._snapshot_writer = SnapshotWriter()  # keeps unchanged topics' encoded batches
        self._timer: asyncio.TimerHandle | None = None
        self.leadership_listeners: list[Callable[[bool], None]] = []
        self._flushing = False
        self._flush_again = False
        self._linger: asyncio.TimerHandle | None = None
        self.append_linger_ms = append_linger_ms
        self.metrics: Any = None  # runtime.metrics.Metrics when enabled
        # Kafka's MetadataErrorCount / snapshot errors (an apply error stops the node)
        self.metadata_errors = 0
        self.snapshot_errors = 0
        self._pending_commits: list[tuple[int, float]] = []
        self._election_started: float | None = None
        self._was_leader = False

    def bootstrap_records(self) -> list[Any]:
        from keeperless.metadata.bootstrap import BOOTSTRAP_CHECKPOINT

        path = self.dir / BOOTSTRAP_CHECKPOINT
        return decode_entry(path.read_bytes()) if path.exists() else []

    def start(self) -> None:
        """Join the quorum. A restarted node first loads its snapshot, then the listeners
        get the committed log as the high watermark becomes known."""
        sid = self.raft_log.snapshot_id
        if sid is not None and sid.end_offset > 0:  # (0-0: the bootstrap voter set only)
            self._load_snapshot(self.raft_log.snapshot_data(), sid)
            self._delivered = sid.end_offset - 1
        self.core.start(_now_ms())
        self._process()

    def _load_snapshot(self, data: bytes, sid: SnapshotId) -> None:
        if not self.snapshot_listeners:
            return
        t0 = time.monotonic()
        try:
            delta, image = image_of_snapshot(data, sid)
        except CorruptBatchError as e:
            raise ValueError(
                f"{self.log_dir / snapshot_file_name(sid)} is damaged: {e}. It holds the "
                "metadata up to its offset and is not used damaged. Restore it from a "
                "backup; a broker that is not a controller may instead start with its "
                f"{self.log_dir.name} directory moved aside, and fetches the metadata again"
            ) from None
        for fn in self.snapshot_listeners:
            fn(delta, image, sid)
        log.info(
            "[node %d] Loaded metadata snapshot %020d-%010d (%d bytes, %d topics) in %.0f ms",
            self.node_id,
            sid.end_offset,
            sid.epoch,
            len(data),
            len(image.topics),
            (time.monotonic() - t0) * 1000,
        )

    @property
    def caught_up(self) -> bool:
        """Everything committed when asked has been applied (what authorization waits
        for: the ACLs of the log are known)."""
        hw = self.core.high_watermark
        return hw > 0 and self._delivered >= hw - 1

    @property
    def committed_offset(self) -> int:
        return self.core.high_watermark - 1

    def propose(self, records: list[Any], metadata_version: int | None = None) -> int:
        """Append ``records`` (written at the versions ``metadata_version`` allows)."""
        encoded = [encode_record(r, record_version(r, metadata_version)) for r in records]
        last = self.core.propose(encoded, _now_ms())
        if self.metrics is not None:
            self.metrics.append_records.inc(len(records))
            self._pending_commits.append((last, time.perf_counter()))
        self._process()
        return last

    async def wait_committed(self, offset: int) -> None:
        if self.core.high_watermark > offset and self._delivered >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        await fut

    async def change_voters(self, change: Callable[[RaftCore, int], int], timeout_s: float) -> None:
        """Make a voter change at the leader (``change`` calls the core's add_voter,
        remove_voter or update_voter) and wait until it is committed. Raises
        MembershipError as Kafka answers (NOT_LEADER_OR_FOLLOWER if leadership is lost
        before the change commits, REQUEST_TIMED_OUT if it does not commit in time)."""
        offset = change(self.core, _now_ms())
        self._process()
        try:
            await asyncio.wait_for(self.wait_committed(offset), timeout_s)
        except NotLeaderError:
            if self.core.high_watermark <= offset:  # (a leader removing itself resigns
                raise MembershipError(  # once its removal is committed: that is success)
                    NOT_LEADER_OR_FOLLOWER,
                    f"node {self.node_id} lost the leadership before the voter change at "
                    f"offset {offset} was committed; it may still be",
                ) from None
        except TimeoutError:
            raise MembershipError(
                REQUEST_TIMED_OUT,
                f"the voter change at offset {offset} was not committed within "
                f"{timeout_s * 1000:.0f} ms; it may still be",
            ) from None

    def step(self, msg: Message) -> None:
        if self._closed:
            # a response to a request sent before the node stopped: the log is closed
            # (it stepped the core into an IndexError - fault harness, seed 101)
            return
        self.core.step(msg, _now_ms())
        self._process()

    def _tick(self) -> None:
        self._timer = None
        self.core.tick(_now_ms())
        self._process()

    def _process(self) -> None:
        while True:
            ready = self.core.ready()
            if ready.empty():
                break
            if ready.state is not None:
                self._write_state(ready.state)
            if ready.sync_log:
                self._request_flush()
            if ready.messages:
                if self.send is None:
                    raise RuntimeError("the Raft core sent messages but there is no transport")
                for msg in ready.messages:
                    self.send(msg)
            if ready.snapshot is not None:
                sid, data = ready.snapshot
                while self._backlog and self._backlog[0].last_offset < sid.end_offset:
                    self._backlog.popleft()  # the snapshot covers them
                self._load_snapshot(data, sid)
                self._delivered = max(self._delivered, sid.end_offset - 1)
            self._deliver(ready.committed)
        self._maybe_snapshot()
        if self.core.is_leader != self._was_leader:
            self._was_leader = self.core.is_leader
            if not self._was_leader:
                self._fail_waiters()
            for lfn in self.leadership_listeners:
                lfn(self._was_leader)
        self._schedule()

    def _request_flush(self) -> None:
        """Group commit: fsync in a thread; appends made meanwhile ride the next fsync."""
        if self._linger is not None:
            return  # the scheduled flush will cover this append too
        if self._flushing:
            self._flush_again = True
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (tools, tests): flush here and now
            self.raft_log.flush()
            self.core.on_persisted(self.raft_log.end_offset, _now_ms())
            return
        if self.append_linger_ms > 0 and self.core.is_leader:
            # controller.quorum.append.linger.ms: let the leader's writes accumulate
            self._linger = loop.call_later(self.append_linger_ms / 1000, self._linger_done)
            return
        self._start_flush(loop)

    def _linger_done(self) -> None:
        self._linger = None
        self._start_flush(asyncio.get_running_loop())

    def _start_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flushing = True
        end, truncations = self.raft_log.end_offset, self.raft_log.truncations
        fut = loop.run_in_executor(None, self.raft_log.flush)
        fut.add_done_callback(lambda f: self._flushed(end, truncations, f))

    def _flushed(self, end: int, truncations: int, fut: asyncio.Future[None]) -> None:
        self._flushing = False
        if self._closed:
            # the node stopped while this fsync ran: its files were left open for it
            self.raft_log.close()
            return
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            # as Kafka does: a log that cannot be made durable must not keep serving
            log.critical(
                "[node %d] fsync of the metadata log failed: %s; halting", self.node_id, exc
            )
            os._exit(1)
        if truncations == self.raft_log.truncations:
            self.core.on_persisted(end, _now_ms())
        else:
            self._flush_again = True  # the log was cut meanwhile: what we synced moved
        if self._flush_again:
            self._flush_again = False
            self._request_flush()
        self._process()

    def _fail_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(
                    NotLeaderError(
                        f"node {self.node_id} lost the leadership before the records committed"
                    )
                )

    def _write_state(self, state: ElectionState) -> None:
        # durable, name and all, before any message that depends on it is sent
        write_atomically(self.state_path, state.encode())

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        delay = max(self.core.next_deadline() - _now_ms(), 0) / 1000
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(delay, self._tick)

    def _maybe_snapshot(self) -> None:
        if self.snapshot_source is None or self._bytes_since_snapshot == 0 or self._backlog:
            return  # the image must be as of what was applied
        if self._snapshotting:
            return
        now = _now_ms()
        if self._bytes_since_snapshot < self.snapshot_every_bytes and (
            now - self._last_snapshot_ms < self.snapshot_every_ms
        ):
            return
        end = min(self.core.applied, self._delivered + 1)
        if end <= self.raft_log.start_offset:
            return
        try:
            sid = self.core.snapshot_id(end)
        except ValueError:
            return  # not at a batch boundary yet
        image = self.snapshot_source()
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        t0 = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # tools and tests without a loop
            data = self._snapshot_writer.write(image, now, self.core.snapshot_voters_records(end))
            self._finish_snapshot(end, data, t0)
            return
        # Encoding a big image takes seconds of CPU: a forked child does it below this
        # node's priority (runtime/forked.py), so that answering the quorum goes first
        self._snapshotting = True
        self._snapshot_task = loop.create_task(self._write_snapshot(image, now, sid, end, t0))

    async def _write_snapshot(
        self, image: MetadataImage, now: int, sid: SnapshotId, end: int, t0: float
    ) -> None:
        try:
            voters = self.core.snapshot_voters_records(end)
            writer = self._snapshot_writer

            def encode() -> list[bytes]:  # (in the child)
                return [writer.write(image, now, voters), pickle.dumps(writer.spans)]

            data, spans = await run_forked(
                encode, nice=SNAPSHOT_NICE, started=self._snapshot_child_started
            )
            # the next child reuses the batches of the topics that did not change
            writer.adopt(image, data, pickle.loads(spans))
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self.raft_log.stage_snapshot, sid, data)
        except Exception as e:  # an operator reads this; the next snapshot retries
            if not self._closed:
                self.snapshot_errors += 1
                log.warning("[node %d] Snapshot at %d failed: %s", self.node_id, end, e)
            return
        finally:
            self._snapshotting = False
            self._snapshot_child = None
        if not self._closed:  # (stopping meanwhile: it is not needed)
            self._finish_snapshot(end, data, t0)

    def _snapshot_child_started(self, pid: int) -> None:
        self._snapshot_child = pid
        if self._closed:  # (closed while it forked)
            self._kill_snapshot_child()

    def _kill_snapshot_child(self) -> None:
        if self._snapshot_child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._snapshot_child, signal.SIGKILL)

    def _finish_snapshot(self, end: int, data: bytes, t0: float) -> None:
        try:
            sid = self.core.take_snapshot(end, data)
        except ValueError as e:
            log.warning("[node %d] Snapshot at %d skipped: %s", self.node_id, end, e)
            return
        log.info(
            "[node %d] Wrote metadata snapshot %020d-%010d: %d bytes in %.0f ms",
            self.node_id,
            sid.end_offset,
            sid.epoch,
            len(data),
            (time.monotonic() - t0) * 1000,
        )

    def _deliver(self, committed: list[Entry]) -> None:
        if committed:
            self._backlog.extend(committed)
        if not self._drain_scheduled:
            self._drain()

    def _drain(self) -> None:
        """Apply committed entries to the listeners, at most ~50 ms per turn of the event
        loop: a follower catching up on a big change keeps fetching and voting meanwhile
        (the leader's check-quorum would otherwise depose it)."""
        self._drain_scheduled = False
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # tools: apply everything now
        t0 = time.perf_counter()
        delivered: list[Entry] = []
        while self._backlog:
            if loop is not None and delivered and time.perf_counter() - t0 > _DRAIN_SLICE_S:
                self._drain_scheduled = True
                loop.call_soon(self._drain)
                break
            e = self._backlog.popleft()
            self._bytes_since_snapshot += len(e.data)
            if not e.control:
                recs = _Decoded(e.data)
                for fn in self.listeners:
                    fn(recs, e.last_offset)
            self._delivered = e.last_offset
            delivered.append(e)
        hw = self.core.high_watermark
        if self.metrics is not None:
            self._record_metrics(delivered, hw)
        keep = []
        for off, fut in self._waiters:
            if off <= self._delivered and off < hw:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((off, fut))
        self._waiters = keep
        if not self._backlog:
            self._maybe_snapshot()

    def resign(self) -> None:
        """Graceful shutdown of the leader (EndQuorumEpoch to the voters)."""
        self.core.resign(_now_ms())
        self._process()

    def _record_metrics(self, committed: list[Entry], hw: int) -> None:
        m = self.metrics
        if not self.core.is_leader:
            m.fetch_records.inc(sum(e.last_offset - e.base_offset + 1 for e in committed))
        now = time.perf_counter()
        while self._pending_commits and self._pending_commits[0][0] < hw:
            _, t0 = self._pending_commits.pop(0)
            m.commit_latency.observe((now - t0) * 1000)
        role = self.core.role.value
        if role in ("Prospective", "Candidate") and self._election_started is None:
            self._election_started = now
        elif role == "Leader" and self._election_started is not None:
            m.election_latency.observe((now - self._election_started) * 1000)
            self._election_started = None
        elif role not in ("Prospective", "Candidate"):
            self._election_started = None

    def close(self) -> None:
        self._closed = True
        self._kill_snapshot_child()
        if self._timer is not None:
            self._timer.cancel()
        if self._linger is not None:
            self._linger.cancel()
        if not self._flushing:
            # (an fsync in its thread would meet closed descriptors - or others' files
            # under reused numbers: it closes them when it is done, in _flushed)
            self.raft_log.close()
