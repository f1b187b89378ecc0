"""acks=all as Kafka answers it: the in-sync replicas have the records and there are
still min.insync.replicas of them (NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise)."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from keeperless.broker.broker import Broker
from keeperless.broker.data_plane import DataPlane
from keeperless.metadata import _records_gen as r
from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.records import build_batch
from tests.unit.brokers import make_broker

TID = uuid.uuid4()


def _broker(tmp_path: Path) -> Broker:
    b = make_broker(tmp_path, static={"min.insync.replicas": "2"})
    b.on_committed(
        [
            r.TopicRecord(name="t", topic_id=TID),
            r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1, 2), isr=(1, 2), leader=1),
        ],
        3,
    )
    return b


def _produce() -> Any:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name="t",
                partition_data=(
                    PartitionProduceData(index=0, records=build_batch([(None, b"v", ())])),
                ),
            ),
        ),
    )


def test_an_isr_that_shrank_below_min_insync_replicas_is_not_an_acknowledgement(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        b = _broker(tmp_path)
        plane = DataPlane(b)
        task = asyncio.create_task(plane.produce(RequestHeader(0, 9, 1, "t"), _produce()))
        await asyncio.sleep(0.05)
        assert not task.done()  # waiting for replica 2
        # replica 2 falls out of the ISR: the leader alone has the record
        b.on_committed([r.PartitionChangeRecord(partition_id=0, topic_id=TID, isr=(1,))], 4)
        resp = await asyncio.wait_for(task, 5)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.not_enough_replicas_after_append
        b.close()

    asyncio.run(go())


def test_acks_all_is_answered_once_the_isr_has_the_records(tmp_path: Path) -> None:
    async def go() -> None:
        b = _broker(tmp_path)
        plane = DataPlane(b)
        task = asyncio.create_task(plane.produce(RequestHeader(0, 9, 1, "t"), _produce()))
        await asyncio.sleep(0.05)
        p = b.partitions.get("t", 0)
        assert p is not None
        p.record_follower_fetch(2, 1, 0)
        resp = await asyncio.wait_for(task, 5)
        part = resp.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)
        b.close()

    asyncio.run(go())


def test_a_write_is_not_acknowledged_by_a_follower_high_watermark(tmp_path: Path) -> None:
    """The leader appends, then loses the leadership before its wait for the ISR begins
    (a controlled shutdown); as a follower it truncates the write away, fetches the new
    leader's record at that offset, and its high watermark passes it: the write must be
    answered NOT_LEADER_OR_FOLLOWER, not acknowledged (seed 778: an acknowledged write
    lost; the wait's fast path only compared offsets)."""

    async def go() -> None:
        b = _broker(tmp_path)
        plane = DataPlane(b)
        task = asyncio.create_task(plane.produce(RequestHeader(0, 9, 1, "t"), _produce()))
        await asyncio.sleep(0)  # appended at offset 0; the wait is not running yet
        p = b.partitions.get("t", 0)
        assert p is not None
        assert p.log.log_end_offset == 1
        b.on_committed(
            [r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=2, isr=(2, 1))], 4
        )
        p.truncate_to(0)
        p.append_replica(build_batch([(None, b"other", ())], leader_epoch=1), 0)
        p.follower_hw(1)
        assert p.high_watermark == 1
        resp = await asyncio.wait_for(task, 5)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.not_leader_or_follower
        b.close()

    asyncio.run(go())


def test_a_write_waiting_when_the_broker_stops_is_answered_not_leader(tmp_path: Path) -> None:
    """Seed 4406: a broker stopping (no controller to hand its leaderships to) closed
    its logs under an acks=all write waiting for the ISR, which then read the closed log
    (IndexError) instead of being answered."""

    async def go() -> None:
        b = _broker(tmp_path)
        plane = DataPlane(b)
        task = asyncio.create_task(plane.produce(RequestHeader(0, 9, 1, "t"), _produce()))
        await asyncio.sleep(0.05)
        assert not task.done()  # waiting for replica 2
        p = b.partitions.get("t", 0)
        assert p is not None
        b.close()
        resp = await asyncio.wait_for(task, 5)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.not_leader_or_follower
        assert p.high_watermark == 0  # the closed log is not read

    asyncio.run(go())


def test_a_client_cannot_append_to_an_internal_topic(tmp_path: Path) -> None:
    """Kafka's ReplicaManager: a produce to __consumer_offsets (or the transaction and
    share-state logs) is INVALID_TOPIC_EXCEPTION unless the client id is
    __admin_client. Found by a fresh-eyes review: one record with a one-byte key there
    made the group coordinator's load raise at every metadata update."""
    from kio.schema.produce.v9.request import PartitionProduceData, TopicProduceData

    oid = uuid.uuid4()

    def req() -> Any:
        batch = build_batch([(b"x", b"v", ())])
        return ProduceRequest(
            transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10),
            topic_data=(TopicProduceData(name="__consumer_offsets", partition_data=(
                PartitionProduceData(index=0, records=batch),)),),
        )  # fmt: skip

    async def go() -> tuple[ErrorCode, ErrorCode]:
        b = make_broker(tmp_path)
        b.on_committed(
            [
                r.TopicRecord(name="__consumer_offsets", topic_id=oid),
                r.PartitionRecord(partition_id=0, topic_id=oid, replicas=(1,), isr=(1,), leader=1),
            ],
            2,
        )
        plane = DataPlane(b)
        codes = []
        for client in ("rdkafka", "__admin_client"):
            resp = await plane.produce(RequestHeader(0, 9, 1, client), req())
            codes.append(ErrorCode(resp.responses[0].partition_responses[0].error_code))
        b.close()
        return codes[0], codes[1]

    assert asyncio.run(go()) == (ErrorCode.invalid_topic_exception, ErrorCode.none)


def test_a_big_produce_lets_the_loop_run_between_its_partitions(tmp_path: Path) -> None:
    """A produce request of six 1 MB batches was appended in one step of the event
    loop (~3 ms): after each MiB of records the loop runs other work before the next
    partition is appended."""

    async def go() -> None:
        b = make_broker(tmp_path)
        b.on_committed(
            [r.TopicRecord(name="big", topic_id=TID)]
            + [
                r.PartitionRecord(partition_id=i, topic_id=TID, replicas=(1,), isr=(1,), leader=1)
                for i in range(4)
            ],
            3,
        )
        value = b"x" * (600 * 1024)
        req = ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                TopicProduceData(
                    name="big",
                    partition_data=tuple(
                        PartitionProduceData(index=i, records=build_batch([(None, value, ())]))
                        for i in range(4)
                    ),
                ),
            ),
        )
        seen: list[tuple[int, ...]] = []

        def ends() -> tuple[int, ...]:
            parts = [b.partitions.get("big", i) for i in range(4)]
            return tuple(p.log.log_end_offset for p in parts if p is not None)

        task = asyncio.create_task(DataPlane(b).produce(RequestHeader(0, 9, 1, "t"), req))
        while not task.done():
            seen.append(ends())
            await asyncio.sleep(0)
        resp = task.result()
        assert [p.error_code for p in resp.responses[0].partition_responses] == [0] * 4
        assert ends() == (1, 1, 1, 1)
        partial = [e for e in seen if 0 < sum(e) < 4]
        assert partial, f"no other work ran while the partitions were appended: {seen}"
        b.close()

    asyncio.run(go())
