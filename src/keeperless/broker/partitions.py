"""The partitions a broker hosts: produce (validate, dedupe, assign offsets, append),
fetch, list offsets. Record batches stay bytes throughout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.records import (
    BatchHeader,
    CorruptBatchError,
    iter_batches,
    patch_offsets,
    read_header,
    set_log_append_time,
)
from keeperless.storage.log import FileSlice, LogConfig, PartitionLog

__all__ = ["AppendResult", "Partition", "PartitionManager"]

log = logging.getLogger(__name__)
_MAX_CACHED_BATCHES = 5  # Kafka keeps the last 5 batches per producer for dedupe


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    # (first sequence, last sequence, base offset) of the most recent batches
    batches: OrderedDict[int, tuple[int, int]] = field(default_factory=OrderedDict)
    last_seq: int = -1


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
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.producers: dict[int, _ProducerEntry] = {}
        self.log = PartitionLog(directory, config, now_ms, self._recover_producer)
        self.info: PartitionInfo | None = None
        meta = directory / "partition.metadata"
        if not meta.exists():
            from keeperless.storage.meta_properties import uuid_to_kafka

            meta.write_text(f"version: 0\ntopic_id: {uuid_to_kafka(topic_id)}\n")

    @property
    def high_watermark(self) -> int:
        # Single-replica ISR: everything written is committed. Replication raises this
        # only when the ISR has it.
        return self.log.log_end_offset

    def _recover_producer(self, h: BatchHeader) -> None:
        if h.producer_id >= 0 and h.base_sequence >= 0:
            self._note_producer(h, h.base_offset)

    def _note_producer(self, h: BatchHeader, base_offset: int) -> None:
        e = self.producers.get(h.producer_id)
        if e is None or e.epoch != h.producer_epoch:
            e = _ProducerEntry(h.producer_epoch)
            self.producers[h.producer_id] = e
        e.batches[h.base_sequence] = (h.last_sequence, base_offset)
        while len(e.batches) > _MAX_CACHED_BATCHES:
            e.batches.popitem(last=False)
        e.last_seq = h.last_sequence

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
            if h.size > max_message_bytes:
                return AppendResult(
                    ErrorCode.message_too_large,
                    message=(
                        f"The batch of {h.size} bytes is larger than max.message.bytes "
                        f"({max_message_bytes})"
                    ),
                )
        first = batches[0][1]
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
        self.log.append(buf, assigned, now_ms)
        if first.producer_id >= 0 and first.base_sequence >= 0:
            self._note_producer(first, base)
        return AppendResult(ErrorCode.none, base)

    def read(self, offset: int, max_bytes: int) -> FileSlice | None:
        return self.log.read(offset, max_bytes, self.high_watermark)


class PartitionManager:
    """Partitions hosted by this broker, kept in step with the metadata image."""

    def __init__(self, node_id: int, log_dir: Path, defaults: LogConfig) -> None:
        self.node_id = node_id
        self.log_dir = log_dir
        self.defaults = defaults
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._data_arrived: asyncio.Future[None] | None = None

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
    ) -> Partition:
        p = self.partitions.get((topic, index))
        if p is None:
            p = Partition(topic, index, topic_id, self.log_dir / f"{topic}-{index}", config, now_ms)
            self.partitions[(topic, index)] = p
            if p.log.truncated_bytes:
                log.warning(
                    "[node %d] Recovered %s-%d: truncated %d torn bytes, log end %d",
                    self.node_id,
                    topic,
                    index,
                    p.log.truncated_bytes,
                    p.log.log_end_offset,
                )
        else:
            p.log.config = config
        p.info = info
        return p

    def remove(self, topic: str, index: int) -> None:
        p = self.partitions.pop((topic, index), None)
        if p is not None:
            p.log.delete()

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

    def close(self) -> None:
        for p in self.partitions.values():
            p.log.close()
        self.partitions.clear()
