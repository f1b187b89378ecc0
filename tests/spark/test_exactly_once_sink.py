"""examples/exactly_once_sink.py: a micro-batch Spark runs again after a failure is not
written twice, and rows of a batch that failed half-way are never read."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from examples.exactly_once_sink import ExactlyOnceSink

from tests.spark.conftest import create_topic


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-check",
                  "isolation.level": "read_committed"})  # fmt: skip
    try:
        tp = TopicPartition(topic, 0)
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        c.assign([TopicPartition(topic, 0, lo)])
        out = []
        while hi > lo and c.position([tp])[0].offset < hi:
            out += [m.value() for m in c.consume(100, 0.5) if m.error() is None]
        return out
    finally:
        c.close()


def test_a_batch_run_again_is_written_once(spark, kafka, topic_name) -> None:
    out = topic_name()
    create_topic(kafka.bootstrap, out)
    sink = ExactlyOnceSink(kafka.bootstrap, out, "q1")
    b0 = spark.createDataFrame([("a", "1"), ("b", "2")], ["key", "value"])
    b1 = spark.createDataFrame([("c", "3")], ["key", "value"])
    sink(b0, 0)
    sink(b0, 0)  # Spark re-runs batch 0 after a failure: skipped
    # batch 1 fails half-way (a row Kafka refuses: too large), its transaction aborts
    bad = spark.createDataFrame([("c", "3"), ("big", "x" * 2_000_000)], ["key", "value"])
    with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
        sink(bad, 1)
    assert sink.last_committed_batch() == 0
    sink(b1, 1)  # the retry of batch 1
    assert _read_committed(kafka.bootstrap, out) == [b"1", b"2", b"3"]
    # a new driver (a restarted query) sees the progress and fences the old producer
    again = ExactlyOnceSink(kafka.bootstrap, out, "q1")
    again(b1, 1)
    assert _read_committed(kafka.bootstrap, out) == [b"1", b"2", b"3"]
