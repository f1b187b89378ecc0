"""A local[2] SparkSession and one keeperless node shared by the Spark tests."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.cluster import Node


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("spark-node"), extra={"num.partitions": "1"})
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from keeperless.spark import local_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = local_session("keeperless-tests", **{"spark.sql.warehouse.dir": str(warehouse)})
    try:
        yield session
    finally:
        session.stop()


_counter = iter(range(1_000_000))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic names per test (the node is shared)."""

    def make(suffix: str = "") -> str:
        return f"{request.node.name.replace('[', '-').replace(']', '')}-{next(_counter)}{suffix}"

    return make


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    fut[name].result(timeout=20)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(timeout=20)


def produce(
    bootstrap: str,
    topic: str,
    messages: list[tuple[bytes | None, bytes, list[tuple[str, bytes]] | None, int]],
) -> None:
    """Messages as (key, value, headers, partition), acknowledged before returning."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    failed: list[str] = []
    for key, value, headers, part in messages:
        p.produce(
            topic,
            key=key,
            value=value,
            headers=headers,
            partition=part,
            on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
        )
    assert p.flush(30) == 0
    assert not failed, failed


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[Any]:
    """Every message of ``topic`` read with a plain consumer (stops at ``expected``)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    md = c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=0.5):
            assert m.error() is None, m.error()
            out.append(m)
    c.close()
    return out


def wait_for(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
