"""The replica fetchers' lifecycle: nothing is left pending when a broker stops (the
fault harness saw "Task was destroyed but it is pending!" for a fetcher during a roll)."""

from __future__ import annotations

import asyncio
import gc
import uuid
from pathlib import Path
from typing import Any

from keeperless.broker.broker import Broker
from keeperless.broker.replication import ReplicaManager, ReplicationSettings
from keeperless.metadata import _records_gen as r
from tests.unit.brokers import make_broker


def _broker(tmp_path: Path) -> Broker:
    return make_broker(tmp_path)


def test_no_fetcher_outlives_the_stop(tmp_path: Path) -> None:
    async def go() -> None:
        b = _broker(tmp_path)
        rm = ReplicaManager(b, ReplicationSettings())
        rm.start()
        tid = uuid.uuid4()
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=tid),
                r.PartitionRecord(
                    partition_id=0, topic_id=tid, replicas=(1, 2), isr=(1, 2), leader=2
                ),
                r.PartitionRecord(
                    partition_id=1, topic_id=tid, replicas=(1, 3), isr=(1, 3), leader=3
                ),
            ],
            3,
        )
        assert set(rm.fetchers) == {2, 3}
        retired = rm.fetchers[3].task
        # partition 1 moves to this broker: the fetcher of leader 3 is retired
        b.on_committed([r.PartitionChangeRecord(partition_id=1, topic_id=tid, leader=1)], 4)
        assert set(rm.fetchers) == {2}
        tasks = rm.stop()
        assert retired in tasks or retired.done()
        # metadata that arrives while the node stops starts no fetcher
        b.on_committed([r.PartitionChangeRecord(partition_id=1, topic_id=tid, leader=3)], 5)
        assert rm.fetchers == {}
        await asyncio.gather(*tasks, return_exceptions=True)
        assert all(t.done() for t in tasks)
        b.close()

    asyncio.run(go())
    gc.collect()


def test_the_high_watermark_waits_for_a_replica_whose_isr_expansion_is_in_flight(
    tmp_path: Path,
) -> None:
    """Kafka's maximal ISR: once the leader has asked to add replica 3 to the ISR, the
    controller may commit that and elect 3 at any moment, so nothing 3 lacks may be
    acknowledged. Counting only the committed ISR, a leader acknowledged a write only 2
    had; the controller then elected 3 and the write was lost (fault harness, seed 8011)."""
    from keeperless.protocol.records import build_batch

    async def go() -> None:
        b = _broker(tmp_path)
        rm = ReplicaManager(b, ReplicationSettings())
        tid = uuid.uuid4()
        b.on_committed(
            [
                *_registered(2, 3),
                r.TopicRecord(name="t", topic_id=tid),
                r.PartitionRecord(
                    partition_id=0, topic_id=tid, replicas=(1, 2, 3), isr=(1, 2), leader=1
                ),
            ],
            5,
        )
        p = b.partitions.get("t", 0)
        assert p is not None
        assert p.info is not None
        p.append(build_batch([(None, b"a", ())]), p.info.leader_epoch, 2**20, 0)
        p.record_follower_fetch(2, 1, 0)
        p.record_follower_fetch(3, 1, 0)
        assert p.high_watermark == 1
        rm.maybe_expand_isr(p, 3)  # 3 caught up: asked to join the ISR
        assert p.pending_isr == (1, 2, 3)
        p.append(build_batch([(None, b"b", ())]), p.info.leader_epoch, 2**20, 0)
        p.record_follower_fetch(2, 2, 0)
        assert p.high_watermark == 1, "acknowledged what replica 3 does not have"
        p.record_follower_fetch(3, 2, 0)
        assert p.high_watermark == 2
        b.close()

    asyncio.run(go())


def _registered(*ids: int, fenced: bool = False) -> list[Any]:
    return [
        r.RegisterBrokerRecord(broker_id=i, incarnation_id=uuid.UUID(int=i), broker_epoch=i,
                               fenced=fenced)
        for i in ids
    ]  # fmt: skip


def test_a_replica_fenced_or_shutting_down_is_not_proposed_into_the_isr(tmp_path: Path) -> None:
    """As Kafka's leaders (KIP-841): the controller refuses such a replica, and every
    leader sharing partitions with a broker in controlled shutdown logged the refusals."""
    from keeperless.protocol.records import build_batch

    async def go() -> None:
        b = _broker(tmp_path)
        rm = ReplicaManager(b, ReplicationSettings())
        tid = uuid.uuid4()
        b.on_committed(
            [
                *_registered(2),
                *_registered(3, fenced=True),
                r.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=2,
                                                 in_controlled_shutdown=1),
                r.TopicRecord(name="t", topic_id=tid),
                r.PartitionRecord(
                    partition_id=0, topic_id=tid, replicas=(1, 2, 3), isr=(1,), leader=1
                ),
            ],
            5,
        )  # fmt: skip
        p = b.partitions.get("t", 0)
        assert p is not None
        assert p.info is not None
        p.append(build_batch([(None, b"a", ())]), p.info.leader_epoch, 2**20, 0)
        for replica in (2, 3):
            p.record_follower_fetch(replica, 1, 0)
            rm.maybe_expand_isr(p, replica)
            assert p.pending_isr is None, f"proposed {replica}"
        b.on_committed([r.UnfenceBrokerRecord(id=3, epoch=3)], 6)  # 3 is back
        rm.maybe_expand_isr(p, 3)
        assert p.pending_isr == (1, 3)
        b.close()

    asyncio.run(go())


def test_a_fetch_that_ends_inside_a_batch_appends_the_whole_ones(tmp_path: Path) -> None:
    """A follower more than replica.fetch.max.bytes behind gets answers cut inside a
    batch. Dropping the cut batch resized a buffer the batch iterator still viewed
    (BufferError), which killed the replica fetcher silently: the broker never rejoined
    an ISR again (issue 23, item 4: a restarted broker 37-55 partitions under-replicated
    for over 100 s, no log line anywhere)."""
    from keeperless.protocol.records import build_batch, iter_batches, patch_offsets

    b = _broker(tmp_path)
    tid = uuid.uuid4()
    b.on_committed(
        [
            r.TopicRecord(name="t", topic_id=tid),
            r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1, 2), isr=(2,), leader=2),
        ],
        3,
    )
    p = b.partitions.get("t", 0)
    assert p is not None
    leader_log = bytearray()
    for i in range(5):
        batch = bytearray(build_batch([(None, b"v%d" % i * 300, ())] * 3))
        patch_offsets(batch, 0, 3 * i, 0)
        leader_log += batch
    sizes = [h.size for _, h in iter_batches(leader_log)]
    cut = sizes[0] + sizes[1] + sizes[2] // 2  # an answer of max bytes ends in batch 3
    assert p.append_replica(bytes(leader_log[:cut]), 0) == 2
    assert p.log.log_end_offset == 6
    # the next fetch, from offset 6, gets the rest
    assert p.append_replica(bytes(leader_log[sizes[0] + sizes[1] :]), 0) == 3
    assert p.log.log_end_offset == 15
    # exactly the leader's bytes, nothing of the cut batch (appending it with the whole
    # ones wrote a torn batch into the middle of the follower's log)
    (segment,) = sorted((tmp_path / "t-0").glob("*.log"))
    assert segment.read_bytes() == bytes(leader_log)
    b.close()


def test_an_empty_replica_starting_inside_a_batch_takes_the_batch_whole(tmp_path: Path) -> None:
    """Found by the fault harness: DeleteRecords moved the leader's log start to 13,
    inside a batch of offsets 10-15; a replica added then (a reassignment) reset its
    empty log to 13 and fetched from there, got the batch 10-15 and skipped it as below
    its end, appending 16 on: offsets 13-15 were missing, and lost once it led. As Kafka,
    an empty replica starts its log at the batch's first offset and takes it whole."""
    from keeperless.protocol.records import build_batch, patch_offsets

    b = _broker(tmp_path)
    tid = uuid.uuid4()
    b.on_committed(
        [
            r.TopicRecord(name="t", topic_id=tid),
            r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1, 2), isr=(2,), leader=2),
        ],
        3,
    )
    p = b.partitions.get("t", 0)
    assert p is not None
    p.reset_to(13, 0)  # the leader's log start, from an OFFSET_OUT_OF_RANGE answer
    leader = bytearray()
    for base in (10, 16):
        batch = bytearray(build_batch([(None, b"v", ())] * 6))
        patch_offsets(batch, 0, base, 0)
        leader += batch
    assert p.append_replica(bytes(leader), 0) == 2
    assert p.log.log_end_offset == 22
    (segment,) = sorted((tmp_path / "t-0").glob("*.log"))
    assert segment.read_bytes() == bytes(leader)  # offsets 10-21, nothing skipped
    # a batch over the end of a replica that holds records is refused, not skipped
    from keeperless.broker.partitions import ReplicationError

    again = bytearray(build_batch([(None, b"w", ())] * 4))
    patch_offsets(again, 0, 20, 0)
    import pytest

    with pytest.raises(ReplicationError, match="overlaps the end"):
        p.append_replica(bytes(again), 0)
    b.close()


def test_a_produce_waiting_on_a_partition_reassigned_away_is_told_not_leader(
    tmp_path: Path,
) -> None:
    """Found by the fault harness: a reassignment removed this leader's replica between
    an acks=all append and its wait; the wait read the closed log (IndexError, the
    client's connection closed with a traceback). It is NOT_LEADER_OR_FOLLOWER now."""
    import pytest

    from keeperless.broker.partitions import NotLeaderError

    b = _broker(tmp_path)
    tid = uuid.uuid4()
    b.on_committed(
        [
            r.TopicRecord(name="t", topic_id=tid),
            r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1, 2), isr=(1, 2), leader=1),
        ],
        3,
    )
    p = b.partitions.get("t", 0)
    assert p is not None
    assert p.info is not None
    epoch = p.info.leader_epoch
    assert b.partitions.remove("t", 0, tid, "reassigned away from this broker")
    with pytest.raises(NotLeaderError):
        asyncio.run(p.wait_for_hw(5, 1.0, epoch))
    b.close()


def _failing_checkpoints(monkeypatch: Any) -> None:
    """Every checkpoint write fails as a replaced disk's would (the directory is gone)."""
    from keeperless.broker import partition_manager
    from keeperless.storage.dir_failure import log_dir_failed

    def failed(path: Path, _entries: object) -> None:
        raise log_dir_failed(path.parent, FileNotFoundError(2, "No such file or directory"))

    monkeypatch.setattr(partition_manager, "write_offset_checkpoint", failed)


def test_a_log_start_moved_into_a_failed_directory_stops_that_partition_only(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Found by the short fault schedule (seed 203, a disk replaced under a follower):
    the leader's log start moved (DeleteRecords), the follower's checkpoint of it failed
    with its directory, and LogDirFailure escaped the fetch handler: a traceback, and the
    fetch's other partitions were never applied. Like a failed append, it stops there."""
    from types import SimpleNamespace as NS

    from kio.schema.errors import ErrorCode

    from keeperless.protocol.records import build_batch

    async def go() -> None:
        b = _broker(tmp_path)
        rm = ReplicaManager(b, ReplicationSettings())
        rm.start()
        tid = uuid.uuid4()
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=tid),
                *(
                    r.PartitionRecord(
                        partition_id=i, topic_id=tid, replicas=(1, 2), isr=(1, 2), leader=2
                    )
                    for i in (0, 1)
                ),
            ],
            3,
        )
        for i in (0, 1):
            p = b.partitions.get("t", i)
            assert p is not None
            p.append_replica(build_batch([(None, b"v", ())] * 3), 0)
        _failing_checkpoints(monkeypatch)

        def answer(i: int) -> NS:
            return NS(
                partition_index=i, error_code=ErrorCode.none, records=None,
                diverging_epoch=NS(epoch=-1, end_offset=-1), high_watermark=3,
                log_start_offset=2 if i == 0 else 0,
            )  # fmt: skip

        resp = NS(responses=[NS(topic="t", partitions=[answer(0), answer(1)])])
        rm.fetchers[2]._handle(resp)  # raised LogDirFailure
        p1 = b.partitions.get("t", 1)
        assert p1 is not None
        assert p1.high_watermark == 3
        await asyncio.gather(*rm.stop(), return_exceptions=True)
        b.close()

    asyncio.run(go())
    gc.collect()


def test_nothing_more_is_written_to_a_directory_that_failed_in_the_same_fetch(
    tmp_path: Path,
) -> None:
    """A directory failing under one partition is closed a moment later (call_soon):
    the fetch's other partitions in that directory are not written meanwhile (found by
    a fresh-eyes review)."""
    from types import SimpleNamespace as NS

    from kio.schema.errors import ErrorCode

    from keeperless.protocol.records import build_batch

    async def go() -> int:
        b = _broker(tmp_path)
        rm = ReplicaManager(b, ReplicationSettings())
        rm.start()
        tid = uuid.uuid4()
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=tid),
                r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1, 2), isr=(1, 2),
                                  leader=2),
            ],
            3,
        )  # fmt: skip
        ld = b.partitions.dir_of[("t", 0)]
        ld.online = False  # failed, not closed yet
        answer = NS(
            partition_index=0, error_code=ErrorCode.none,
            records=build_batch([(None, b"v", ())] * 3),
            diverging_epoch=NS(epoch=-1, end_offset=-1), high_watermark=3, log_start_offset=0,
        )  # fmt: skip
        rm.fetchers[2]._handle(NS(responses=[NS(topic="t", partitions=[answer])]))
        p = b.partitions.get("t", 0)
        assert p is not None
        end = p.log.log_end_offset
        ld.online = True
        await asyncio.gather(*rm.stop(), return_exceptions=True)
        b.close()
        return end

    assert asyncio.run(go()) == 0
    gc.collect()
