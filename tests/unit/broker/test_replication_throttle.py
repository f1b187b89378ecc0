"""Replication throttles (Kafka's ReplicationQuotaManager): which replicas the topic
configs name on this broker, the rate measured as Kafka's SimpleRate, the leader that
sends a follower outside the ISR nothing while over its rate, and the follower that
leaves such a replica out of its fetches."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from keeperless.broker.broker import Broker
from keeperless.broker.data_plane import DataPlane
from keeperless.broker.quotas import Rate
from keeperless.broker.replication import ReplicaManager, ReplicationSettings, _Fetcher
from keeperless.broker.replication_quotas import parse_throttled_replicas
from keeperless.metadata import _records_gen as r
from keeperless.metadata.config_def import ConfigValueError
from keeperless.metadata.topic_configs import validate_topic_configs
from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.records import build_batch
from tests.unit.brokers import make_broker

TID = uuid.uuid4()
TOPIC, BROKER = 2, 4


def test_the_replicas_a_value_names_on_this_broker() -> None:
    assert parse_throttled_replicas("0:1,1:2,2:1", 1) == {0, 2}
    assert parse_throttled_replicas(" 0:1 , 3:1 ", 1) == {0, 3}
    assert parse_throttled_replicas("0:2", 1) == frozenset()
    assert parse_throttled_replicas("*", 1) is parse_throttled_replicas("*", 7)  # all


@pytest.mark.parametrize("bad", ["0-1", "a:b", "0:1,x", "*,0:1", "0:1:2"])
def test_a_bad_throttled_replicas_value_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ConfigValueError) as e:
        validate_topic_configs({"leader.replication.throttled.replicas": bad})
    assert f"Invalid value {bad} for configuration leader.replication.throttled.replicas" in str(
        e.value
    )
    assert "must be the literal '*' or a list of replicas" in str(e.value)


@pytest.mark.parametrize("good", ["", "*", "0:1", "0:1, 1:2"])
def test_good_throttled_replicas_values(good: str) -> None:
    validate_topic_configs({"follower.replication.throttled.replicas": good})


def test_simple_rate_is_measured_over_what_elapsed_but_at_least_one_window() -> None:
    rate = Rate(simple=True)
    assert rate.record(100.0, 1000) == (1000.0, 1.0)  # one window, not eleven
    assert rate.record(103.0, 1000)[0] == pytest.approx(2000 / 3)
    # windows older than eleven are forgotten
    assert rate.measure(111.5) == (1000 / 8.5, 8.5)
    assert rate.measure(114.5)[0] == 0.0
    # Kafka's Rate for client quotas: never less than ten windows
    assert Rate().record(100.0, 1000) == (100.0, 10.0)


def _config(rtype: int, name: str, key: str, value: str | None) -> Any:
    return r.ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=value)


def _leader(tmp_path: Path, rate: str | None, replicas: str) -> Broker:
    b = make_broker(tmp_path)
    records: list[Any] = [
        r.RegisterBrokerRecord(broker_id=i, broker_epoch=i, incarnation_id=uuid.uuid4(),
                               fenced=False)
        for i in (1, 2, 3)
    ]  # fmt: skip
    records += [
        r.TopicRecord(name="t", topic_id=TID),
        r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1, 2, 3), isr=(1, 2),
                          leader=1, leader_epoch=4),
        r.TopicRecord(name="free", topic_id=uuid.uuid4()),
    ]  # fmt: skip
    free = records[-1].topic_id
    records.append(r.PartitionRecord(partition_id=0, topic_id=free, replicas=(1, 2, 3),
                                     isr=(1, 2), leader=1, leader_epoch=4))  # fmt: skip
    records.append(_config(TOPIC, "t", "leader.replication.throttled.replicas", replicas))
    if rate is not None:
        records.append(_config(BROKER, "1", "leader.replication.throttled.rate", rate))
    b.on_committed(records, 10)
    for name in ("t", "free"):
        p = b.partitions.get(name, 0)
        assert p is not None
        p.append(build_batch([(b"k", b"v" * 100, ())] * 10), 10, 1 << 20, 0)
        p.record_follower_fetch(2, 10, 0)  # the high watermark: consumers read it all
    return b


def _fetch_records(b: Broker, replica: int, topic: str = "t") -> int:
    part = SimpleNamespace(partition=0, current_leader_epoch=4, fetch_offset=0,
                           last_fetched_epoch=-1, log_start_offset=0,
                           partition_max_bytes=1 << 20)  # fmt: skip
    req = SimpleNamespace(replica_id=replica, rack_id="",
                          topics=[SimpleNamespace(topic=topic, partitions=[part])])  # fmt: skip
    _topics, total, _errors, _leaders, _throttled = DataPlane(b)._fetch_once(
        RequestHeader(1, 12, 1, "f"), req, 12, 1 << 20, True
    )
    return total


def test_the_leader_sends_a_throttled_follower_out_of_the_isr_nothing_over_its_rate(
    tmp_path: Path,
) -> None:
    b = _leader(tmp_path, "1000", "0:1")
    quota = b.replication_quotas.leader
    assert quota.is_throttled("t", 0)
    assert not quota.is_throttled("free", 0)
    assert _fetch_records(b, 3) > 0  # within the rate
    quota.record(time.monotonic(), 5000)
    assert quota.exceeded(time.monotonic())
    assert _fetch_records(b, 3) == 0  # out of the ISR: held back
    assert _fetch_records(b, 2) > 0  # in the ISR: never held back
    assert _fetch_records(b, 3, "free") > 0  # a topic with no throttle
    assert _fetch_records(b, -1) > 0  # consumers are not replicas
    # the rate removed: nothing is held back
    b.on_committed([_config(BROKER, "1", "leader.replication.throttled.rate", None)], 11)
    assert _fetch_records(b, 3) > 0
    b.close()


def test_the_leader_throttle_names_the_leaders_broker(tmp_path: Path) -> None:
    """leader.replication.throttled.replicas names partition:broker pairs; a pair naming
    another broker does not throttle this one."""
    b = _leader(tmp_path, "1000", "0:2,0:3")
    b.replication_quotas.leader.record(time.monotonic(), 5000)
    assert _fetch_records(b, 3) > 0
    b.close()


def test_the_follower_leaves_a_throttled_replica_out_of_the_isr_unfetched(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        b = make_broker(tmp_path)
        rm = ReplicaManager(b, ReplicationSettings())
        other = uuid.uuid4()
        b.on_committed(
            [
                r.TopicRecord(name="t", topic_id=TID),
                r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(2, 1), isr=(2,),
                                  leader=2),
                r.PartitionRecord(partition_id=1, topic_id=TID, replicas=(2, 1), isr=(2, 1),
                                  leader=2),
                r.TopicRecord(name="u", topic_id=other),
                r.PartitionRecord(partition_id=0, topic_id=other, replicas=(2, 1), isr=(2,),
                                  leader=2),
                r.ConfigRecord(resource_type=TOPIC, resource_name="t",
                               name="follower.replication.throttled.replicas", value="0:1,1:1"),
                r.ConfigRecord(resource_type=BROKER, resource_name="",
                               name="follower.replication.throttled.rate", value="1000"),
            ],
            3,
        )  # fmt: skip
        fetcher = _Fetcher(rm, 2)
        parts: list[Any] = []
        for key in (("t", 0), ("t", 1), ("u", 0)):
            p = b.partitions.get(*key)
            assert p is not None
            parts.append((key, p))
        quota = b.replication_quotas.follower
        assert quota.bound == 1000  # the cluster default applies to this broker
        assert fetcher._unthrottled(parts) == (parts, 0.0)  # within the rate
        now = time.monotonic()
        quota.record(now, 3000)
        kept, wait_s = fetcher._unthrottled(parts)
        # t-0 is throttled and out of the ISR; t-1 is in the ISR; u-0 is not throttled
        assert [k for k, _ in kept] == [("t", 1), ("u", 0)]
        assert 1.5 < wait_s <= 3.0  # 3000 bytes at 1000/s from the first window
        fetcher.stop()
        await asyncio.gather(fetcher.task, return_exceptions=True)
        b.close()

    asyncio.run(go())


def test_a_new_throttle_is_measured_afresh(tmp_path: Path) -> None:
    """The windows of an earlier throttle would stretch the span of the new one's rate
    and let its catch-up start with a burst of seconds of its rate (seen as a throttled
    move at twice its limit right after another)."""
    b = _leader(tmp_path, "1000", "0:1")
    quota = b.replication_quotas.leader
    quota.record(time.monotonic() - 9, 100)
    b.on_committed([_config(TOPIC, "t", "leader.replication.throttled.replicas", None)], 11)
    assert not quota.active
    b.on_committed([_config(TOPIC, "t", "leader.replication.throttled.replicas", "0:1")], 12)
    assert quota.active
    quota.record(time.monotonic(), 5000)
    assert quota.exceeded(time.monotonic())  # 5000 bytes in one window, not over nine
    b.close()
