"""WriteTxnMarkers (API 27) on partition leaders: the transaction coordinator ends a
producer's transaction on each partition it wrote to with a COMMIT or ABORT control
batch, written as acks=all writes are (every in-sync replica has it before the answer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.partitions import NotLeaderError, Partition
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.storage.dir_failure import LogDirFailure

__all__ = ["TxnMarkerWriter"]

OFFSETS_TOPIC = "__consumer_offsets"
MARKER_TIMEOUT_S = 30.0

# (partition of __consumer_offsets, producer id, committed): a group coordinator makes
# the offsets that producer committed in its transaction visible, or drops them
OffsetsMarkerHook = Callable[[int, int, bool], None]


class TxnMarkerWriter:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.on_offsets_marker: OffsetsMarkerHook | None = None

    def _leader_partition(self, topic: str, index: int) -> tuple[ErrorCode, Partition | None]:
        t = self.broker.image.topic(topic)
        if t is None or index not in t.partitions:
            return ErrorCode.unknown_topic_or_partition, None
        p = self.broker.partitions.get(topic, index)
        if p is None or not p.is_leader or t.partitions[index].leader != self.broker.node_id:
            return ErrorCode.not_leader_or_follower, None
        return ErrorCode.none, p

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[tuple[str, int]],
        transaction_version: int = 0,
    ) -> dict[tuple[str, int], ErrorCode]:
        """Append the marker to each partition led here; wait for their ISRs. A TV2
        marker carries the bumped epoch, and must be newer than the producer's epoch."""
        now = int(time.time() * 1000)
        results: dict[tuple[str, int], ErrorCode] = {}
        waits: list[tuple[tuple[str, int], Partition, int, int]] = []
        for topic, index in partitions:
            err, p = self._leader_partition(topic, index)
            if p is None:
                results[(topic, index)] = err
                continue
            try:
                res = p.append_marker(
                    producer_id, producer_epoch, commit, coordinator_epoch, now,
                    transaction_version,
                )  # fmt: skip
            except LogDirFailure:  # its directory went offline (reported where it failed)
                results[(topic, index)] = ErrorCode.kafka_storage_error
                continue
            results[(topic, index)] = res.error
            if res.error == ErrorCode.none:
                assert p.info is not None
                waits.append(((topic, index), p, p.log.log_end_offset, p.info.leader_epoch))
                if topic == OFFSETS_TOPIC and self.on_offsets_marker is not None:
                    self.on_offsets_marker(index, producer_id, commit)
        if waits:
            self.broker.partitions.notify_append(*(key for key, *_ in waits))

        async def wait(key: tuple[str, int], p: Partition, end: int, epoch: int) -> None:
            try:
                ok = await p.wait_for_hw(end, MARKER_TIMEOUT_S, epoch)
            except NotLeaderError:
                results[key] = ErrorCode.not_leader_or_follower
                return
            if not ok:
                results[key] = ErrorCode.request_timed_out

        await asyncio.gather(*(wait(k, p, end, e) for k, p, end, e in waits))
        return results

    async def handle(self, header: RequestHeader, req: Any) -> Any:
        markers = []
        for m in req.markers:
            parts = [(t.name, i) for t in m.topics for i in t.partition_indexes]
            results = await self.write(
                m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
                parts, getattr(m, "transaction_version", 0),
            )  # fmt: skip
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), err in results.items():
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": err})
            markers.append(
                {
                    "producer_id": m.producer_id,
                    "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
                }
            )
        return build(
            response_class(ApiKey.WRITE_TXN_MARKERS, header.api_version), {"markers": markers}
        )
