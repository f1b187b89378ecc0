"""DeleteRecords waits for the replicas' log start (the low watermark); a partition
deleted, or a broker stopping, while it waits is answered NOT_LEADER_OR_FOLLOWER — it
used to read the closed log and fail the connection with a traceback (fault harness,
seed 101: a broker's controlled shutdown during a DeleteRecords)."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.errors import ErrorCode

from keeperless.broker.data_plane import DataPlane
from keeperless.metadata import _records_gen as r
from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.records import build_batch
from tests.unit.brokers import make_broker

TID = uuid.uuid4()


def test_a_partition_closed_while_delete_records_waits(tmp_path: Path) -> None:
    async def go() -> ErrorCode:
        b = make_broker(tmp_path)
        # broker 2 is in the ISR and never fetches: the low watermark cannot move
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=TID),
                r.PartitionRecord(
                    partition_id=0, topic_id=TID, replicas=(1, 2), isr=(1,), leader=1
                ),
                r.RegisterBrokerRecord(broker_id=2, broker_epoch=5, fenced=False),
            ],
            3,
        )
        p = b.partitions.get("t", 0)
        assert p is not None
        p.append(build_batch([(None, b"v", ())] * 3), p.info.leader_epoch, 1 << 20, 0)  # type: ignore[union-attr]
        p.maybe_advance_hw()
        req = DeleteRecordsRequest(
            topics=(
                DeleteRecordsTopic(
                    name="t", partitions=(DeleteRecordsPartition(partition_index=0, offset=2),)
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
        )
        task = asyncio.create_task(DataPlane(b).delete_records(RequestHeader(21, 2, 1, "t"), req))
        await asyncio.sleep(0.1)
        assert not task.done()  # waiting for broker 2's log start
        b.partitions.close()  # the broker stops
        resp = await asyncio.wait_for(task, 5)
        return ErrorCode(resp.topics[0].partitions[0].error_code)

    assert asyncio.run(go()) == ErrorCode.not_leader_or_follower


def test_a_leader_deposed_while_delete_records_waits_does_not_acknowledge(
    tmp_path: Path,
) -> None:
    """Kafka computes the low watermark only as the leader (lowWatermarkIfLeader). Here
    the leadership moves to broker 2 during the wait and broker 2 is then fenced (not
    'alive'): the old leader's own log start alone made the low watermark, and it
    acknowledged a deletion the new leader never made (campaign seed 8422: a leader paused
    and resumed acknowledged DeleteRecords, and the final log started at 0)."""

    async def go() -> tuple[ErrorCode, int]:
        b = make_broker(tmp_path)
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=TID),
                r.PartitionRecord(
                    partition_id=0, topic_id=TID, replicas=(1, 2), isr=(1, 2), leader=1
                ),
                r.RegisterBrokerRecord(broker_id=2, broker_epoch=5, fenced=False),
            ],
            3,
        )
        p = b.partitions.get("t", 0)
        assert p is not None
        p.append(build_batch([(None, b"v", ())] * 3), p.info.leader_epoch, 1 << 20, 0)  # type: ignore[union-attr]
        req = DeleteRecordsRequest(
            topics=(
                DeleteRecordsTopic(
                    name="t", partitions=(DeleteRecordsPartition(partition_index=0, offset=2),)
                ),
            ),
            timeout=datetime.timedelta(seconds=3),
        )
        p._hw = 3  # committed: broker 2 has everything
        task = asyncio.create_task(DataPlane(b).delete_records(RequestHeader(21, 2, 1, "t"), req))
        await asyncio.sleep(0.1)
        assert not task.done()  # waiting for broker 2's log start
        b.on_committed(
            [
                r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=2),
                r.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=5, fenced=1),
            ],
            5,
        )
        resp = await asyncio.wait_for(task, 5)
        part = resp.topics[0].partitions[0]
        return ErrorCode(part.error_code), part.low_watermark

    code, _low = asyncio.run(go())
    assert code == ErrorCode.not_leader_or_follower


def test_a_marker_to_a_failed_log_directory_is_a_storage_error(tmp_path: Path) -> None:
    """Found by the short fault schedule (seed 101, a disk failure under a transaction's
    end): a marker append whose directory failed raised out of the coordinator's task
    ('Task exception was never retrieved'); it is that partition's KAFKA_STORAGE_ERROR."""
    from keeperless.broker.txn_markers import TxnMarkerWriter
    from keeperless.storage.dir_failure import LogDirFailure

    async def go() -> dict[tuple[str, int], ErrorCode]:
        b = make_broker(tmp_path)
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=TID),
                r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1,), isr=(1,), leader=1),
            ],
            2,
        )
        p = b.partitions.get("t", 0)
        assert p is not None

        def failed(*_a: object, **_k: object) -> None:
            raise LogDirFailure(28, "log directory /d failed")

        p.append_marker = failed  # type: ignore[method-assign]
        return await TxnMarkerWriter(b).write(7, 0, True, 0, [("t", 0)])

    assert asyncio.run(go()) == {("t", 0): ErrorCode.kafka_storage_error}


def test_delete_records_into_a_failed_log_directory_is_a_storage_error(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The checkpoint of the new log start fails with its directory: that partition's
    answer is KAFKA_STORAGE_ERROR (as Kafka's), not a failed connection."""
    from keeperless.broker import partition_manager
    from keeperless.storage.dir_failure import log_dir_failed

    def failed(path: Path, _entries: object) -> None:
        raise log_dir_failed(path.parent, OSError(5, "Input/output error"))

    async def go() -> ErrorCode:
        b = make_broker(tmp_path)
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=TID),
                r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1,), isr=(1,), leader=1),
            ],
            2,
        )
        p = b.partitions.get("t", 0)
        assert p is not None
        assert p.info is not None
        p.append(build_batch([(None, b"v", ())] * 3), p.info.leader_epoch, 1 << 20, 0)
        p.maybe_advance_hw()
        monkeypatch.setattr(partition_manager, "write_offset_checkpoint", failed)
        req = DeleteRecordsRequest(
            topics=(
                DeleteRecordsTopic(
                    name="t", partitions=(DeleteRecordsPartition(partition_index=0, offset=2),)
                ),
            ),
            timeout=datetime.timedelta(seconds=3),
        )
        resp = await DataPlane(b).delete_records(RequestHeader(21, 2, 1, "t"), req)
        b.close()
        return ErrorCode(resp.topics[0].partitions[0].error_code)

    assert asyncio.run(go()) == ErrorCode.kafka_storage_error


def test_a_share_state_prune_into_a_failed_log_directory_moves_nothing(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The share coordinator's periodic prune of __share_group_state moves a log start
    too: a failed directory there skips that partition instead of raising out of the
    timer."""
    from types import SimpleNamespace as NS

    from keeperless.broker import partition_manager
    from keeperless.share.coordinator import (
        SHARE_STATE_TOPIC,
        ShareCoordinator,
        ShareCoordinatorSettings,
    )
    from keeperless.storage.dir_failure import log_dir_failed

    def failed(path: Path, _entries: object) -> None:
        raise log_dir_failed(path.parent, OSError(5, "Input/output error"))

    async def go() -> int:
        b = make_broker(tmp_path)
        b.on_committed(
            [
                r.TopicRecord(name=SHARE_STATE_TOPIC, topic_id=TID),
                r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1,), isr=(1,), leader=1),
            ],
            2,
        )
        p = b.partitions.get(SHARE_STATE_TOPIC, 0)
        assert p is not None
        assert p.info is not None
        p.append(build_batch([(b"k", b"v", ())] * 3), p.info.leader_epoch, 1 << 20, 0)
        p.maybe_advance_hw()
        coordinator = ShareCoordinator(b, ShareCoordinatorSettings())
        shard = NS(states={}, prune_offset=lambda: 2)
        coordinator.runtime = NS(shards=lambda: {0: shard})  # type: ignore[assignment]
        monkeypatch.setattr(partition_manager, "write_offset_checkpoint", failed)
        moved = coordinator.prune()
        b.close()
        return moved

    assert asyncio.run(go()) == 0
