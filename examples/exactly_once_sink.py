"""Exactly-once from Spark to a topic: transactional writes from ``foreachBatch``, keyed
by the micro-batch id.

Spark's Kafka sink (and ``format("keeperless")``) is at-least-once: a micro-batch that
fails after some rows were written is run again, and those rows are written twice. A
micro-batch re-run after a failure has the same batch id and the same rows (Spark's
checkpoint records the offsets of each batch), so a sink that writes each batch id at
most once makes the whole pipeline exactly-once:

* every batch is written in one Kafka transaction, together with a progress record
  (key: the query's name, value: the batch id) on a compacted ``<topic>.progress`` topic;
* before writing batch N the sink reads the last committed progress record: if it says
  N (or later), the batch was committed before the failure and is skipped.

Readers of the output use ``isolation.level=read_committed`` (librdkafka's default):
rows of a batch whose transaction was aborted, or never committed, are never seen.

    query = (df.writeStream.foreachBatch(ExactlyOnceSink("127.0.0.1:9092", "out", "q1"))
             .option("checkpointLocation", "/tmp/ck").start())

This example writes from the driver (``collect()``): fine for modest batches. For large
ones, give each Spark partition its own transactional id (``<query>-<partition>``) and
progress key, and write from ``foreachPartition`` the same way.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["ExactlyOnceSink"]


class ExactlyOnceSink:
    def __init__(self, bootstrap: str, topic: str, query_name: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.query = query_name
        self.progress_topic = f"{topic}.progress"
        self._producer: Producer | None = None

    def _ensure_progress_topic(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        if self.progress_topic in admin.list_topics(timeout=10).topics:
            return
        # the cluster's default.replication.factor: losing a broker must not lose the
        # progress records that tell a replayed batch from a new one
        new = NewTopic(self.progress_topic, 1, -1, config={"cleanup.policy": "compact"})
        for f in admin.create_topics([new]).values():
            try:
                f.result(30)
            except Exception as e:  # created meanwhile by another run
                if "already exists" not in str(e):
                    raise

    def last_committed_batch(self) -> int:
        """The batch id of the last committed progress record of this query (-1: none)."""
        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{self.query}-progress",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        try:
            tp = TopicPartition(self.progress_topic, 0)
            lo, hi = c.get_watermark_offsets(tp, timeout=10)
            if hi <= lo:
                return -1
            c.assign([TopicPartition(self.progress_topic, 0, lo)])
            last = -1
            deadline = time.monotonic() + 30
            while c.position([tp])[0].offset < hi and time.monotonic() < deadline:
                for m in c.consume(500, 0.5):
                    if m.error() is None and m.key() == self.query.encode():
                        last = int(m.value())
            return last
        finally:
            c.close()

    def _transactional_producer(self) -> Producer:
        if self._producer is None:
            self._ensure_progress_topic()
            # one transactional id per query: a restarted driver fences the old one
            p = Producer({"bootstrap.servers": self.bootstrap,
                          "transactional.id": f"spark-sink-{self.query}"})  # fmt: skip
            p.init_transactions(60)
            self._producer = p
        return self._producer

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        p = self._transactional_producer()
        if batch_id <= self.last_committed_batch():
            return  # written before a failure: Spark runs it again, the sink does not
        rows = batch_df.select("key", "value").collect()
        p.begin_transaction()
        try:
            for r in rows:
                key = r["key"].encode() if isinstance(r["key"], str) else r["key"]
                value = r["value"].encode() if isinstance(r["value"], str) else r["value"]
                p.produce(self.topic, key=key, value=value)
                p.poll(0)
            p.produce(self.progress_topic, key=self.query.encode(), value=str(batch_id).encode())
            p.commit_transaction(60)
        except Exception:
            p.abort_transaction(60)
            raise
