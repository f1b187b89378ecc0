"""The partition leaders' client of the share coordinator (Kafka's DefaultStatePersister):
a leader reads a share-partition's state when it starts serving it and writes it after
every change of a record's delivery state, over the broker's network client, to whichever
broker leads the share-partition's ``__share_group_state`` partition (this one too)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.coordinator.share_records import ShareKey, StateBatch
from keeperless.protocol.apis import ApiKey
from keeperless.share.coordinator import SHARE_STATE_TOPIC, ShareCoordinator

__all__ = ["ReadResult", "SharePersister"]

log = logging.getLogger(__name__)

# the coordinator is moving, loading or its topic is being made: ask again
_RETRIABLE = frozenset({
    ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out,
})  # fmt: skip


_VERSION = 0  # of APIs 83-86, as Kafka 4.1's brokers send them
_SUMMARY_VERSION = 1  # ReadShareGroupStateSummary v1: the delivery-complete count (KIP-1226)


@dataclass(frozen=True)
class ReadResult:
    error: ErrorCode
    message: str | None = None
    state_epoch: int = 0
    start_offset: int = -1  # -1: never written
    batches: list[StateBatch] = field(default_factory=list)
    leader_epoch: int = -1  # (a summary's)
    delivery_complete: int = -1  # (a summary's: offsets past the start delivered; -1 unknown)


class SharePersister:
    def __init__(self, broker: Broker, coordinator: ShareCoordinator, timeout_s: float) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.timeout_s = timeout_s

    async def _call(
        self, api: ApiKey, key: ShareKey, fields: dict[str, Any], version: int = _VERSION
    ) -> tuple[ErrorCode, str | None, Any]:
        """One partition's request to its coordinator, asked again while the coordinator
        moves or loads, up to the timeout: (error, message, the partition's answer)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        delay = 0.05
        err, message = ErrorCode.coordinator_not_available, "no share coordinator answered"
        body = {"group_id": key.group_id, "topics": [
            {"topic_id": key.topic_id, "partitions": [{"partition": key.partition, **fields}]}
        ]}  # fmt: skip
        while True:
            dest = self._coordinator(key)
            if dest is not None:
                try:
                    resp = await self.broker.peers.request(
                        dest, api, version, body, timeout_s=max(0.1, deadline - loop.time()),
                        lane="share",
                    )  # fmt: skip
                    p = resp.results[0].partitions[0]
                    err, message = ErrorCode(p.error_code), p.error_message
                    if err not in _RETRIABLE:
                        return err, message, p
                except OSError as e:  # TimeoutError too
                    err, message = ErrorCode.coordinator_not_available, str(e)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return err, message, None
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)

    def _coordinator(self, key: ShareKey) -> tuple[str, int] | None:
        if self.coordinator.ensure_topic() != ErrorCode.none:
            return None
        idx = self.coordinator.partition_of(key)
        t = self.broker.image.topic(SHARE_STATE_TOPIC)
        if idx is None or t is None:
            return None
        reg = self.broker.image.brokers.get(t.partitions[idx].leader)
        if reg is None or reg.fenced:
            return None
        return reg.endpoint(self.broker.inter_broker_listener)

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ReadResult:
        key = ShareKey(group_id, topic_id, partition)
        err, message, p = await self._call(
            ApiKey.READ_SHARE_GROUP_STATE, key, {"leader_epoch": leader_epoch}
        )
        if err != ErrorCode.none:
            return ReadResult(err, message)
        batches = [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in p.state_batches
        ]
        return ReadResult(err, None, p.state_epoch, p.start_offset, batches)

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ReadResult:
        """ReadShareGroupStateSummary, as an admin asks (no leader epoch): the start
        offset and state epoch (start -1: no state), without the batches."""
        key = ShareKey(group_id, topic_id, partition)
        err, message, p = await self._call(
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, key, {"leader_epoch": -1}, _SUMMARY_VERSION
        )
        if err != ErrorCode.none:
            return ReadResult(err, message)
        return ReadResult(err, None, p.state_epoch, p.start_offset, leader_epoch=p.leader_epoch,
                          delivery_complete=p.delivery_complete_count)  # fmt: skip

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start: int
    ) -> tuple[ErrorCode, str | None]:
        """A fresh state at ``start`` under ``state_epoch`` (an offset reset)."""
        key = ShareKey(group_id, topic_id, partition)
        fields = {"state_epoch": state_epoch, "start_offset": start}
        err, message, _ = await self._call(ApiKey.INITIALIZE_SHARE_GROUP_STATE, key, fields)
        return err, message

    async def delete(
        self, group_id: str, topic_id: uuid.UUID, partition: int
    ) -> tuple[ErrorCode, str | None]:
        key = ShareKey(group_id, topic_id, partition)
        err, message, _ = await self._call(ApiKey.DELETE_SHARE_GROUP_STATE, key, {})
        return err, message

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: list[StateBatch],
    ) -> tuple[ErrorCode, str | None]:
        key = ShareKey(group_id, topic_id, partition)
        fields = {
            "state_epoch": state_epoch, "leader_epoch": leader_epoch,
            "start_offset": start_offset,
            "state_batches": [
                {"first_offset": b.first_offset, "last_offset": b.last_offset,
                 "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                for b in batches
            ],
        }  # fmt: skip
        err, message, _ = await self._call(ApiKey.WRITE_SHARE_GROUP_STATE, key, fields)
        return err, message
