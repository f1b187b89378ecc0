"""Who serves a consumer's Fetch, and what it is told: the leader, or any replica for
Fetch v11+ (KIP-392, the follower up to its own high watermark); a leader with
replica.selector.class names a replica in the consumer's rack (preferred_read_replica);
an offset between the high watermark and the log end is not out of range."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.data_plane import DataPlane
from keeperless.metadata import _records_gen as r
from keeperless.protocol.fetch_response import FetchPartition
from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.records import build_batch
from tests.unit.brokers import make_broker

TID = uuid.uuid4()


def _broker(tmp_path: Path, leader: int, rack_aware: bool = False) -> Broker:
    b = make_broker(tmp_path)
    if rack_aware:
        b.settings = replace(b.settings, rack_aware_reads=True)
    regs = [
        r.RegisterBrokerRecord(broker_id=i, broker_epoch=i, incarnation_id=uuid.uuid4(),
                               rack=f"rack-{i}", fenced=False)
        for i in (1, 2, 3)
    ]  # fmt: skip
    b.on_committed(
        [
            *regs,
            r.TopicRecord(name="t", topic_id=TID),
            r.PartitionRecord(
                partition_id=0,
                topic_id=TID,
                replicas=(1, 2, 3),
                isr=(1, 2, 3),
                leader=leader,
                leader_epoch=4,
            ),
        ],
        10,
    )
    return b


def _batches(n: int) -> bytes:
    return b"".join(
        build_batch([(b"k", b"v%d" % i, ())], base_offset=i, leader_epoch=4) for i in range(n)
    )


def _req(offset: int, rack: str = "", epoch: int = -1) -> Any:
    part = SimpleNamespace(
        partition=0, current_leader_epoch=epoch, fetch_offset=offset, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20,
    )  # fmt: skip
    return SimpleNamespace(
        replica_id=-1, rack_id=rack, topics=[SimpleNamespace(topic="t", partitions=[part])]
    )


def _fetch(b: Broker, version: int, req: Any) -> FetchPartition:
    topics, _total, _errors, _leaders, _throttled = DataPlane(b)._fetch_once(
        RequestHeader(1, version, 1, "c"), req, version, 1 << 20, True
    )
    return topics[0][1][0]


def _length(p: FetchPartition) -> int:
    rec = p.records
    if rec is None:
        return 0
    return len(rec) if isinstance(rec, bytes) else rec.length


def test_a_follower_serves_consumers_fetch_v11_up_to_its_high_watermark(tmp_path: Path) -> None:
    b = _broker(tmp_path, leader=2)
    p = b.partitions.get("t", 0)
    assert p is not None
    p.append_replica(_batches(5), 0)
    p.follower_hw(3)
    got = _fetch(b, 12, _req(0))
    assert got.error_code == 0
    assert got.high_watermark == 3
    assert _length(got) == len(_batches(3))  # not past the follower's high watermark
    # Fetch v10 has no client metadata: only the leader serves it (as Kafka)
    assert _fetch(b, 10, _req(0)).error_code == ErrorCode.not_leader_or_follower
    # a consumer that saw the leader's newer high watermark waits, it is not reset
    ahead = _fetch(b, 12, _req(4))
    assert ahead.error_code == 0
    assert _length(ahead) == 0
    assert _fetch(b, 12, _req(6)).error_code == ErrorCode.offset_out_of_range
    # a reader with an older leader epoch is fenced, a newer one is not known yet
    assert _fetch(b, 12, _req(0, epoch=3)).error_code == ErrorCode.fenced_leader_epoch
    assert _fetch(b, 12, _req(0, epoch=5)).error_code == ErrorCode.unknown_leader_epoch
    b.close()


def test_the_leader_names_an_in_sync_replica_in_the_consumers_rack(tmp_path: Path) -> None:
    b = _broker(tmp_path, leader=1, rack_aware=True)
    p = b.partitions.get("t", 0)
    assert p is not None
    p.append(build_batch([(b"k", b"v", ())] * 4), 4, 1 << 20, 0)
    p.record_follower_fetch(2, 4, 0)
    p.record_follower_fetch(3, 2, 0)
    assert p.high_watermark == 2
    sent = _fetch(b, 12, _req(0, rack="rack-2"))
    assert sent.preferred_read_replica == 2
    assert _length(sent) == 0
    # replica 3 has not got offset 3 yet: the leader serves it
    here = _fetch(b, 12, _req(3, rack="rack-3"))
    assert here.preferred_read_replica == -1
    assert _fetch(b, 12, _req(1, rack="rack-3")).preferred_read_replica == 3
    # the consumer is in the leader's rack, or in none, or before v11: no redirection
    assert _fetch(b, 12, _req(0, rack="rack-1")).preferred_read_replica == -1
    assert _fetch(b, 12, _req(0)).preferred_read_replica == -1
    assert _fetch(b, 10, _req(0, rack="rack-2")).preferred_read_replica == -1
    # a replica out of the ISR is not named
    b.on_committed([r.PartitionChangeRecord(partition_id=0, topic_id=TID, isr=(1, 3))], 11)
    assert _fetch(b, 12, _req(0, rack="rack-2")).preferred_read_replica == -1
    b.close()


def test_a_leader_without_a_replica_selector_serves_every_rack(tmp_path: Path) -> None:
    b = _broker(tmp_path, leader=1)
    p = b.partitions.get("t", 0)
    assert p is not None
    p.append(build_batch([(b"k", b"v", ())] * 4), 4, 1 << 20, 0)
    p.record_follower_fetch(2, 4, 0)
    p.record_follower_fetch(3, 4, 0)
    got = _fetch(b, 12, _req(0, rack="rack-2"))
    assert got.preferred_read_replica == -1
    assert _length(got) > 0
    b.close()


def test_a_read_that_gets_an_io_error_fails_its_log_directory(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """As Kafka handles an IOException reading a log: the fetch is answered
    KAFKA_STORAGE_ERROR and the directory is reported failed (taken offline), not an
    unknown server error while the directory keeps being served."""
    import errno
    import os

    from keeperless.storage import dir_failure
    from keeperless.storage import log as storage_log

    b = _broker(tmp_path, leader=2)
    p = b.partitions.get("t", 0)
    assert p is not None
    p.append_replica(_batches(5), 0)
    p.follower_hw(5)
    failed: list[Path] = []
    dir_failure.set_failure_handler(lambda d, _e: failed.append(d))

    def eio(*_a: Any) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(storage_log.os, "pread", eio)
    try:
        got = _fetch(b, 12, _req(0))
    finally:
        dir_failure.set_failure_handler(None)
        monkeypatch.undo()
    assert got.error_code == ErrorCode.kafka_storage_error
    assert failed == [p.directory]
    b.close()
