"""The fault harness at the volumes users have (issue 23): large values, compressed and
not, written as fast as the cluster takes them into a topic of default segment size,
until a few hundred MB are acknowledged - past every window the brokers' readers use,
so that a restart must recover segments of that size and a follower must catch up with
answers cut inside batches.

Each value is ``b<producer>-<seq>:`` and a payload; the history records its size and a
digest, not its bytes. At the end every partition is read back and each record's
digest checked (a value served with other bytes than were acknowledged is an anomaly,
as is an acknowledged one that is gone).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import random
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.history import History

__all__ = ["BULK_PARTITIONS", "BULK_TOPIC", "BulkWorkload", "check_bulk_contents", "read_bulk"]

BULK_TOPIC = "chaos-bulk"
BULK_PARTITIONS = 2
_MIN_VALUE, _MAX_VALUE = 1_000, 900_000  # below the default message.max.bytes
_quiet = logging.getLogger("chaos.librdkafka")
_SIXTEEN_LETTERS = bytes(97 + (i % 16) for i in range(256))

Anomaly = dict[str, Any]


def digest(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=8).hexdigest()


class BulkWorkload:
    def __init__(
        self,
        bootstrap: str,
        history: History,
        stop: threading.Event,
        rng: random.Random,
        target_bytes: int,
    ) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.stop = stop
        self.rng = random.Random(rng.random())
        self.target_bytes = target_bytes
        self.acked_bytes = 0
        self.sent_bytes = 0
        self._lock = threading.Lock()
        self.done = threading.Event()
        self._running = 0

    def _common(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": _quiet, "log_level": 0}

    def setup(self) -> None:
        admin = AdminClient(self._common())
        conf = {"min.insync.replicas": "2"}  # and the cluster's default segment.bytes
        admin.create_topics([NewTopic(BULK_TOPIC, BULK_PARTITIONS, 3, config=conf)])[
            BULK_TOPIC
        ].result(30)

    def targets(self) -> list[tuple[str, Any]]:
        self._running = 2
        return [
            ("bulk-0", lambda: self._produce(0, "none")),
            ("bulk-1", lambda: self._produce(1, "zstd")),
        ]

    def wait(self, timeout_s: float) -> bool:
        """Until the target is acknowledged (or the producers gave up)."""
        return self.done.wait(timeout_s)

    @staticmethod
    def _payload(size: int, compressible: bool) -> bytes:
        if compressible:  # 16 letters: about half of it goes, as text does
            return os.urandom(size).translate(_SIXTEEN_LETTERS)
        return os.urandom(size)

    def _produce(self, k: int, compression: str) -> None:
        name = f"bulk-{k}"
        h = self.history
        rng = random.Random(self.rng.random())
        p = Producer(
            {
                **self._common(),
                "acks": "all",
                "enable.idempotence": True,
                "compression.type": compression,
                "linger.ms": 10,
                "batch.size": 1_000_000,
                "message.timeout.ms": 60_000,
                "request.timeout.ms": 10_000,
                "queue.buffering.max.kbytes": 32 * 1024,
                "error_cb": h.fatal_errors(name),
            }
        )
        pending: dict[int, dict[str, Any]] = {}

        def report(op: int, v: dict[str, Any]) -> Any:
            def cb(err: KafkaError | None, msg: Any) -> None:
                pending.pop(op, None)
                if err is None:
                    h.complete(op, name, "ok", "send", {**v, "offset": msg.offset()})
                    with self._lock:
                        self.acked_bytes += v["size"]
                        if self.acked_bytes >= self.target_bytes:
                            self.done.set()
                else:
                    h.complete(op, name, "info", "send", {**v, "error": err.name()})

            return cb

        try:
            self._send_until_done(k, p, name, rng, compression, report, pending)
        except KafkaException:
            pass  # a fatal error: error_cb recorded it with its reason
        finally:
            for op, v in list(pending.items()):
                h.complete(op, name, "info", "send", {**v, "error": "undelivered at the end"})
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self.done.set()

    def _send_until_done(
        self, k: int, p: Producer, name: str, rng: random.Random, compression: str,
        report: Any, pending: dict[int, dict[str, Any]],
    ) -> None:  # fmt: skip
        h = self.history
        seq = 0
        sent = 0
        while not self.stop.is_set() and not self.done.is_set() and sent < self.target_bytes:
            size = int(math.exp(rng.uniform(math.log(_MIN_VALUE), math.log(_MAX_VALUE))))
            value_id = f"b{k}-{seq}"
            payload = self._payload(size, compression != "none")
            partition = seq % BULK_PARTITIONS
            v = {"value": value_id, "partition": partition, "size": size,
                 "digest": digest(payload)}  # fmt: skip
            op = h.invoke(name, "send", v)
            try:
                p.produce(BULK_TOPIC, value=value_id.encode() + b":" + payload,
                          partition=partition, on_delivery=report(op, v))  # fmt: skip
            except BufferError:
                h.complete(op, name, "fail", "send", {**v, "error": "queue full"})
                p.poll(0.2)
                continue
            pending[op] = v
            seq += 1
            sent += size
            with self._lock:
                self.sent_bytes += size
            p.poll(0)
        deadline = time.monotonic() + 90
        while pending and time.monotonic() < deadline:
            p.flush(1)


def read_bulk(
    bootstrap: str, partition: int, timeout_s: float = 180.0
) -> tuple[tuple[int, int, list[tuple[int, str]]], list[tuple[int, str, str]]]:
    """(lo, hi, [(offset, value id)]) of one partition of the bulk topic, and the
    (offset, id, digest) of every record as read, for the content check."""
    from tests.chaos.workload import read_partition

    def id_and_digest(value: bytes) -> tuple[str, str]:
        value_id, _, payload = value.partition(b":")
        return value_id.decode(), digest(payload)

    lo, hi, records = read_partition(bootstrap, BULK_TOPIC, partition, timeout_s, id_and_digest)
    return (lo, hi, [(o, i) for o, (i, _) in records]), [(o, i, d) for o, (i, d) in records]


def check_bulk_contents(
    history: History, digests: dict[int, list[tuple[int, str, str]]]
) -> tuple[list[Anomaly], dict[str, int]]:
    """Every record read back has the bytes its producer sent (by digest); the writes
    checker (check_writes with prefix "bulk-") checks loss, duplicates and order."""
    sent = {e.value["value"]: e.value for e in history.of("bulk-", "send") if e.type == "invoke"}
    out: list[Anomaly] = []
    read_bytes = 0
    for p, records in sorted(digests.items()):
        for offset, value_id, d in records:
            v = sent.get(value_id)
            if v is not None:
                read_bytes += v["size"]
            if v is not None and v["digest"] != d:
                out.append({"kind": "bulk-value-altered", "partition": p, "offset": offset,
                            "value": value_id, "sent": v["digest"], "read": d})  # fmt: skip
    acked = sum(e.value["size"] for e in history.of("bulk-", "send") if e.type == "ok")
    return out, {"acked_bytes": acked, "read_bytes": read_bytes}
