"""DeleteRecords (API 21, issue 15): the log start offset moves on every replica, stays
moved across restarts (log-start-offset-checkpoint), and readers below it are told
OFFSET_OUT_OF_RANGE; with confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster import Cluster, keeperless, wait_until


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("dr"), controllers=1, brokers=3)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
    assert p.flush(30) == 0


def _create(c: Cluster, topic: str, *config: str) -> None:
    args = ["topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
            "--partitions", "2", "--replication-factor", "3"]  # fmt: skip
    for kv in config:
        args += ["--config", kv]
    keeperless(*args, check=True)


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(lo), int(hi)
    finally:
        c.close()


def _first_read_from(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """The offset a consumer positioned at ``offset`` reads first (reset to earliest
    when ``offset`` is out of range)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "rd", "auto.offset.reset": "earliest"}
    )
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        msg: Any = wait_until(
            lambda: m if (m := c.poll(0.5)) is not None and m.error() is None else None,
            20,
            what="a record",
        )
        return int(msg.offset())
    finally:
        c.close()


def test_delete_records_with_confluent_kafka(three: Cluster) -> None:
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    c = three
    _create(c, "dr")
    _produce(c.bootstrap, "dr", 0, 10)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    res = admin.delete_records([TopicPartition("dr", 0, 4)])
    deleted = res[TopicPartition("dr", 0)].result(30)
    assert deleted.low_watermark == 4
    assert _watermarks(c.bootstrap, "dr", 0) == (4, 10)
    # below the start: OFFSET_OUT_OF_RANGE, and the consumer resets to the new start
    assert _first_read_from(c.bootstrap, "dr", 0, 1) == 4
    # -1: up to the high watermark
    res = admin.delete_records([TopicPartition("dr", 0, -1)])
    assert res[TopicPartition("dr", 0)].result(30).low_watermark == 10
    # past the high watermark: refused as Kafka does
    res = admin.delete_records([TopicPartition("dr", 1, 5)])
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE|out of range"):
        res[TopicPartition("dr", 1)].result(30)
    # every replica moved its start, and keeps it across a restart
    for b in c.brokers.values():
        wait_until(
            lambda b=b: (
                "dr 0 10" in (b.data / "log-start-offset-checkpoint").read_text()
                if (b.data / "log-start-offset-checkpoint").exists()
                else False
            ),
            20,
            what=f"broker {b.node_id}'s checkpoint",
        )
    for b in c.brokers.values():  # all down at once: no replica can tell another
        b.stop()
    for b in c.brokers.values():
        b.start()
    wm = wait_until(
        lambda: w if (w := _watermarks(c.bootstrap, "dr", 0))[1] == 10 else None,
        30,
        what="the partition back",
    )
    assert wm == (10, 10), "the deleted records came back"
    _produce(c.bootstrap, "dr", 0, 2)
    assert _first_read_from(c.bootstrap, "dr", 0, 0) == 10


def test_delete_records_with_kafka_python_and_a_compacted_topic(three: Cluster) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import PolicyViolationError

    c = three
    _create(c, "drk")
    _create(c, "drc", "cleanup.policy=compact")
    _produce(c.bootstrap, "drk", 1, 6)
    _produce(c.bootstrap, "drc", 0, 3)
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        out = admin.delete_records({TopicPartition("drk", 1): 3}, timeout_ms=30_000)
        assert out[TopicPartition("drk", 1)]["low_watermark"] == 3
        assert _watermarks(c.bootstrap, "drk", 1) == (3, 6)
        # Kafka refuses to delete records of a topic that is only compacted
        with pytest.raises(PolicyViolationError):
            admin.delete_records({TopicPartition("drc", 0): 1}, timeout_ms=30_000)
    finally:
        admin.close()
    assert _watermarks(c.bootstrap, "drc", 0) == (0, 3)


def test_the_delete_records_tool_as_kafkas(
    three: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """kafka-delete-records.sh --offset-json-file, printing Kafka's lines; a partition
    refused is named with its error (exit 1); a bad file is one line."""
    import json

    c = three
    _create(c, "drt")
    _produce(c.bootstrap, "drt", 0, 8)
    d = tmp_path_factory.mktemp("drt")
    spec = d / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "drt", "partition": 0, "offset": 5}],
                                "version": 1}))  # fmt: skip
    res = keeperless("delete-records", "--bootstrap-server", c.bootstrap,
                     "--offset-json-file", str(spec))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: drt-0\tlow_watermark: 5",
    ]
    assert _watermarks(c.bootstrap, "drt", 0) == (5, 8)
    spec.write_text(json.dumps({"partitions": [{"topic": "drt", "partition": 1, "offset": 9}]}))
    res = keeperless("delete-records", "--bootstrap-server", c.bootstrap,
                     "--offset-json-file", str(spec))  # fmt: skip
    assert res.returncode == 1
    assert "partition: drt-1\terror:" in res.stdout
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "nope", "partition": 0, "offset": 1},
                    {"topic": "drt", "partition": 0, "offset": -1},
                ]
            }
        )
    )
    res = keeperless("delete-records", "--bootstrap-server", c.bootstrap,
                     "--offset-json-file", str(spec))  # fmt: skip
    assert res.returncode == 1
    assert ("partition: nope-0\terror: org.apache.kafka.common.errors."
            "UnknownTopicOrPartitionException") in res.stdout  # fmt: skip
    assert "partition: drt-0\tlow_watermark:" in res.stdout  # the others are still done
    spec.write_text("{nope")
    res = keeperless("delete-records", "--bootstrap-server", c.bootstrap,
                     "--offset-json-file", str(spec))  # fmt: skip
    assert res.returncode == 1
    assert res.stderr.startswith("ERROR: ")
    assert "not JSON" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
