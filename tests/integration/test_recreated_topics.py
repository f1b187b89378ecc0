"""A topic deleted and re-created under the same name keeps what was written to the new
one across restarts (issue 12, bug 1: the restart replayed the old topic's deletion onto
the new topic's directory and lost every acknowledged record)."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.cluster import Cluster, Node, kafka_request, wait_until


def _recreate(bootstrap: str, name: str, on: int | None = None) -> None:
    """Create, delete and re-create ``name`` (one partition, RF 1; both incarnations on
    broker ``on`` if given, by a manual assignment)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])

    def create() -> bool:
        assignments = [] if on is None else [{"partition_index": 0, "broker_ids": [on]}]
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1 if on is not None else 1,
                    "replication_factor": -1 if on is not None else 1,
                    "assignments": assignments,
                    "configs": [],
                }
            ],
            "timeout": 15000,
            "validate_only": False,
        }
        code = int(kafka_request(port, 19, 7, body).topics[0].error_code)
        return code == 0  # (TOPIC_ALREADY_EXISTS while the deletion spreads)

    assert create()
    wait_until(lambda: name in admin.list_topics(timeout=5).topics, 10, what="the topic")
    admin.delete_topics([name])[name].result(15)
    wait_until(lambda: name not in admin.list_topics(timeout=5).topics, 10, what="deletion")
    wait_until(create, 20, 0.5, what="the topic re-created")


def _produce(bootstrap: str, name: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(n):
        p.produce(name, value=b"r-%d" % i)
    assert p.flush(20) == 0


def _watermarks(bootstrap: str, name: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
        return int(lo), int(hi)
    finally:
        c.close()


def test_one_node_keeps_a_recreated_topic_across_a_restart(node: Node) -> None:
    _recreate(node.bootstrap, "t1")
    _produce(node.bootstrap, "t1", 50)
    assert _watermarks(node.bootstrap, "t1") == (0, 50)
    node.restart()
    assert wait_until(lambda: _watermarks(node.bootstrap, "t1") == (0, 50), 20, what="0..50")
    assert "Deleting partition t1-0" not in node.logs().split("Started in")[-1]


def test_a_broker_keeps_a_recreated_topic_across_a_restart(cluster3: Cluster) -> None:
    c = cluster3
    _recreate(c.bootstrap, "t1", on=4)
    _produce(c.bootstrap, "t1", 8)
    assert (c.brokers[4].data / "t1-0").exists()
    c.brokers[4].restart()
    assert wait_until(lambda: _watermarks(c.bootstrap, "t1") == (0, 8), 30, what="0..8")
