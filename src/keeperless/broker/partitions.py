"""The partitions a broker hosts: produce (validate, dedupe, assign offsets, append),
fetch, list offsets. Record batches stay bytes throughout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.broker.producer_state import ProducerState
from keeperless.broker.txn_state import (
    marker_batch,
    marker_coordinator_epoch,
    marker_type,
)
from keeperless.metadata.image import UNASSIGNED, PartitionInfo
from keeperless.protocol.records import (
    BatchHeader,
    CorruptBatchError,
    complete_batches,
    iter_batches,
    patch_offsets,
    read_header,
    set_log_append_time,
)
from keeperless.storage.dir_failure import log_dir_failed
from keeperless.storage.durable import fsync_dir, write_atomically
from keeperless.storage.epochs import LeaderEpochCache
from keeperless.storage.log import FileSlice, LogConfig, PartitionLog
from keeperless.storage.meta_properties import (
    read_meta_properties,
    uuid_from_kafka,
    uuid_to_kafka,
)
from keeperless.storage.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from keeperless.storage.partition_dirs import (
    CLEAN_SHUTDOWN_FILE,
    FUTURE_SUFFIX,
    discard,
    partition_dirs,
    read_topic_id,
    remove_discarded,
    write_topic_id,
)
from keeperless.storage.producer_files import AbortedTxn, snapshot_offsets

__all__ = [
    "AppendResult",
    "FollowerState",
    "NotLeaderError",
    "Partition",
    "PartitionManager",
    "ReplicationError",
]

log = logging.getLogger(__name__)


class NotLeaderError(Exception):
    """This broker stopped leading the partition while a request waited."""


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of a follower from its fetches."""

    log_end_offset: int = -1
    log_start_offset: int = -1  # as its last fetch said (the low watermark's input)
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0


class ReplicationError(Exception):
    """A follower's copy cannot take what the leader sent (a gap): refetch."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    message: str | None = None


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: UUID,
        directory: Path,
        config: LogConfig,
        now_ms: int,
        clean_shutdown: bool = False,
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.info: PartitionInfo | None = None
        self.node_id = -1
        self._open_storage(directory, config, now_ms, clean_shutdown)
        # The high watermark: what every ISR member has. A leader whose ISR is itself
        # alone has everything; otherwise it rises as followers fetch.
        self._hw = self.log.log_start_offset
        self.followers: dict[int, FollowerState] = {}
        # the ISR this leader asked the controller for and has no answer to yet
        self.pending_isr: tuple[int, ...] | None = None
        # KIP-966: the min.insync.replicas below which the HW stays (0: ELR off)
        self.hw_min_isr = 0
        self.leader_since_ms = now_ms
        self._hw_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def _open_storage(
        self, directory: Path, config: LogConfig, now_ms: int, clean_shutdown: bool
    ) -> None:
        """Open the log, the producers' state and the leader epochs in ``directory``."""
        self.directory = directory
        self.state = ProducerState(directory)
        self.producers = self.state.producers
        self.txns = self.state.txns
        if read_topic_id(directory) is None:
            # bound to this incarnation of the topic before any data is written
            directory.mkdir(parents=True, exist_ok=True)
            write_topic_id(directory, self.topic_id)
        # the batches from the newest snapshot on: what recovery replays
        snaps = snapshot_offsets(directory)
        self._replay_from = snaps[-1] if snaps else 0
        self._found: list[BatchHeader] | None = []
        self.log = PartitionLog(
            directory, config, now_ms, self._recovered_batch, clean_shutdown=clean_shutdown
        )
        self._load_state(self._found)
        self._found = None
        self.log.on_roll = self._on_roll
        self.epochs = LeaderEpochCache(directory)
        if not self.epochs.loaded:
            for h in self.log.batch_headers():
                self.epochs.assign(h.partition_leader_epoch, h.base_offset, persist=False)
            self.epochs.save()
        self.epochs.truncate_from_end(self.log.log_end_offset)

    def reopen(self, directory: Path, now_ms: int) -> None:
        """Serve from the copy in ``directory`` (a replica moved to another log
        directory, closed cleanly there): the same partition - its leadership, followers,
        high watermark and waiters - on the new files."""
        config = self.log.config
        self.log.close()
        self._open_storage(directory, config, now_ms, clean_shutdown=True)
        self._hw = min(max(self._hw, self.log.log_start_offset), self.log.log_end_offset)

    @property
    def isr_change_in_flight(self) -> bool:
        return self.pending_isr is not None

    def maximal_isr(self) -> set[int]:
        """The ISR as it is or may become: while an expansion is in flight the controller
        may commit it and elect the new member at any moment, so the high watermark must
        not pass what that member has (Kafka's maximal ISR, KIP-497)."""
        assert self.info is not None
        return set(self.info.isr) | set(self.pending_isr or ())

    @property
    def is_leader(self) -> bool:
        return self.info is not None and self.info.leader == self.node_id

    @property
    def high_watermark(self) -> int:
        if self.log.closed:  # deleted, or the broker stopping: as it was
            return self._hw
        if self.is_leader:
            assert self.info is not None
            if all(r == self.node_id for r in self.maximal_isr()) and not self._under_min_isr():
                self._set_hw(self.log.log_end_offset)
        return min(self._hw, self.log.log_end_offset)

    def restore_hw(self, hw: int) -> None:
        """The high watermark saved before a restart (never past the log's end)."""
        self._hw = max(self._hw, min(hw, self.log.log_end_offset))

    def _under_min_isr(self) -> bool:
        """KIP-966: with eligible leader replicas on (``hw_min_isr`` set), the high
        watermark does not advance while the ISR is below min.insync.replicas, so every
        replica that leaves it then (into the ELR) holds every committed record."""
        return self.info is not None and len(self.info.isr) < self.hw_min_isr

    def _set_hw(self, hw: int) -> None:
        if hw <= self._hw:
            return
        self._hw = hw
        if self._hw_waiters:
            waiting, self._hw_waiters = self._hw_waiters, []
            for offset, fut in waiting:
                if fut.done():
                    continue
                if offset <= hw:
                    fut.set_result(None)
                else:
                    self._hw_waiters.append((offset, fut))

    def maybe_advance_hw(self) -> bool:
        """Leader: raise the HW to what every ISR member has; True if it rose."""
        if not self.is_leader or self._under_min_isr():
            return False
        assert self.info is not None
        hw = self.log.log_end_offset
        for r in self.maximal_isr():
            if r != self.node_id:
                f = self.followers.get(r)
                hw = min(hw, f.log_end_offset if f is not None else -1)
        before = self._hw
        self._set_hw(hw)
        return self._hw > before

    async def wait_for_hw(self, offset: int, timeout_s: float, leader_epoch: int) -> bool:
        """acks=all: wait until the ISR has everything below ``offset``, written while
        leading in ``leader_epoch``. NotLeaderError if this node no longer leads in that
        epoch: its high watermark, as a follower's, may pass ``offset`` over records of
        another leader that replaced the ones written (truncation)."""
        if not self._leading(leader_epoch):
            raise NotLeaderError(f"{self.topic}-{self.index}")
        if self.high_watermark >= offset:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._hw_waiters.append((offset, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False
        if not self._leading(leader_epoch):
            raise NotLeaderError(f"{self.topic}-{self.index}")
        return True

    def _leading(self, leader_epoch: int) -> bool:
        return self.is_leader and self.info is not None and self.info.leader_epoch == leader_epoch

    def fail_waiters(self) -> None:
        """Leadership moved: pending acks=all answers cannot be given here."""
        waiting, self._hw_waiters = self._hw_waiters, []
        for _, fut in waiting:
            if not fut.done():
                fut.set_exception(NotLeaderError(f"{self.topic}-{self.index}"))

    def on_info(self, info: PartitionInfo, now_ms: int) -> None:
        """The image changed this partition's leader, ISR or epoch."""
        old = self.info
        self.info = info
        if old is None or old.leader_epoch != info.leader_epoch or old.leader != info.leader:
            self.followers = {}
            self.leader_since_ms = now_ms
            self.pending_isr = None
            if info.leader != self.node_id:
                self.fail_waiters()
        elif old.isr != info.isr or old.partition_epoch != info.partition_epoch:
            self.pending_isr = None
        self.maybe_advance_hw()

    def record_follower_fetch(
        self, replica: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> None:
        """A follower asked for ``fetch_offset``: it has everything below it."""
        f = self.followers.setdefault(replica, FollowerState())
        f.log_end_offset = fetch_offset
        f.log_start_offset = log_start_offset
        f.last_fetch_ms = now_ms
        if fetch_offset >= self.log.log_end_offset:
            f.last_caught_up_ms = now_ms
        self.maybe_advance_hw()

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """Kafka's low watermark: the smallest log start offset of the leader and of its
        live followers (what DeleteRecords waits for)."""
        assert self.info is not None
        starts = [self.log.log_start_offset]
        for r in self.info.replicas:
            if r == self.node_id or not alive(r):
                continue
            f = self.followers.get(r)
            starts.append(f.log_start_offset if f is not None else -1)
        return min(starts)

    def advance_start(self, offset: int, now_ms: int) -> bool:
        """Move the log start offset up to ``offset`` (DeleteRecords; a follower
        following its leader's); True if it moved. Past the log end, start over there."""
        if offset <= self.log.log_start_offset:
            return False
        if offset > self.log.log_end_offset:
            self.reset_to(offset, now_ms)
            return True
        self.log.advance_start(offset, now_ms)
        self._hw = max(self._hw, offset)
        return True

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.log.log_end_offset)

    # -- follower side ----------------------------------------------------------------

    def append_replica(self, records: bytes, now_ms: int) -> int:
        """Append batches fetched from the leader (offsets already assigned); returns
        the number of batches appended."""
        buf = bytearray(records)
        try:
            # an answer of replica.fetch.max.bytes may end inside a batch: next time
            batches = complete_batches(buf)
        except CorruptBatchError as e:
            raise ReplicationError(f"{self.topic}-{self.index}: {e}") from None
        leo = self.log.log_end_offset
        first = next((h for _, h in batches if h.last_offset >= leo), None)
        if first is not None and first.base_offset < leo:
            # a batch around our end: the leader's log start is inside a batch
            # (DeleteRecords) and this replica starts there, empty. Kafka's rule
            # (Partition.appendRecordsToFollowerOrFutureReplica): start the log at the
            # batch's first offset and take it whole; the leader's log start is applied
            # after. Skipping it lost the records from our start to its end (found by the
            # fault harness: a replica added by a reassignment, then leader, had lost
            # three acknowledged records).
            if self.log.log_start_offset != leo:
                raise ReplicationError(
                    f"{self.topic}-{self.index}: the leader's batch {first.base_offset}-"
                    f"{first.last_offset} overlaps the end of this replica's log ({leo})"
                )
            log.info(
                "[node %d] %s-%d: the leader's first batch starts at %d, before this empty "
                "replica's start %d (its log start is inside the batch); starting at %d",
                self.node_id, self.topic, self.index, first.base_offset, leo,
                first.base_offset,
            )  # fmt: skip
            self.log.reset_to(first.base_offset, now_ms)
            self.epochs.clear()
            self._hw = first.base_offset
            leo = first.base_offset
        # the first batch may start past our end: the leader's cleaner removed what lay
        # between (a compacted log has gaps; Kafka's followers take them)
        keep = [(pos, h) for pos, h in batches if h.base_offset >= leo]
        if not keep:
            return 0
        start = keep[0][0]
        end = keep[-1][0] + keep[-1][1].size  # not the cut batch after it
        data = buf[start:end]
        headers = [(pos - start, h) for pos, h in keep]
        for _, h in headers:
            self.epochs.assign(h.partition_leader_epoch, h.base_offset)
        self.log.append(data, headers, now_ms)
        for pos, h in headers:
            if h.is_control:
                self._note_marker(h, h.base_offset, bytes(data[pos : pos + h.size]))
            else:
                self.state.note_batch(h, h.base_offset)
        return len(headers)

    def follower_hw(self, leader_hw: int) -> None:
        self._set_hw(min(leader_hw, self.log.log_end_offset))

    def truncate_to(self, offset: int) -> None:
        """Drop what the leader does not have (a diverging epoch)."""
        if offset >= self.log.log_end_offset:
            return
        log.info(
            "[node %d] Truncating %s-%d from offset %d to %d (diverged from the leader)",
            self.node_id,
            self.topic,
            self.index,
            self.log.log_end_offset,
            offset,
        )
        self.log.truncate_to(offset)
        self.epochs.truncate_from_end(self.log.log_end_offset)
        self._hw = min(self._hw, self.log.log_end_offset)
        # the producers' state as the remaining log has it, all of it (a producer whose
        # last batch is in an older segment would be forgotten, and its retries appended
        # again: duplicates): from the newest snapshot below the truncation point
        self._load_state(None)

    def reset_to(self, offset: int, now_ms: int) -> None:
        """The leader no longer has our offsets (retention): start over at ``offset``."""
        log.info(
            "[node %d] Resetting %s-%d to start at offset %d (the leader's log start)",
            self.node_id,
            self.topic,
            self.index,
            offset,
        )
        self.log.reset_to(offset, now_ms)
        self.epochs.clear()
        self._hw = offset
        self.state.clear()
        self.state.delete_snapshots()

    # -- producer state: snapshots, recovery, markers ----------------------------------

    def _recovered_batch(self, h: BatchHeader) -> None:
        found = self._found
        wanted = h.producer_id >= 0 or h.is_control
        if found is not None and wanted and h.base_offset >= self._replay_from:
            found.append(h)

    def _load_state(self, found: list[BatchHeader] | None) -> None:
        """The producers and transactions as of the log end: the newest snapshot at or
        below it, the aborted transactions indexed before it, and the batches after it
        replayed (``found`` if they were collected while the log was opened from the
        same snapshot; read again otherwise)."""
        start = self.state.load_snapshot(self.log.log_end_offset)
        if found is None or start != self._replay_from:
            found = [h for h in self.log.batch_headers() if h.base_offset >= start]
            found = [h for h in found if h.producer_id >= 0 or h.is_control]
        for indexed in self.log.aborted_txns():
            if indexed.last_offset < start:
                self.txns.aborted.append(
                    (indexed.last_offset, indexed.producer_id, indexed.first_offset)
                )
        replayed: list[AbortedTxn] = []
        for h in found:
            if h.is_control:
                a = self._note_marker(h, h.base_offset, None, index=False)
                if a is not None:
                    replayed.append(a)
            else:
                self.state.note_batch(h, h.base_offset)
        if replayed or start < self.log.log_end_offset:
            self.log.rewrite_txn_indexes(replayed, start)
        self.txns.forget_before(self.log.log_start_offset)

    def _on_roll(self, base_offset: int) -> None:
        """A new segment at ``base_offset``: the producers' state there is snapshotted
        (the batch that rolled it is noted after), and snapshots of deleted segments go."""
        self.log.sync_txn_indexes()
        self.state.take_snapshot(base_offset)
        self.state.delete_snapshots(below=self.log.first_segment_base)

    def close(self) -> bool:
        """A clean shutdown: the log flushed and the producers' state snapshotted at its
        end, so the next start replays nothing. False if that could not be done."""
        clean = self.log.writable
        try:
            if self.log.writable:
                self.log.flush()
                self.log.sync_txn_indexes()
                self.state.take_snapshot(self.log.log_end_offset)
        except OSError as e:
            clean = False
            log.warning("Could not snapshot the producers of %s-%d: %s", self.topic, self.index, e)
        self.log.close()
        return clean

    def _note_marker(
        self, h: BatchHeader, offset: int, data: bytes | None, index: bool = True
    ) -> AbortedTxn | None:
        if data is None:
            sl = self.log.read(offset, h.size)
            data = sl.read()[: h.size] if sl is not None else b""
        kind = marker_type(data) if data else None
        aborted = self.state.note_marker(h, kind, offset, marker_coordinator_epoch(data))
        if aborted is not None and index:
            self.log.append_aborted(aborted)
        return aborted

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided (Kafka's LSO): the high watermark, or
        the first offset of an open transaction if lower."""
        hw = self.high_watermark
        first = self.txns.first_unstable()
        if first is None:
            return hw
        # an open transaction that started before the log start (retention, DeleteRecords)
        # holds readers at the log start, not below it (Kafka bounds it the same way)
        return min(hw, max(first, self.log.log_start_offset))

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> AppendResult:
        """Leader: end a producer's transaction here (WriteTxnMarkers)."""
        assert self.info is not None
        e = self.producers.get(producer_id)
        if e is not None and producer_epoch < e.epoch:
            return AppendResult(
                ErrorCode.invalid_producer_epoch,
                message=f"Marker epoch {producer_epoch} of producer {producer_id} is older "
                f"than {e.epoch}",
            )
        buf = bytearray(
            marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        )
        base = self.log.log_end_offset
        patch_offsets(buf, 0, base, self.info.leader_epoch)
        h = read_header(buf, 0)
        self.epochs.assign(self.info.leader_epoch, base)
        self.log.append(buf, [(0, h)], now_ms)
        self._note_marker(h, base, bytes(buf))
        return AppendResult(ErrorCode.none, base)

    def _check_sequence(self, h: BatchHeader) -> AppendResult | None:
        """None to append; otherwise the duplicate's original result or an error."""
        e = self.producers.get(h.producer_id)
        if e is None or h.producer_epoch > e.epoch:
            if h.base_sequence != 0 and e is not None:
                return AppendResult(
                    ErrorCode.out_of_order_sequence_number,
                    message=(
                        f"New epoch {h.producer_epoch} of producer {h.producer_id} must start "
                        f"at sequence 0, got {h.base_sequence}"
                    ),
                )
            return None
        if h.producer_epoch < e.epoch:
            return AppendResult(
                ErrorCode.invalid_producer_epoch,
                message=(
                    f"Producer {h.producer_id} epoch {h.producer_epoch} is older than {e.epoch}"
                ),
            )
        dup = e.batches.get(h.base_sequence)
        if dup is not None and dup[0] == h.last_sequence:
            return AppendResult(ErrorCode.none, dup[1])
        expected = (e.last_seq + 1) & 0x7FFFFFFF
        if h.base_sequence != expected:
            return AppendResult(
                ErrorCode.out_of_order_sequence_number,
                message=(
                    f"Out of order sequence number for producer {h.producer_id} at offset "
                    f"{self.log.log_end_offset} in partition {self.topic}-{self.index}: "
                    f"{h.base_sequence} (incoming seq. number), {e.last_seq} (current end "
                    "sequence number)"
                ),
            )
        return None

    def append(
        self,
        records: bytes,
        leader_epoch: int,
        max_message_bytes: int,
        now_ms: int,
        log_append_time: bool = False,
    ) -> AppendResult:
        buf = bytearray(records)
        try:
            batches = list(iter_batches(buf))
        except CorruptBatchError as e:
            return AppendResult(ErrorCode.corrupt_message, message=str(e))
        if not batches:
            return AppendResult(ErrorCode.corrupt_message, message="no record batch")
        for _, h in batches:
            if h.is_control:
                return AppendResult(
                    ErrorCode.invalid_record,
                    message="A control batch cannot be produced (transaction markers are "
                    "written by the transaction coordinator)",
                )
            if h.size > max_message_bytes:
                return AppendResult(
                    ErrorCode.message_too_large,
                    message=(
                        f"The batch of {h.size} bytes is larger than max.message.bytes "
                        f"({max_message_bytes})"
                    ),
                )
        first = batches[0][1]
        if first.producer_id >= 0 and first.base_sequence < 0:
            # a coordinator's transactional write (TxnOffsetCommit): no sequence, but a
            # producer fenced by a newer epoch's marker is refused all the same
            known = self.producers.get(first.producer_id)
            if known is not None and first.producer_epoch < known.epoch:
                return AppendResult(
                    ErrorCode.invalid_producer_epoch,
                    message=f"Producer {first.producer_id} epoch {first.producer_epoch} is "
                    f"older than {known.epoch}",
                )
        for _pos, h in batches:
            if h.producer_id >= 0 and not h.is_transactional and h.producer_id in self.txns.ongoing:
                # Kafka's rule: while a producer's transaction is open here, its writes
                # belong to it (else anyone could slip records under its id that survive
                # an abort and break its sequence: found by a helper's probe)
                return AppendResult(
                    ErrorCode.invalid_txn_state,
                    message=(
                        f"Expected transactional write from producer {h.producer_id} at "
                        f"offset {self.log.log_end_offset} in partition {self.topic}-{self.index}"
                    ),
                )
        if first.producer_id >= 0 and first.base_sequence >= 0:
            if len(batches) != 1:
                return AppendResult(
                    ErrorCode.invalid_record,
                    message=("An idempotent produce request must carry exactly one batch"),
                )
            verdict = self._check_sequence(first)
            if verdict is not None:
                return verdict
        base = self.log.log_end_offset
        offset = base
        assigned: list[tuple[int, BatchHeader]] = []
        for pos, h in batches:
            patch_offsets(buf, pos, offset, leader_epoch)
            if log_append_time:
                set_log_append_time(buf, pos, now_ms)
            assigned.append((pos, read_header(buf, pos)))
            offset += h.last_offset_delta + 1
        self.epochs.assign(leader_epoch, base)
        self.log.append(buf, assigned, now_ms)
        if first.producer_id >= 0:
            self.state.note_batch(first, base)
        return AppendResult(ErrorCode.none, base)

    def read(
        self, offset: int, max_bytes: int, for_replica: bool = False, committed: bool = False
    ) -> FileSlice | None:
        """Consumers read up to the high watermark (read_committed ones up to the last
        stable offset); followers up to the log end."""
        if for_replica:
            limit = self.log.log_end_offset
        else:
            limit = self.last_stable_offset if committed else self.high_watermark
        return self.log.read(offset, max_bytes, limit)


@dataclass(eq=False, slots=True)
class LogDir:
    """One of the broker's ``log.dirs`` (KIP-858): its path, its directory id (from its
    meta.properties), whether it is online, and what it had checkpointed for the
    partitions it holds that are not open yet."""

    path: Path
    dir_id: UUID
    online: bool = True
    clean: bool = False  # its clean-shutdown file was there at start
    epoch: int = -1  # the broker epoch that file named
    starts: dict[tuple[str, int], int] = field(default_factory=dict)
    hws: dict[tuple[str, int], int] = field(default_factory=dict)
    hosted: int = 0  # partitions open in it (for placing new ones)


def directory_id_of(path: Path) -> UUID:
    """A log directory's id: from its meta.properties; for one without (tests, tools),
    one derived from its path."""
    meta = read_meta_properties(path)
    if meta is not None:
        with contextlib.suppress(ValueError):
            return uuid_from_kafka(meta.directory_id)
    u = uuid.uuid5(uuid.NAMESPACE_URL, str(path.resolve()))
    return u if u.int > 100 else UUID(int=u.int + 101)


class PartitionManager:
    """Partitions hosted by this broker, kept in step with the metadata image, in one or
    several log directories."""

    def __init__(self, node_id: int, log_dirs: Path | Sequence[Path], defaults: LogConfig) -> None:
        self.node_id = node_id
        paths = (log_dirs,) if isinstance(log_dirs, Path) else tuple(log_dirs)
        self.dirs = [LogDir(d, directory_id_of(d)) for d in paths]
        self.log_dir = paths[0]
        self.defaults = defaults
        self.partitions: dict[tuple[str, int], Partition] = {}
        # the directory of each open partition
        self.dir_of: dict[tuple[str, int], LogDir] = {}
        # partitions assigned here whose directory is offline (KIP-858): not served
        self.offline: dict[tuple[str, int], LogDir | None] = {}
        # partition directories found at start, by partition, until opened (in two
        # directories after a crash in the middle of a move between them)
        self._found: dict[tuple[str, int], list[LogDir]] = {}
        # where a replica not hosted yet is to be created (AlterReplicaLogDirs before
        # it arrives, as Kafka's preferred log dirs)
        self.preferred: dict[tuple[str, int], LogDir] = {}
        # directories to tell the controller (AssignReplicasToDirs): (topic id,
        # partition) -> directory id, taken by the broker
        self.assignments: dict[tuple[UUID, int], UUID] = {}
        self._data_arrived: asyncio.Future[None] | None = None
        # set by the replica manager: a follower fetched from a partition led here
        self.on_follower_fetch: Callable[[Partition, int], None] | None = None
        # called when a log directory goes offline (the broker tells the controller)
        self.on_dir_offline: Callable[[LogDir], None] | None = None
        # Kafka's marker of a clean stop: read (and removed) at start, written at a
        # clean stop; recovery then knows a torn tail is not a crash's. Clean only if
        # every directory had it
        self.clean_shutdown = True
        # the broker epoch the clean-shutdown files name (as Kafka's, {"version": 0,
        # "brokerEpoch": N}), told to the controller at registration; -1 after a crash
        epochs: set[int] = set()
        for ld in self.dirs:
            self._open_dir(ld)
            self.clean_shutdown = self.clean_shutdown and ld.clean
            epochs.add(ld.epoch)
        self.previous_broker_epoch = epochs.pop() if len(epochs) == 1 else -1
        if not self.clean_shutdown:
            self.previous_broker_epoch = -1

    def _open_dir(self, ld: LogDir) -> None:
        """Read a directory's checkpoints and clean-shutdown file and index its
        partition directories; one that cannot be read starts offline."""
        try:
            if ld.path.exists() and not ld.path.is_dir():
                raise NotADirectoryError(f"{ld.path} is not a directory")
            # log start offsets moved inside a segment (DeleteRecords), as checkpointed;
            # applied to each partition when it opens
            ld.starts = read_offset_checkpoint(ld.path / LOG_START_OFFSET_CHECKPOINT)
            # each partition's high watermark as last saved (Kafka's
            # replication-offset-checkpoint), applied when it opens
            ld.hws = read_offset_checkpoint(ld.path / REPLICATION_OFFSET_CHECKPOINT)
            marker = ld.path / CLEAN_SHUTDOWN_FILE
            if marker.exists():
                ld.clean = True
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    ld.epoch = int(json.loads(marker.read_text())["brokerEpoch"])
                marker.unlink()
                fsync_dir(ld.path)
            for key in partition_dirs(ld.path):
                self._found.setdefault(key, []).append(ld)
            for future in ld.path.glob(f"*{FUTURE_SUFFIX}"):
                # a move between directories that a stop cut short: asked again, it
                # starts over
                log.info("[node %d] Deleting %s: a move of a replica between log "
                         "directories that did not finish", self.node_id, future)  # fmt: skip
                discard(future)
        except OSError as e:
            ld.online = False
            log.error(
                "[node %d] Log directory %s is offline: it could not be read at start (%s)",
                self.node_id,
                ld.path,
                e,
            )

    @property
    def online_dirs(self) -> list[LogDir]:
        return [ld for ld in self.dirs if ld.online]

    @property
    def offline_dirs(self) -> list[LogDir]:
        return [ld for ld in self.dirs if not ld.online]

    def dir_by_id(self, dir_id: UUID) -> LogDir | None:
        return next((ld for ld in self.dirs if ld.dir_id == dir_id), None)

    def dir_containing(self, path: Path) -> LogDir | None:
        """The log directory ``path`` is in (or is): the innermost, when one log
        directory lies inside another."""
        found = [ld for ld in self.dirs if path == ld.path or ld.path in path.parents]
        return max(found, key=lambda ld: len(ld.path.parts), default=None)

    def _place(self, key: tuple[str, int], info: PartitionInfo) -> LogDir | None:
        """Where a partition not found on disk is created: the directory the metadata
        assigns it, if online here; else, with every directory online, the one holding
        the fewest partitions (Kafka's nextLogDirs). With a directory offline, a replica
        the metadata does not show as new (UNASSIGNED) may be on it: it is not created
        elsewhere (Kafka: "Can not create log ... because log directories are offline")."""
        want = info.directory(self.node_id)
        chosen = self.preferred.pop(key, None)
        if chosen is not None and chosen.online:
            return chosen
        ld = self.dir_by_id(want)
        if ld is not None and ld.online:
            return ld
        online = self.online_dirs
        if not online or (len(online) < len(self.dirs) and want != UNASSIGNED):
            return None
        return min(online, key=lambda d: d.hosted)

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def ensure(
        self,
        topic: str,
        index: int,
        topic_id: UUID,
        info: PartitionInfo,
        config: LogConfig,
        now_ms: int,
    ) -> Partition | None:
        """Open (or create) the local replica; None when it is not served here because
        a log directory that may hold it is offline."""
        p = self.partitions.get((topic, index))
        if p is not None and p.topic_id != topic_id:
            # an older incarnation of the topic is still open here: it goes first
            self.remove(topic, index, p.topic_id, "its topic was re-created")
            p = None
        if p is None:
            key = (topic, index)
            copies = [d for d in self._found.pop(key, ()) if d.online]
            want = info.directory(self.node_id)
            ld = next((d for d in copies if d.dir_id == want), copies[0] if copies else None)
            for other in copies:
                if other is not ld:
                    # a crash between the two renames of a move: the copies are the same
                    log.info("[node %d] Deleting the second copy of %s-%d in %s (kept: %s)",
                             self.node_id, topic, index, other.path, ld and ld.path)  # fmt: skip
                    self._discard(other.path / f"{topic}-{index}")
            if ld is None:
                ld = self._place(key, info)
            if ld is None:
                if key not in self.offline:
                    log.warning(
                        "[node %d] Not hosting %s-%d: a log directory that may hold it is offline",
                        self.node_id,
                        topic,
                        index,
                    )
                self.offline[key] = None
                return None
            directory = ld.path / f"{topic}-{index}"
            try:
                found = self._claim(directory, topic_id, topic)
                p = Partition(topic, index, topic_id, directory, config, now_ms, ld.clean)
            except OSError as e:
                # its log directory failed (Kafka: an I/O error creating or loading a
                # log takes the directory offline); the node may stop (the metadata
                # log's directory), else the partition is offline here
                log_dir_failed(ld.path, e)
                self.dir_failed(ld.path, e)
                self.offline[key] = ld
                return None
            self.offline.pop(key, None)
            self.partitions[key] = p
            self.dir_of[key] = ld
            ld.hosted += 1
            start = ld.starts.pop(key, None)
            if start is not None and found == topic_id:
                p.advance_start(start, now_ms)
            hw = ld.hws.pop(key, None)
            if hw is not None and found == topic_id:
                p.restore_hw(hw)
        else:
            p.log.config = config
        ld = self.dir_of[(topic, index)]
        if info.directory(self.node_id) != ld.dir_id:
            self.assignments[(topic_id, index)] = ld.dir_id
        p.node_id = self.node_id
        p.on_info(info, now_ms)
        return p

    def _claim(self, directory: Path, topic_id: UUID, topic: str) -> UUID | None:
        """The topic id ``directory`` holds; a deleted incarnation's is discarded."""
        found = read_topic_id(directory) if directory.exists() else None
        if found is not None and found != topic_id:
            log.info(
                "[node %d] Deleting %s: it belongs to topic id %s, not %s (a deleted "
                "incarnation of %s)",
                self.node_id,
                directory.name,
                found,
                topic_id,
                topic,
            )
            self._discard(directory)
        return found

    def checkpoint_high_watermarks(self) -> None:
        """Save every partition's high watermark in its directory's checkpoint (those not
        opened yet: as read)."""
        failed: OSError | None = None
        for ld in self.online_dirs:
            hws = dict(ld.hws)
            for key, p in self.partitions.items():
                if self.dir_of.get(key) is ld:
                    hws[key] = p.high_watermark
            try:
                write_offset_checkpoint(ld.path / REPLICATION_OFFSET_CHECKPOINT, hws)
            except OSError as e:  # that directory failed: the others are saved still
                failed = e
        if failed is not None:
            raise failed

    def advance_start(self, p: Partition, offset: int, now_ms: int) -> bool:
        """Move a partition's log start offset and checkpoint every moved start of its
        directory (the deleted records must stay deleted across a restart)."""
        if not p.advance_start(offset, now_ms):
            return False
        ld = self.dir_of.get((p.topic, p.index))
        if ld is None or not ld.online:
            return True
        starts = dict(ld.starts)  # of partitions not opened yet: kept
        for key, q in self.partitions.items():
            if self.dir_of.get(key) is not ld:
                continue
            first = q.log.first_segment_base
            if q.log.log_start_offset > first:
                starts[key] = q.log.log_start_offset
        write_offset_checkpoint(ld.path / LOG_START_OFFSET_CHECKPOINT, starts)
        return True

    def remove(self, topic: str, index: int, topic_id: UUID, why: str) -> bool:
        """Delete the local replica of ``topic``-``index`` if it belongs to topic id
        ``topic_id`` (a re-created topic of the same name is another partition)."""
        p = self.partitions.get((topic, index))
        if p is None or p.topic_id != topic_id:
            self.offline.pop((topic, index), None)
            return False
        del self.partitions[(topic, index)]
        ld = self.dir_of.pop((topic, index), None)
        if ld is not None:
            ld.hosted -= 1
        self.assignments.pop((topic_id, index), None)
        log.info(
            "[node %d] Deleting partition %s-%d of topic id %s (%s)",
            self.node_id,
            topic,
            index,
            topic_id,
            why,
        )
        p.fail_waiters()
        # no longer anyone's replica here: a request still holding it (an acks=all
        # produce about to wait, found by the fault harness as an IndexError on the
        # closed log) is answered NOT_LEADER_OR_FOLLOWER
        p.info = None
        p.log.close()  # no snapshot: it is deleted
        self._discard(p.directory)
        return True

    def _discard(self, directory: Path) -> None:
        target = discard(directory)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            shutil.rmtree(target, ignore_errors=True)
            return
        loop.run_in_executor(None, shutil.rmtree, target, True)

    def remove_strays(self, expected: dict[tuple[str, int], UUID]) -> None:
        """At start, once the metadata is caught up: delete what a crash left of
        discarded partitions, and every partition directory that the metadata does not
        assign to this broker with that topic id (deleted while it was down, or an older
        incarnation of a re-created topic)."""
        for ld in self.online_dirs:
            remove_discarded(ld.path)
            for key, directory in partition_dirs(ld.path).items():
                if key in self.partitions and self.dir_of.get(key) is ld:
                    continue
                found = read_topic_id(directory)
                want = expected.get(key)
                if key not in self.partitions and found is not None and found == want:
                    continue
                if key not in self.partitions and found is None and want is not None:
                    continue  # a directory from before partition.metadata: it is adopted
                log.info(
                    "[node %d] Deleting stray partition directory %s (topic id %s is not "
                    "assigned here%s)",
                    self.node_id,
                    directory,
                    found,
                    ", or it is hosted in another log directory" if key in self.partitions else "",
                )
                self._discard(directory)

    def notify_append(self) -> None:
        fut = self._data_arrived
        self._data_arrived = None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def wait_for_data(self, timeout_s: float) -> None:
        if self._data_arrived is None:
            self._data_arrived = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._data_arrived), timeout_s)

    def close(self, broker_epoch: int = -1) -> None:
        """Close every log; mark each directory whose logs were all flushed cleanly shut
        down (with the broker's epoch, which it names when it registers again)."""
        try:
            self.checkpoint_high_watermarks()
        except OSError as e:
            log.warning("[node %d] Could not save the high watermarks: %s", self.node_id, e)
        unclean: set[int] = set()
        for key, p in self.partitions.items():
            # a request still holding it (an acks=all produce waiting for the high
            # watermark) is answered NOT_LEADER_OR_FOLLOWER, not an IndexError on the
            # closed log (fault harness, seed 4406: a stop without a controller)
            p.fail_waiters()
            p.info = None
            if not p.close():
                ld = self.dir_of.get(key)
                unclean.add(id(ld))
        self.partitions.clear()
        self.dir_of.clear()
        for ld in self.dirs:
            ld.hosted = 0
        for ld in self.online_dirs:
            if id(ld) in unclean:
                continue
            try:
                write_atomically(
                    ld.path / CLEAN_SHUTDOWN_FILE,
                    json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode(),
                )
                fsync_dir(ld.path)
            except OSError as e:
                log.warning("[node %d] Could not mark %s cleanly shut down: %s",
                            self.node_id, ld.path, e)  # fmt: skip

    # -- a failed log directory (KIP-858) ---------------------------------------------------

    def dir_failed(self, path: Path, error: OSError) -> LogDir | None:
        """A write in ``path`` failed: its log directory goes offline - its partitions
        are closed and no longer served here, and nothing more is written to it. Returns
        the directory newly offline (None: unknown, or already offline)."""
        ld = self.dir_containing(path)
        if ld is None or not ld.online:
            return None
        ld.online = False
        log.error(
            "[node %d] Log directory %s (%s) is offline after an I/O error (%s): its %d "
            "partition(s) are no longer served here; %d of %d log directories remain online",
            self.node_id,
            ld.path,
            uuid_to_kafka(ld.dir_id),
            error,
            sum(1 for d in self.dir_of.values() if d is ld),
            len(self.online_dirs),
            len(self.dirs),
        )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._close_dir(ld)
        else:
            # not inside the write that failed: its caller is still on the stack
            loop.call_soon(self._close_dir, ld)
        if self.on_dir_offline is not None:
            self.on_dir_offline(ld)
        return ld

    def _close_dir(self, ld: LogDir) -> None:
        for key in [k for k, d in self.dir_of.items() if d is ld]:
            p = self.partitions.pop(key)
            del self.dir_of[key]
            ld.hosted -= 1
            self.offline[key] = ld
            p.fail_waiters()
            p.info = None
            with contextlib.suppress(Exception):
                p.log.close()
