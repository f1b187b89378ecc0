"""Running one task in its own thread (Kafka's ``WorkerSourceTask``,
``ExactlyOnceWorkerSourceTask`` and ``WorkerSinkTask``).

A source task's records are converted and written; every ``offset.flush.interval.ms``
the producer is flushed, and only once Kafka has acknowledged every record are their
source offsets written to the offset topic and the task told to ``commit()``. With
exactly-once source support each batch of ``poll()`` is one transaction of the task's
transactional producer: its records and its offsets commit together or not at all.

A sink task consumes in the group ``connect-<connector>`` and hands records to ``put()``;
``flush()`` then the consumer's commit every interval and at every revocation.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from keeperless.connect.api import SinkTask, SourceTask, TaskContext
from keeperless.connect.data import Converter, DataException, SinkRecord, SourceRecord
from keeperless.connect.state import offset_key

__all__ = ["Reporter", "TaskRunner", "TaskSettings"]

log = logging.getLogger(__name__)

# (state, trace): the runner's status reports, handed to the worker's event loop
Reporter = Callable[[str, str | None], None]


@dataclass(slots=True)
class TaskSettings:
    connector: str
    task: int
    props: dict[str, str]
    connector_config: dict[str, str]
    client: dict[str, Any]
    producer: dict[str, str]  # the worker's producer.* settings
    consumer: dict[str, str]  # the worker's consumer.* settings
    key_converter: Converter
    value_converter: Converter
    offsets_topic: str
    flush_interval_s: float
    flush_timeout_s: float
    transactional_id: str | None  # exactly-once source support
    offsets: Callable[[Iterable[Mapping[str, Any]]], dict[str, dict[str, Any] | None]]
    topic_seen: Callable[[str], None]


class TaskRunner(threading.Thread):
    def __init__(
        self, task: SourceTask | SinkTask, settings: TaskSettings, report: Reporter
    ) -> None:
        super().__init__(name=f"task-{settings.connector}-{settings.task}", daemon=True)
        self.task = task
        self.s = settings
        self.report = report
        self.stopping = threading.Event()
        self.paused = threading.Event()
        self.failed: str | None = None

    def pause(self) -> None:
        self.paused.set()
        self.report("PAUSED", None)

    def resume(self) -> None:
        self.paused.clear()
        self.report("RUNNING", None)

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        ctx = TaskContext(self.s.connector, self.s.task, self.s.offsets)
        try:
            self.task.start(self.s.props, ctx)
            self.report("PAUSED" if self.paused.is_set() else "RUNNING", None)
            if isinstance(self.task, SourceTask):
                self._source(self.task)
            else:
                self._sink(self.task)
        except Exception as e:  # any failure of a task is its status, not the worker's
            self.failed = "".join(traceback.format_exception(e))
            log.warning("task %s-%d failed: %s", self.s.connector, self.s.task, e)
            self.report("FAILED", self.failed)
        finally:
            try:
                self.task.stop()
            except Exception:
                log.exception("task %s-%d: stop() raised", self.s.connector, self.s.task)
        if self.failed is None and self.stopping.is_set():
            self.report("UNASSIGNED", None)

    # --- source ---------------------------------------------------------------------

    def _producer(self) -> Producer:
        conf = {
            **self.s.client,
            "client.id": f"connector-producer-{self.s.connector}-{self.s.task}",
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            **self.s.producer,
        }
        if self.s.transactional_id:
            conf["transactional.id"] = self.s.transactional_id
        return Producer(conf)

    def _source(self, task: SourceTask) -> None:
        producer = self._producer()
        eos = self.s.transactional_id is not None
        if eos:
            producer.init_transactions(30)
        errors: list[str] = []
        topics: set[str] = set()
        pending: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        next_flush = time.monotonic() + self.s.flush_interval_s

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"Unrecoverable exception from producer send callback: {err.str()}")

        try:
            while not self.stopping.is_set():
                if self.paused.is_set():
                    self.stopping.wait(0.1)
                    continue
                records = task.poll() or []
                if records and eos:
                    producer.begin_transaction()
                for r in records:
                    self._new_topic(r.topic, topics)
                    self._write(producer, r, delivered)
                    pending[json.dumps(r.source_partition, sort_keys=True)] = (
                        r.source_partition,
                        r.source_offset,
                    )
                producer.poll(0)
                if errors:
                    raise RuntimeError(errors[0])
                if eos and records:
                    self._write_offsets(producer, pending)
                    producer.commit_transaction(self.s.flush_timeout_s + 30)
                    pending.clear()
                    task.commit()
                elif not eos and (time.monotonic() >= next_flush):
                    self._commit(producer, task, pending, errors)
                    next_flush = time.monotonic() + self.s.flush_interval_s
            if not eos:
                self._commit(producer, task, pending, errors)
        finally:
            producer.flush(self.s.flush_timeout_s)

    def _write(self, producer: Producer, r: SourceRecord, delivered: Any) -> None:
        key = self.s.key_converter.from_connect(r.key_schema, r.key)
        value = self.s.value_converter.from_connect(r.value_schema, r.value)
        extra: dict[str, Any] = {}
        if r.partition is not None:
            extra["partition"] = r.partition
        if r.timestamp is not None:
            extra["timestamp"] = r.timestamp
        if r.headers:
            extra["headers"] = r.headers
        while True:
            try:
                producer.produce(r.topic, value, key, on_delivery=delivered, **extra)
                return
            except BufferError:
                producer.poll(0.1)

    def _write_offsets(
        self, producer: Producer, pending: dict[str, tuple[dict[str, Any], dict[str, Any]]]
    ) -> list[str]:
        """Write the offsets; the returned list collects their delivery errors."""
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(err.str())

        for part, off in pending.values():
            value = json.dumps(off, separators=(",", ":")).encode()
            key = offset_key(self.s.connector, part)
            producer.produce(self.s.offsets_topic, value, key, on_delivery=delivered)
        return failed

    def _commit(
        self,
        producer: Producer,
        task: SourceTask,
        pending: dict[str, tuple[dict[str, Any], dict[str, Any]]],
        errors: list[str],
    ) -> None:
        """Kafka's offset commit: every record written so far acknowledged, then their
        offsets written and acknowledged, then ``commit()``."""
        if producer.flush(self.s.flush_timeout_s) > 0:
            log.warning(
                "task %s-%d: records not acknowledged within %.0f s; offsets not committed",
                self.s.connector,
                self.s.task,
                self.s.flush_timeout_s,
            )
            return
        if errors:
            raise RuntimeError(errors[0])
        if not pending:
            return
        failed = self._write_offsets(producer, pending)
        if producer.flush(self.s.flush_timeout_s) > 0 or failed:
            # as Kafka's OffsetStorageWriter: the commit is tried again at the next interval
            # (the same or newer offsets); the task goes on, and commit() waits for it
            log.warning("task %s-%d: offsets not committed (%s); retrying at the next interval",
                        self.s.connector, self.s.task,
                        failed[0] if failed else "not acknowledged in time")  # fmt: skip
            return
        if errors:
            raise RuntimeError(errors[0])
        pending.clear()
        task.commit()

    def _new_topic(self, topic: str, seen: set[str]) -> None:
        if topic in seen:
            return
        seen.add(topic)
        self.s.topic_seen(topic)
        cfg = self.s.connector_config
        prefix = "topic.creation.default."
        if prefix + "replication.factor" not in cfg or prefix + "partitions" not in cfg:
            return
        topic_configs = {k[len(prefix) :]: v for k, v in cfg.items() if k.startswith(prefix)}
        rf = int(topic_configs.pop("replication.factor"))
        parts = int(topic_configs.pop("partitions"))
        admin = AdminClient(dict(self.s.client))
        fut = admin.create_topics([NewTopic(topic, parts, rf, config=topic_configs)])[topic]
        try:
            fut.result(30)
        except KafkaException as e:
            if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise

    # --- sink -----------------------------------------------------------------------

    def _sink(self, task: SinkTask) -> None:
        cfg = self.s.connector_config
        consumer = Consumer(
            {
                **self.s.client,
                "group.id": f"connect-{self.s.connector}",
                "client.id": f"connector-consumer-{self.s.connector}-{self.s.task}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                **self.s.consumer,
            }
        )
        done: dict[tuple[str, int], int] = {}

        def commit() -> None:
            if not done:
                return
            task.flush(dict(done))
            offsets = [TopicPartition(t, p, o) for (t, p), o in done.items()]
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as e:
                log.warning(
                    "task %s-%d: offset commit failed: %s", self.s.connector, self.s.task, e
                )
            done.clear()

        def revoked(_c: Any, _parts: Any) -> None:
            commit()

        if cfg.get("topics.regex"):
            consumer.subscribe(["^" + cfg["topics.regex"].lstrip("^")], on_revoke=revoked)
        else:
            topics = [t.strip() for t in cfg.get("topics", "").split(",") if t.strip()]
            consumer.subscribe(topics, on_revoke=revoked)
        next_flush = time.monotonic() + self.s.flush_interval_s
        dlq = _Tolerance(self.s) if cfg.get("errors.tolerance", "none") == "all" else None
        try:
            while not self.stopping.is_set():
                if self.paused.is_set():
                    self.stopping.wait(0.1)
                    continue
                msgs = consumer.consume(500, 0.2)
                batch = []
                for m in msgs:
                    if m.error() is not None:
                        continue
                    topic, part, off = m.topic() or "", m.partition() or 0, m.offset() or 0
                    try:
                        ks, k = self.s.key_converter.to_connect(m.key())
                        vs, v = self.s.value_converter.to_connect(m.value())
                    except DataException as e:
                        if dlq is None:
                            raise  # errors.tolerance=none: the task fails, as Kafka's
                        dlq.tolerate(m, e)
                        done[(topic, part)] = off + 1
                        continue
                    _, ts = m.timestamp()
                    raw = m.headers() or []
                    pairs = list(raw.items()) if isinstance(raw, dict) else list(raw)
                    headers = [
                        (h, hv if isinstance(hv, bytes | None) else str(hv).encode())
                        for h, hv in pairs
                    ]
                    batch.append(SinkRecord(topic, part, off, ks, k, vs, v, ts, headers))
                    done[(topic, part)] = off + 1
                if batch:
                    task.put(batch)
                if time.monotonic() >= next_flush:
                    commit()
                    next_flush = time.monotonic() + self.s.flush_interval_s
            commit()
        finally:
            consumer.close()
            if dlq is not None:
                dlq.close()


class _Tolerance:
    """errors.tolerance=all for a sink: a record the converters cannot read is skipped
    (logged with errors.log.enable) and, with errors.deadletterqueue.topic.name, written
    unchanged to that topic, with Kafka's __connect.errors.* headers when
    errors.deadletterqueue.context.headers.enable=true."""

    def __init__(self, s: TaskSettings) -> None:
        cfg = s.connector_config
        self.s = s
        self.topic = cfg.get("errors.deadletterqueue.topic.name", "").strip()
        self.context = cfg.get("errors.deadletterqueue.context.headers.enable") == "true"
        self.log = cfg.get("errors.log.enable") == "true"
        self.producer: Producer | None = None
        if self.topic:
            rf = int(cfg.get("errors.deadletterqueue.topic.replication.factor", "3"))
            admin = AdminClient(dict(s.client))
            fut = admin.create_topics([NewTopic(self.topic, 1, rf)])[self.topic]
            try:
                fut.result(30)
            except KafkaException as e:
                if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise
            self.producer = Producer({**s.client, "acks": "all", "enable.idempotence": True})

    def tolerate(self, m: Any, error: Exception) -> None:
        if self.log:
            log.warning("task %s-%d: skipped %s-%s@%s: %s", self.s.connector, self.s.task,
                        m.topic(), m.partition(), m.offset(), error)  # fmt: skip
        if self.producer is None:
            return
        headers = list(m.headers() or [])
        if self.context:
            headers += [
                ("__connect.errors.topic", (m.topic() or "").encode()),
                ("__connect.errors.partition", str(m.partition()).encode()),
                ("__connect.errors.offset", str(m.offset()).encode()),
                ("__connect.errors.connector.name", self.s.connector.encode()),
                ("__connect.errors.task.id", str(self.s.task).encode()),
                ("__connect.errors.stage", b"VALUE_CONVERTER"),
                ("__connect.errors.exception.class.name",
                 b"org.apache.kafka.connect.errors.DataException"),
                ("__connect.errors.exception.message", str(error).encode()),
            ]  # fmt: skip
        self.producer.produce(self.topic, m.value(), m.key(), headers=headers)
        self.producer.poll(0)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(10)
