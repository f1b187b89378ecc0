"""The share coordinator (KIP-932, Kafka's ShareCoordinatorService): the durable state
of every share-partition in ``__share_group_state``, served to the partition leaders with
Initialize/Read/Write/DeleteShareGroupState and ReadShareGroupStateSummary (APIs 83-87,
broker to broker). Its rules are coordinator/share_state.py's shard; the coordinator
runtime hosts one shard per partition of the topic led here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.coordinator_log import BrokerPartitionLog
from keeperless.coordinator.outcome import Outcome
from keeperless.coordinator.runtime import CoordinatorRuntime
from keeperless.coordinator.share_records import ShareKey, StateBatch
from keeperless.coordinator.share_state import (
    Refusal,
    ShareState,
    ShareStateShard,
    delivery_complete,
)
from keeperless.group.coordinator import partition_for_group
from keeperless.metadata.admin import NewTopic
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.storage.dir_failure import LogDirFailure

__all__ = [
    "SHARE_STATE_TOPIC",
    "ShareCoordinator",
    "ShareCoordinatorSettings",
]

log = logging.getLogger(__name__)
SHARE_STATE_TOPIC = "__share_group_state"


@dataclass(frozen=True)
class ShareCoordinatorSettings:
    """The broker's share.coordinator.* keys (Kafka's names and defaults)."""

    partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104857600
    updates_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    prune_interval_ms: int = 300000
    cold_snapshot_interval_ms: int = 300000

    @classmethod
    def of(cls, config: Any) -> ShareCoordinatorSettings:
        k = "share.coordinator."
        return cls(
            config[k + "state.topic.num.partitions"],
            config[k + "state.topic.replication.factor"],
            config[k + "state.topic.min.isr"],
            config[k + "state.topic.segment.bytes"],
            config[k + "snapshot.update.records.per.snapshot"],
            config[k + "write.timeout.ms"],
            config[k + "state.topic.prune.interval.ms"],
            config[k + "cold.partition.snapshot.interval.ms"],
        )


def _batches(raw: Iterable[Any]) -> list[StateBatch]:
    return [
        StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in raw
    ]


def _state_batches(s: ShareState) -> list[dict[str, int]]:
    return [
        {"first_offset": b.first_offset, "last_offset": b.last_offset,
         "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
        for b in s.batches
    ]  # fmt: skip


def _bound(
    op: Callable[[ShareStateShard, ShareKey, Any], Outcome[Any]],
    key: ShareKey,
    p: Any,
    shard: ShareStateShard,
) -> Outcome[Any]:
    return op(shard, key, p)


def _delete(key: ShareKey, shard: ShareStateShard) -> Outcome[Refusal | None]:
    return shard.delete(key)


def _refresh(shard: ShareStateShard) -> Outcome[int]:
    return shard.refresh_snapshots()


class ShareCoordinator:
    topic = SHARE_STATE_TOPIC

    def __init__(self, broker: Broker, settings: ShareCoordinatorSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
            "share coordinator",
            SHARE_STATE_TOPIC,
            BrokerPartitionLog(broker),
            lambda: ShareStateShard(settings.updates_per_snapshot),
            settings.write_timeout_ms / 1000,
            broker.node_id,
        )
        broker.on_image.append(self._on_image)
        self._cleanup: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None

    def _on_image(self, _image: Any) -> None:
        """Follow the leadership of __share_group_state once this broker's partitions are
        live: the images of its metadata log's replay at start (each a past leadership)
        loaded and dropped every shard again and again (found by a fresh-eyes review)."""
        if self.broker.partitions_live:
            self.runtime.on_leadership()

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.INITIALIZE_SHARE_GROUP_STATE: self.initialize,
            ApiKey.READ_SHARE_GROUP_STATE: self.read,
            ApiKey.WRITE_SHARE_GROUP_STATE: self.write,
            ApiKey.DELETE_SHARE_GROUP_STATE: self.delete,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: self.summary,
        }

    # -- pruning ----------------------------------------------------------------------------

    def prune(self) -> int:
        """Delete what no state needs of each __share_group_state partition led here: the
        records before every share-partition's latest snapshot (Kafka's DeleteRecords on
        the topic), and the state of topics that were deleted (which would otherwise hold
        the prune point back for ever); how many partitions moved their start."""
        gone = [
            (idx, key)
            for idx, shard in self.runtime.shards().items()
            for key in shard.states
            if key.topic_id not in self.broker.image.topics
        ]
        if gone and self._cleanup is None:
            self._cleanup = asyncio.get_running_loop().create_task(self._delete_states(gone))
        moved = 0
        now = int(time.time() * 1000)
        for idx, shard in self.runtime.shards().items():
            p = self.broker.partitions.get(SHARE_STATE_TOPIC, idx)
            if p is None or not p.is_leader:
                continue
            target = min(shard.prune_offset(), p.high_watermark)
            if target <= p.log.log_start_offset:
                continue
            try:
                if not self.broker.partitions.advance_start(p, target, now):
                    continue
            except LogDirFailure:
                continue  # its directory went offline (reported where it failed)
            moved += 1
            log.info("[node %d] Pruned %s-%d up to offset %d", self.broker.node_id,
                     SHARE_STATE_TOPIC, idx, target)  # fmt: skip
        return moved

    def refresh_snapshots(self) -> None:
        """Fresh snapshots of the share-partitions whose latest one has records after it
        (every share.coordinator.cold.partition.snapshot.interval.ms), so the next prune
        is not held back by an idle share-partition's old snapshot."""
        if self._refresh is None and self.runtime.shards():
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_all())

    async def _refresh_all(self) -> None:
        try:
            for idx in list(self.runtime.shards()):
                await self.runtime.write(idx, _refresh)
        finally:
            self._refresh = None

    async def _delete_states(self, gone: list[tuple[int, ShareKey]]) -> None:
        try:
            for idx, key in gone:
                await self.runtime.write(idx, functools.partial(_delete, key))
            log.info("[node %d] Deleted the share-group state of %d partition(s) of deleted "
                     "topics", self.broker.node_id, len(gone))  # fmt: skip
        finally:
            self._cleanup = None

    # -- placement ------------------------------------------------------------------------

    def partition_of(self, key: ShareKey) -> int | None:
        t = self.broker.image.topic(SHARE_STATE_TOPIC)
        return None if t is None else partition_for_group(key.coordinator_key(), len(t.partitions))

    def ensure_topic(self) -> ErrorCode:
        """__share_group_state is made on its first use (as Kafka's coordinators make
        their topics): until it exists, the caller is told to ask again. Its records are
        deltas (ShareUpdate) on snapshots, so it is never compacted, and never expires."""
        if self.broker.image.topic(SHARE_STATE_TOPIC) is not None:
            return ErrorCode.none
        s = self.settings
        configs = {
            "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
            "segment.bytes": str(s.segment_bytes), "min.insync.replicas": str(s.min_isr),
        }  # fmt: skip
        self.broker.auto_create.create(
            [NewTopic(SHARE_STATE_TOPIC, s.partitions, s.replication_factor, configs=configs)]
        )
        return ErrorCode.coordinator_not_available

    # -- the APIs -------------------------------------------------------------------------

    async def _each(
        self,
        header: RequestHeader,
        req: Any,
        op: Callable[[ShareStateShard, ShareKey, Any], Outcome[Any]],
        ok: Callable[[Any], dict[str, Any]],
        empty: dict[str, Any],
    ) -> Any:
        """Run ``op`` for every partition of the request on its shard; ``ok`` makes a
        partition's answer from the op's answer, ``empty`` is the rest of an error's."""
        missing = self.ensure_topic()
        results = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                key = ShareKey(req.group_id, t.topic_id, p.partition)
                res: Any = missing if missing != ErrorCode.none else None
                if res is None:
                    idx = self.partition_of(key)
                    if idx is None:
                        res = ErrorCode.coordinator_not_available
                    else:
                        res = await self.runtime.write(idx, functools.partial(_bound, op, key, p))
                if isinstance(res, ErrorCode):
                    parts.append({"partition": p.partition, "error_code": res,
                                  "error_message": None, **empty})  # fmt: skip
                elif isinstance(res, Refusal):
                    parts.append({"partition": p.partition, "error_code": res.code,
                                  "error_message": res.message, **empty})  # fmt: skip
                else:
                    parts.append({"partition": p.partition, "error_code": ErrorCode.none,
                                  "error_message": None, **ok(res)})  # fmt: skip
            results.append({"topic_id": t.topic_id, "partitions": parts})
        cls = response_class(header.api_key, header.api_version)
        return build(cls, {"results": results})

    async def initialize(self, header: RequestHeader, req: Any) -> Any:
        return await self._each(
            header, req,
            lambda shard, key, p: shard.initialize(key, p.state_epoch, p.start_offset),
            lambda _: {}, {},
        )  # fmt: skip

    async def read(self, header: RequestHeader, req: Any) -> Any:
        def ok(s: ShareState | None) -> dict[str, Any]:
            if s is None:  # never written: the leader starts where the group resets to
                return {"state_epoch": 0, "start_offset": -1, "state_batches": []}
            return {"state_epoch": s.state_epoch, "start_offset": s.start_offset,
                    "state_batches": _state_batches(s)}  # fmt: skip

        return await self._each(
            header, req, lambda shard, key, p: shard.read(key, p.leader_epoch), ok,
            {"state_epoch": 0, "start_offset": -1, "state_batches": []},
        )  # fmt: skip

    async def write(self, header: RequestHeader, req: Any) -> Any:
        return await self._each(
            header, req,
            lambda shard, key, p: shard.write(key, p.state_epoch, p.leader_epoch,
                                              p.start_offset, _batches(p.state_batches)),
            lambda _: {}, {},
        )  # fmt: skip

    async def delete(self, header: RequestHeader, req: Any) -> Any:
        return await self._each(
            header, req, lambda shard, key, p: shard.delete(key), lambda _: {}, {}
        )

    async def summary(self, header: RequestHeader, req: Any) -> Any:
        def op(shard: ShareStateShard, key: ShareKey, p: Any) -> Outcome[Any]:
            return Outcome([], shard.summary(key, p.leader_epoch))

        none = {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1,
                "delivery_complete_count": -1}  # fmt: skip

        def ok(s: ShareState | None) -> dict[str, Any]:
            if s is None:
                return none
            return {"state_epoch": s.state_epoch, "leader_epoch": s.leader_epoch,
                    "start_offset": s.start_offset,
                    "delivery_complete_count": delivery_complete(s)}  # fmt: skip

        return await self._each(header, req, op, ok, none)
