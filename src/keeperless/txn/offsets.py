"""TxnOffsetCommit (API 28): offsets committed inside a transaction are written to
`__consumer_offsets` as a transactional batch of the producer and stay pending - not
fetched, not applied - until the transaction's marker reaches that partition: COMMIT
applies them, ABORT drops them (Kafka's GroupMetadataManager)."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.txn_verify import Verify
from keeperless.coordinator.group_shard import offset_key, offset_value
from keeperless.coordinator.outcome import Record
from keeperless.group.coordinator import GroupCoordinator, partition_for_group
from keeperless.group.offsets import GroupOffsets
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["TxnOffsets"]

OFFSETS_TOPIC = "__consumer_offsets"


class TxnOffsets:
    def __init__(self, coordinator: GroupCoordinator, offsets: GroupOffsets) -> None:
        self.gc = coordinator
        self.offsets = offsets
        # the transaction coordinator's verification (KIP-890): the group's offsets
        # partition must be in the producer's ongoing transaction (AddOffsetsToTxn)
        self.verify: Verify | None = None

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit}

    def on_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker reached a __consumer_offsets partition led here."""
        self.gc.end_pending(partition, producer_id, commit)

    async def _verified(self, header: RequestHeader, req: Any) -> ErrorCode | None:
        """None if the transaction coordinator has this group's offsets partition in
        the producer's ongoing transaction; else the error Kafka answers."""
        assert self.verify is not None
        t = self.gc.broker.image.topic(OFFSETS_TOPIC)
        if t is None:
            return ErrorCode.coordinator_not_available
        key = (OFFSETS_TOPIC, partition_for_group(req.group_id, len(t.partitions)))
        # v5 (a TV2 producer sends no AddOffsetsToTxn): the offsets partition is added
        # to its transaction here, KIP-890 part 2
        answers = await self.verify(
            req.transactional_id, req.producer_id, req.producer_epoch, [key],
            header.api_version >= 5,
        )  # fmt: skip
        err = answers.get(key, ErrorCode.coordinator_not_available)
        if err == ErrorCode.none:
            return None
        if err == ErrorCode.transaction_abortable and header.api_version < 4:
            return ErrorCode.invalid_txn_state  # clients before v4 do not know it
        return err

    async def txn_offset_commit(self, header: RequestHeader, req: Any) -> Any:
        gid = req.group_id
        err = self.gc._group_error(gid)
        if err is None and self.verify is not None:
            err = await self._verified(header, req)
        # v3+ carry the member (KIP-447), checked after the wait and with nothing
        # between the check and the append: a rebalance meanwhile fences the commit
        err = (
            err
            or self.gc._group_error(gid)
            or self.offsets.member_error(
                gid,
                getattr(req, "member_id", ""),
                getattr(req, "generation_id", -1),
                getattr(req, "group_instance_id", None),
                transactional=True,
            )
        )
        now = int(time.time() * 1000)
        records: list[Record] = []
        for t in req.topics:
            for p in t.partitions:
                epoch = getattr(p, "committed_leader_epoch", -1)
                records.append(
                    (
                        offset_key(gid, t.name, p.partition_index),
                        offset_value(p.committed_offset, epoch, p.committed_metadata, now),
                    )
                )
        if err is None and records:
            # a transactional batch of the producer: the shard holds its offsets pending
            # from the moment they are appended (the transaction's marker may follow them
            # before they are acknowledged, an abort on timeout), each with its record's
            # offset (a later plain commit wins over it)
            err = await self.gc.store(gid, records, (req.producer_id, req.producer_epoch))
        code = err or ErrorCode.none
        return build(
            response_class(ApiKey.TXN_OFFSET_COMMIT, header.api_version),
            {
                "throttle_time": 0,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {"partition_index": p.partition_index, "error_code": code}
                            for p in t.partitions
                        ],
                    }
                    for t in req.topics
                ],
            },
        )
