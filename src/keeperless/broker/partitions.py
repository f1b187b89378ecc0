"""The partitions a broker hosts: produce (validate, dedupe, assign offsets, append),
fetch, list offsets. Record batches stay bytes throughout."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.broker.producer_state import ProducerState
from keeperless.broker.txn_state import (
    marker_batch,
    marker_coordinator_epoch,
    marker_type,
)
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.records import (
    BatchHeader,
    CorruptBatchError,
    complete_batches,
    iter_batches,
    patch_offsets,
    read_header,
    set_log_append_time,
)
from keeperless.storage.epochs import LeaderEpochCache
from keeperless.storage.log import FileSlice, LogConfig, PartitionLog
from keeperless.storage.partition_dirs import (
    read_topic_id,
    write_topic_id,
)
from keeperless.storage.producer_files import AbortedTxn, snapshot_offsets
from keeperless.storage.segment import BuiltIndex

__all__ = [
    "AppendResult",
    "FollowerState",
    "NotLeaderError",
    "Partition",
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
        # bound to this incarnation of the topic before any data is written; a new
        # directory's names are made durable apart (PartitionLog.sync_dir), not on the
        # event loop while a metadata update creates thousands of partitions
        fresh = not directory.exists()
        if fresh:
            directory.mkdir(parents=True)
            write_topic_id(directory, self.topic_id, sync=False)
        elif read_topic_id(directory) is None:
            write_topic_id(directory, self.topic_id)
        # the batches from the newest snapshot on: what recovery replays
        snaps = [] if fresh else snapshot_offsets(directory)
        self._replay_from = snaps[-1] if snaps else 0
        self._found: list[BatchHeader] | None = []
        self._recovered_epochs: list[tuple[int, int]] = []  # of the batches read again
        # the newest snapshot was written once the log was flushed up to it (at a roll
        # or a clean stop): Kafka's recovery point
        self.log = PartitionLog(
            directory,
            config,
            now_ms,
            self._recovered_batch,
            clean_shutdown=clean_shutdown,
            recovery_point=self._replay_from,
            fresh=fresh,
        )
        if not fresh:  # (a new directory has no state to load)
            self._load_state(self._found)
        self._found = None
        self.log.on_roll = self._on_roll
        self.epochs = LeaderEpochCache(directory)
        if not self.epochs.loaded:
            for h in self.log.batch_headers():
                self.epochs.assign(h.partition_leader_epoch, h.base_offset, persist=False)
            if self.epochs.entries:
                self.epochs.save()
        else:
            # the epochs begun past the recovery point, which the checkpoint may not have
            # kept (written without an fsync), as Kafka's recovery re-assigns them
            newer = [(e, o) for e, o in self._recovered_epochs if e > self.epochs.latest_epoch]
            for epoch, offset in newer:
                self.epochs.assign(epoch, offset, persist=False)
            if newer:
                self.epochs.save()
        self._recovered_epochs = []
        self.epochs.truncate_from_end(self.log.log_end_offset)

    def adopt(self, copy: Partition, directory: Path) -> PartitionLog:
        """Serve from ``copy``'s storage, its directory now renamed to ``directory`` (a
        replica moved to another log directory): the same partition - its leadership,
        followers, high watermark, waiters and verified transactions - on the copy's
        open log, producers' state and leader epochs, nothing read again. Returns the
        log it served from, for the caller to close once no fetch still sends from it."""
        old = self.log
        copy.log.relocate(directory)
        copy.state.dir = directory
        copy.epochs.relocate(directory)
        copy.state.verified.update(self.state.verified)
        copy.log.config = old.config
        self.directory = directory
        self.log, self.state, self.epochs = copy.log, copy.state, copy.epochs
        self.producers, self.txns = copy.state.producers, copy.state.txns
        self.log.on_roll = self._on_roll
        self._hw = min(max(self._hw, self.log.log_start_offset), self.log.log_end_offset)
        return old

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
            else:
                # as Kafka's makeLeader: the new epoch begins at the log end, written or
                # not, so that "where does epoch E end?" has an answer on a leader that
                # has written nothing yet (an empty cache answered UNDEFINED, and
                # librdkafka took it for a truncation: its consumer of an empty
                # partition reset, then read nothing more from it)
                self.epochs.begin_leadership(info.leader_epoch, self.log.log_end_offset)
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
        self._forget_deleted_segments()
        return True

    def enforce_retention(self, now_ms: int) -> None:
        """Delete the segments past the topic's retention (and their snapshots)."""
        if self.log.enforce_retention(now_ms):
            self._forget_deleted_segments()

    def _forget_deleted_segments(self) -> None:
        """The producer snapshots of deleted segments go with them, as Kafka's do."""
        self.state.delete_snapshots(below=self.log.first_segment_base)

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
        epochs = self._recovered_epochs
        if h.partition_leader_epoch >= 0 and (
            not epochs or h.partition_leader_epoch > epochs[-1][0]
        ):
            epochs.append((h.partition_leader_epoch, h.base_offset))
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
        if found is None or start != self._replay_from or start < self.log.replayed_from:
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

    def _on_roll(self, base_offset: int) -> Callable[[], None]:
        """A new segment at ``base_offset``: the producers' state there is taken now
        (the batch that rolled it is noted after) and written once the rolled segment
        is durable (storage/sealing.py): a start trusts the segments below the newest
        snapshot. Snapshots of deleted segments go then."""
        log, at = self.log, self.state.encoded()

        def sealed() -> None:
            if self.log is not log:
                return  # (moved to another log directory since: its own log rolls)
            self.epochs.flush()
            self.state.write_snapshot(base_offset, at)
            self._forget_deleted_segments()

        return sealed

    def swap_in_cleaned(
        self,
        group: list[tuple[int, int]],
        cleaned: Path,
        now_ms: int,
        generation: int,
        built: BuiltIndex | None,
        dropped_aborts: Collection[int],
    ) -> bool:
        """A cleaned copy in place of its segments (PartitionLog.swap_in); the aborted
        transactions whose markers the cleaner removed are forgotten with them."""
        if not self.log.swap_in(group, cleaned, now_ms, generation, built):
            return False
        self.txns.forget_markers(dropped_aborts)
        return True

    def persist(self) -> None:
        """Everything on disk: the log flushed, the producers' state snapshotted at its
        end (a start then replays nothing)."""
        self.log.flush(indexes=True)
        self.log.sync_txn_indexes()
        self.epochs.flush()
        self.state.take_snapshot(self.log.log_end_offset)

    def close(self) -> bool:
        """A clean shutdown: the log flushed and the producers' state snapshotted at its
        end, so the next start replays nothing. False if that could not be done."""
        clean = self.log.writable
        try:
            if self.log.writable:
                self.persist()
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
        transaction_version: int = 0,
    ) -> AppendResult:
        """Leader: end a producer's transaction here (WriteTxnMarkers). A TV2 marker
        (KIP-890 part 2) carries the epoch its transaction's end bumped to, so it must be
        newer than the producer's epoch here: one as old is a duplicate - acknowledged
        if no transaction is open, refused if one is (a late copy of the previous
        transaction's marker must not end the next one)."""
        assert self.info is not None
        e = self.producers.get(producer_id)
        stale = e is not None and (
            producer_epoch <= e.epoch if transaction_version >= 2 else producer_epoch < e.epoch
        )
        if e is not None and stale:
            if producer_epoch == e.epoch and producer_id not in self.txns.ongoing:
                return AppendResult(ErrorCode.none, -1)  # a retry of the marker written
            return AppendResult(
                ErrorCode.invalid_producer_epoch,
                message=f"Marker epoch {producer_epoch} of producer {producer_id} is not "
                f"newer than {e.epoch}" if transaction_version >= 2 else
                f"Marker epoch {producer_epoch} of producer {producer_id} is older than "
                f"{e.epoch}",
            )  # fmt: skip
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
        if e is None and h.base_sequence != 0 and self.log.log_end_offset == 0:
            # KAFKA-15591 (Kafka 4.5): a partition that never held a record takes a
            # producer's first batch only at sequence 0. Else a batch sent after one
            # refused NOT_LEADER_OR_FOLLOWER (its leadership not yet applied here) is
            # taken, and the refused one's retries are out of order for good
            return AppendResult(
                ErrorCode.out_of_order_sequence_number,
                message=(
                    f"Producer {h.producer_id}'s first batch in the empty partition "
                    f"{self.topic}-{self.index} must start at sequence 0, got "
                    f"{h.base_sequence}"
                ),
            )
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
