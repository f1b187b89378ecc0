"""One compacted internal topic, read from its beginning and kept up to date, and written
to (Kafka Connect's ``KafkaBasedLog``), on confluent-kafka clients.

A thread polls the consumer and the producer; records are handed to the event loop in
the order they were read (``call_soon_threadsafe`` keeps it), and ``read_to_end()``
resolves once every record up to the end offsets taken when it was called has been
applied. Writes are acknowledged by every in-sync replica (acks=all, idempotent).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from keeperless.connect.config import ConfigException

__all__ = ["TopicLog", "ensure_topic"]

log = logging.getLogger(__name__)

OnRecord = Callable[[int, int, bytes | None, bytes | None], None]
_INVALID = -1001


def ensure_topic(
    conf: dict[str, Any],
    topic: str,
    partitions: int,
    replication: int,
    setting: str,
    purpose: str,
    timeout_s: float = 30.0,
) -> None:
    """Create ``topic`` compacted if it does not exist; refuse one that is not compacted
    (or, for the config topic, has more than one partition), in Kafka's words."""
    admin = AdminClient(dict(conf))
    fut = admin.create_topics(
        [NewTopic(topic, partitions, replication, config={"cleanup.policy": "compact"})],
        request_timeout=timeout_s,
    )[topic]
    try:
        fut.result(timeout=timeout_s)
        log.info("created internal topic %s (%d partitions) for %s", topic, partitions, setting)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise ConfigException(f"cannot create {topic} ({setting}): {e.args[0].str()}") from None
    md = admin.list_topics(topic, timeout=timeout_s).topics[topic]
    if setting == "config.storage.topic" and len(md.partitions) != 1:
        raise ConfigException(
            f"Topic '{topic}' supplied via the '{setting}' property is required to have a "
            "single partition in order to guarantee consistency of connector "
            f"configurations, but found {len(md.partitions)} partitions."
        )
    res = ConfigResource("TOPIC", topic)
    entries = admin.describe_configs([res], request_timeout=timeout_s)[res].result(timeout_s)
    policy = entries["cleanup.policy"].value if "cleanup.policy" in entries else "delete"
    if "compact" not in policy.split(","):
        raise ConfigException(
            f"Topic '{topic}' supplied via the '{setting}' property is required to have "
            f"'cleanup.policy=compact' to guarantee consistency and durability of {purpose}, "
            f"but found the topic currently has 'cleanup.policy={policy}'. Continuing would "
            f"likely result in eventually losing {purpose} and problems restarting this "
            f"Connect cluster in the future. Change the '{setting}' property in the Connect "
            "worker configurations to use a topic with 'cleanup.policy=compact'."
        )


class TopicLog:
    def __init__(
        self, conf: dict[str, Any], topic: str, on_record: OnRecord, client_id: str
    ) -> None:
        self.topic = topic
        self._on_record = on_record
        self._loop = asyncio.get_running_loop()
        self._consumer = Consumer(
            {
                **conf,
                "group.id": f"{client_id}-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "client.id": f"{client_id}-{topic}",
                "enable.partition.eof": False,
            }
        )
        self._producer = Producer(
            {
                **conf,
                "acks": "all",
                "enable.idempotence": True,
                "client.id": f"{client_id}-{topic}",
                "linger.ms": 0,
            }
        )
        # end offsets come through a client of their own: asked on the consumer's
        # connection they waited behind its long-polling fetch (0.5 s per partition)
        self._admin = AdminClient({**conf, "client.id": f"{client_id}-{topic}-ends"})
        self._requests: queue.SimpleQueue[asyncio.Future[None]] = queue.SimpleQueue()
        self._waiting: list[tuple[dict[int, int], asyncio.Future[None]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"log-{topic}", daemon=True)
        self.partitions: list[int] = []

    def start(self) -> None:
        md = self._consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        self.partitions = sorted(md.partitions)
        self._consumer.assign([TopicPartition(self.topic, p, -2) for p in self.partitions])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(5)
        self._consumer.close()

    def read_to_end(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self._loop.create_future()
        self._requests.put(fut)
        return fut

    def send(
        self, key: bytes | str | None, value: bytes | None, partition: int | None = None
    ) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self._loop.create_future()
        loop = self._loop

        def done(err: Any, _msg: Any) -> None:
            if err is None:
                loop.call_soon_threadsafe(_settle, fut, None)
            else:
                loop.call_soon_threadsafe(_settle, fut, KafkaException(err))

        if partition is None:
            self._producer.produce(self.topic, value, key, on_delivery=done)
        else:
            self._producer.produce(self.topic, value, key, partition, on_delivery=done)
        return fut

    # --- the polling thread ---------------------------------------------------------

    def _ends(self) -> dict[int, int]:
        """The end of every partition (the last stable offset: read_committed)."""
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        specs = {TopicPartition(self.topic, p): latest for p in self.partitions}
        futures = self._admin.list_offsets(
            specs, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10
        )
        return {tp.partition: f.result(15).offset for tp, f in futures.items()}

    def _reached(self, ends: dict[int, int]) -> bool:
        positions = self._consumer.position([TopicPartition(self.topic, p) for p in ends])
        for tp in positions:
            if ends[tp.partition] > 0 and tp.offset < ends[tp.partition]:
                if tp.offset != _INVALID:
                    return False
                low, _ = self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                if low < ends[tp.partition]:
                    return False
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                while True:
                    fut = self._requests.get_nowait()
                    try:
                        self._waiting.append((self._ends(), fut))
                    except Exception as e:  # the thread must outlive any failure
                        self._loop.call_soon_threadsafe(_settle, fut, e)
            except queue.Empty:
                pass
            try:
                msgs = self._consumer.consume(500, 0.05)
            except KafkaException as e:  # pragma: no cover - a closed handle
                log.warning("reading %s: %s", self.topic, e)
                continue
            batch = [
                (m.partition() or 0, m.offset() or 0, m.key(), m.value())
                for m in msgs
                if m.error() is None
            ]
            if batch:
                self._loop.call_soon_threadsafe(self._apply, batch)
            if self._waiting:
                still = []
                for ends, fut in self._waiting:
                    try:
                        done = self._reached(ends)
                    except Exception:
                        done = False
                    if done:
                        self._loop.call_soon_threadsafe(_settle, fut, None)
                    else:
                        still.append((ends, fut))
                self._waiting = still
            self._producer.poll(0)

    def _apply(self, batch: list[tuple[int, int, bytes | None, bytes | None]]) -> None:
        for partition, offset, key, value in batch:
            try:
                self._on_record(partition, offset, key, value)
            except Exception:  # a malformed record must not stop the worker
                log.exception("%s: cannot apply the record at %d-%d", self.topic, partition, offset)


def _settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)
