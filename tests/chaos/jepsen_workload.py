"""Jepsen's Kafka workload (``jepsen.tests.kafka``) in the fault harness: keys are the
partitions of one topic, values unique integers. Processes:

- ``jepsen-txn-0`` and ``-1``: a transactional producer with a read_committed consumer;
  each operation polls, then sends one to three values to random keys, then commits
  (one in ten aborts) - consume-transform-produce, so a write-read cycle between
  committed transactions (G1c) would be an anomaly. One consumer subscribes (a group:
  rebalances), the other assigns;
- ``jepsen-send-0``: an idempotent producer of single values;
- ``jepsen-poll-0`` and ``-1``: read_committed consumers, one subscribed, one assigned;
- now and then a process drops its clients and starts new ones (a crash and restart).

Every operation is recorded as invocation and completion (ok, fail when the
transaction was aborted, info when the outcome is unknown); assignments, rebalances and
restarts as marks. After the run one last poll reads every key to its end, so an
acknowledged value never read is a loss. ``tests/chaos/jepsen_checker.py`` analyses
the history."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.history import History
from tests.chaos.jepsen_checker import analyze, ops_from_events
from tests.chaos.jepsen_tv2 import Tv2Producer

__all__ = ["JEPSEN_TOPIC", "KEYS", "JepsenWorkload"]

JEPSEN_TOPIC = "chaos-jepsen"
KEYS = 4
_quiet = logging.getLogger("chaos.librdkafka")
_MAX_OPS = 3000  # per process: every loop is bounded


class JepsenWorkload:
    def __init__(
        self, bootstrap: str, history: History, stop: threading.Event, rng: random.Random
    ) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.stop = stop
        self.rng = random.Random(rng.random())
        self._values = iter(range(1, 10**9))
        self._lock = threading.Lock()
        # a transaction version 2 producer, with the delayed-marker fault
        self.tv2 = Tv2Producer(bootstrap, JEPSEN_TOPIC, KEYS, history, stop,
                               random.Random(self.rng.random()), self._value)  # fmt: skip

    def _common(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": _quiet, "log_level": 0}

    def _value(self) -> int:
        with self._lock:
            return next(self._values)

    def setup(self) -> None:
        admin = AdminClient(self._common())
        conf = {"min.insync.replicas": "2"}
        fs = admin.create_topics([NewTopic(JEPSEN_TOPIC, KEYS, 3, config=conf)])
        fs[JEPSEN_TOPIC].result(30)

    def targets(self) -> list[tuple[str, Any]]:
        return [
            ("jepsen-txn-0", lambda: self._txns("jepsen-txn-0", subscribe=True)),
            ("jepsen-txn-1", lambda: self._txns("jepsen-txn-1", subscribe=False)),
            ("jepsen-send-0", self._sends),
            ("jepsen-tv2-0", self.tv2.run),
            ("jepsen-poll-0", lambda: self._polls("jepsen-poll-0", subscribe=True)),
            ("jepsen-poll-1", lambda: self._polls("jepsen-poll-1", subscribe=False)),
        ]

    # -- consumers -----------------------------------------------------------------------

    def _consumer(self, name: str, subscribe: bool) -> Consumer:
        h = self.history
        c = Consumer({**self._common(), "group.id": f"{name}-g" if subscribe else "jepsen-a",
                      "auto.offset.reset": "earliest", "enable.auto.commit": subscribe,
                      "isolation.level": "read_committed", "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 1000})  # fmt: skip
        if subscribe:
            c.subscribe(
                [JEPSEN_TOPIC],
                on_assign=lambda _c, parts: h.info(name, "rebalance", len(parts)),
                on_revoke=lambda _c, parts: h.info(name, "rebalance", -len(parts)),
            )
        else:
            c.assign([TopicPartition(JEPSEN_TOPIC, k, 0) for k in range(KEYS)])
            h.info(name, "assign", KEYS)
        return c

    @staticmethod
    def _poll(c: Consumer, max_msgs: int = 50, timeout_s: float = 0.3) -> list[Any]:
        got: dict[str, list[list[int]]] = {}
        for m in c.consume(max_msgs, timeout_s):
            if m.error() is None and m.value() is not None:
                got.setdefault(str(m.partition()), []).append(_pair(m))
        return ["poll", got]

    def _polls(self, name: str, subscribe: bool) -> None:
        h = self.history
        c = self._consumer(name, subscribe)
        try:
            for _ in range(_MAX_OPS):
                if self.stop.is_set():
                    break
                if self.rng.random() < 0.01:  # a crash and restart
                    c.close()
                    h.info(name, "restart")
                    c = self._consumer(name, subscribe)
                op = h.invoke(name, "poll")
                try:
                    mops = [self._poll(c)]
                except KafkaException as e:
                    h.complete(op, name, "info", "poll", {"error": str(e)[:200]})
                    continue
                h.complete(op, name, "ok", "poll", {"mops": mops})
                time.sleep(0.2)
        finally:
            c.close()

    # -- producers -----------------------------------------------------------------------

    def _sends(self) -> None:
        name, h = "jepsen-send-0", self.history
        p = Producer({**self._common(), "enable.idempotence": True, "acks": "all",
                      "message.timeout.ms": 20_000, "request.timeout.ms": 5_000,
                      "error_cb": h.fatal_errors(name)})  # fmt: skip

        def report(op: int, k: int, v: int) -> Any:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    h.complete(op, name, "ok", "send",
                               {"mops": [["send", str(k), v, msg.offset()]]})  # fmt: skip
                else:  # maybe written: unknown
                    mops = [["send", str(k), v, -1]]
                    h.complete(op, name, "info", "send", {"mops": mops, "error": err.name()})

            return cb

        for _ in range(_MAX_OPS):
            if self.stop.is_set():
                break
            k, v = self.rng.randrange(KEYS), self._value()
            op = h.invoke(name, "send", {"key": k, "value": v})
            try:
                p.produce(JEPSEN_TOPIC, value=str(v).encode(), partition=k,
                          on_delivery=report(op, k, v))  # fmt: skip
            except BufferError:
                h.complete(op, name, "fail", "send", {"mops": [["send", str(k), v, -1]]})
            except KafkaException:  # fatal: recorded by error_cb with its reason
                h.complete(op, name, "fail", "send", {"mops": [["send", str(k), v, -1]]})
                break
            p.poll(0)
            time.sleep(0.1)
        p.flush(30)

    def _producer(self, name: str) -> Producer:
        p = Producer({**self._common(), "transactional.id": name,
                      "transaction.timeout.ms": 10_000, "message.timeout.ms": 9_000,
                      "request.timeout.ms": 5_000})  # fmt: skip
        p.init_transactions(30)
        return p

    def _txns(self, name: str, subscribe: bool) -> None:
        h = self.history
        p: Producer | None = None
        c: Consumer | None = None
        for _ in range(_MAX_OPS):
            if self.stop.is_set():
                break
            try:
                if p is None or c is None or self.rng.random() < 0.01:
                    for client in (p, c):
                        if client is not None:
                            _close(client)
                    p = c = None
                    h.info(name, "restart")
                    p = self._producer(name)
                    c = self._consumer(name, subscribe)
            except KafkaException as e:
                h.info(name, "error", str(e)[:200])
                time.sleep(0.5)
                continue
            if not self._txn(name, p, c):
                _close(p)
                p = None  # a fatal or unknown outcome: a new producer fences the old one
            time.sleep(0.05)
        for client in (p, c):
            if client is not None:
                _close(client)

    def _txn(self, name: str, p: Producer, c: Consumer) -> bool:
        """One transaction; False if the producer must be replaced."""
        h = self.history
        op = h.invoke(name, "txn")
        mops: list[Any] = []
        offsets: dict[int, int] = {}
        began = False
        try:
            mops.append(self._poll(c, 20, 0.2))
            p.begin_transaction()
            began = True
            sends = [
                (self.rng.randrange(KEYS), self._value()) for _ in range(self.rng.randint(1, 3))
            ]

            def cb(i: int) -> Any:
                def report(err: Any, msg: Any) -> None:
                    if err is None:
                        offsets[i] = msg.offset()

                return report

            for i, (k, v) in enumerate(sends):
                p.produce(JEPSEN_TOPIC, value=str(v).encode(), partition=k, on_delivery=cb(i))
            mops += [["send", str(k), v, -1] for k, v in sends]
            if p.flush(10) != 0:
                raise KafkaException("undelivered sends")
            mops = [mops[0], *(["send", str(k), v, offsets.get(i, -1)]
                               for i, (k, v) in enumerate(sends))]  # fmt: skip
            if self.rng.random() < 0.1:
                p.abort_transaction(30)
                h.complete(op, name, "fail", "txn", {"mops": mops, "aborted": "by choice"})
                return True
            commit_at = h.now()
            p.commit_transaction(30)
            h.complete(op, name, "ok", "txn", {"mops": mops, "commit_at": commit_at})
            return True
        except KafkaException as e:
            err = e.args[0] if e.args else None
            abortable = began and getattr(err, "txn_requires_abort", lambda: False)()
            if abortable:
                try:
                    p.abort_transaction(30)
                    h.complete(op, name, "fail", "txn", {"mops": mops, "error": str(e)[:200]})
                    return True
                except KafkaException:
                    pass
            h.complete(op, name, "info", "txn", {"mops": mops, "error": str(e)[:200]})
            return False

    # -- the end -------------------------------------------------------------------------

    def final_poll(self, timeout_s: float = 120.0) -> None:
        """One last read of every key to its end (read_committed)."""
        name, h = "jepsen-final", self.history
        c = Consumer({**self._common(), "group.id": "jepsen-final", "enable.auto.commit": False,
                      "isolation.level": "read_committed"})  # fmt: skip
        op = h.invoke(name, "poll")
        deadline = time.monotonic() + timeout_s
        try:
            while True:  # the ends to read to (a slow cluster after the faults: again)
                try:
                    ends = {k: c.get_watermark_offsets(TopicPartition(JEPSEN_TOPIC, k), 10)[1]
                            for k in range(KEYS)}  # fmt: skip
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
            c.assign([TopicPartition(JEPSEN_TOPIC, k, 0) for k in range(KEYS)])
            got: dict[str, list[list[int]]] = {}
            while time.monotonic() < deadline:
                for m in c.consume(500, 0.5):
                    if m.error() is None and m.value() is not None:
                        got.setdefault(str(m.partition()), []).append(_pair(m))
                pos = c.position([TopicPartition(JEPSEN_TOPIC, k) for k in range(KEYS)])
                if all(tp.offset >= ends[tp.partition] for tp in pos):
                    break
            h.complete(op, name, "ok", "poll", {"mops": [["poll", got]]})
        except KafkaException as e:
            h.complete(op, name, "info", "poll", {"error": str(e)[:200]})
        finally:
            c.close()

    def check(
        self, writers: Mapping[tuple[int, int], tuple[int, int, bool]] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """The history's anomalies; ``writers`` the batches' producers, read from the
        nodes' files once they stopped (checkers.batch_writers)."""
        ops, marks = ops_from_events(self.history.of("jepsen-"))
        anomalies, stats = analyze(ops, marks, writers)
        stats["tv2-txns"] = sum(op.process == self.tv2.name and op.type == "ok" for op in ops)
        stats.update({f"late-markers-{k}": v for k, v in self.tv2.late_copies.items()})
        out = [{**a, "kind": f"jepsen-{a['kind']}"} for a in anomalies]
        if self.tv2.late_copies["taken"]:  # a late copy ended the next transaction
            out.append({"kind": "jepsen-late-marker-taken", **self.tv2.late_copies})
        return out, stats


def _pair(m: Any) -> list[int]:
    return [int(m.offset()), int(m.value())]


def _close(client: Any) -> None:
    try:
        if isinstance(client, Consumer):
            client.close()
        else:
            client.flush(5)
    except (KafkaException, RuntimeError):
        pass
