"""What the coordinator runtime needs of this broker's partitions (its ``PartitionLog``):
which partitions of a coordinator's topic are led here, their records and markers in
log order, appends as the leader, and the wait until the in-sync replicas have them."""

from __future__ import annotations

import time
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.partitions import NotLeaderError
from keeperless.broker.txn_state import COMMIT, marker_type
from keeperless.coordinator.outcome import Record
from keeperless.coordinator.runtime import LogRecord, TxnMarker
from keeperless.protocol.records import build_batch, decode_records

__all__ = ["APPEND_ERRORS", "BrokerPartitionLog"]

# append errors as a coordinator answers them (the caller finds the coordinator again)
APPEND_ERRORS = {
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
}


class BrokerPartitionLog:
    """The coordinator runtime's view of this broker's partitions (PartitionLog)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def led(self, topic: str) -> dict[int, int]:
        """The partitions the image makes this broker the leader of and whose log is open
        here as their leader in that epoch (not before the broker has gone live with its
        partitions, nor in an offline log directory: a shard read from a log not there
        would be empty, and stay so for the whole leadership)."""
        t = self.broker.image.topic(topic)
        if t is None:
            return {}
        node = self.broker.node_id
        out = {}
        for i, info in t.partitions.items():
            if info.leader != node:
                continue
            p = self.broker.partitions.get(topic, i)
            here = p is not None and p.info is not None and p.is_leader
            if here and p.info.leader_epoch == info.leader_epoch:  # type: ignore[union-attr]
                out[i] = info.leader_epoch
        return out

    def records(self, topic: str, index: int) -> Iterable[LogRecord | TxnMarker]:
        p = self.broker.partitions.get(topic, index)
        if p is None:
            return
        # to the log end: as the new leader, its whole log is what gets committed (its
        # own high watermark can lag behind what the old leader acknowledged)
        for h, batch in p.log.batches(p.log.log_start_offset):
            if h.is_control:
                yield TxnMarker(h.base_offset, h.producer_id, marker_type(batch) == COMMIT)
                continue
            for rec in decode_records(batch):
                if rec.key is not None:
                    yield LogRecord(
                        rec.offset, rec.key, rec.value, h.producer_id, h.is_transactional
                    )

    def append(
        self,
        topic: str,
        index: int,
        records: list[Record],
        leader_epoch: int,
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode | int:
        p = self.broker.partitions.get(topic, index)
        if p is None or p.info is None or not p.is_leader or p.info.leader_epoch != leader_epoch:
            return ErrorCode.not_coordinator
        now = int(time.time() * 1000)
        entries = [(k, v, ()) for k, v in records]
        batch = (
            build_batch(entries, timestamp_ms=now)
            if producer is None
            else build_batch(entries, timestamp_ms=now, producer_id=producer[0],
                             producer_epoch=producer[1], transactional=True)
        )  # fmt: skip
        res = p.append(batch, leader_epoch, 2**31 - 1, now)
        if res.error != ErrorCode.none:
            return APPEND_ERRORS.get(res.error, res.error)
        self.broker.partitions.notify_append((topic, index))
        return int(res.base_offset)

    async def committed(
        self, topic: str, index: int, leader_epoch: int, timeout_s: float
    ) -> ErrorCode | None:
        p = self.broker.partitions.get(topic, index)
        if p is None:
            return ErrorCode.not_coordinator
        try:
            ok = await p.wait_for_hw(p.log.log_end_offset, timeout_s, leader_epoch)
        except NotLeaderError:
            return ErrorCode.not_coordinator
        return None if ok else ErrorCode.coordinator_not_available
