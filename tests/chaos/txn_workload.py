"""The fault harness's exactly-once workload (issue 16): a feeder writes numbered records
to an input topic; a copier - a read_committed consumer of a group and a transactional
producer - copies them to an output topic inside transactions that also commit the
group's input offsets (send_offsets_to_transaction). On any error it aborts what it can,
drops both clients and starts again from the committed offsets (a new producer of the
same transactional id fences the old one).

Checked at the end: the committed output of each partition is exactly the input below
the group's committed offset, transformed, in order - no loss, no duplicate, nothing
committed without its offsets."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.history import History

__all__ = ["TXN_IN", "TXN_OUT", "TxnWorkload", "check_exactly_once"]

TXN_IN = "chaos-txn-in"
TXN_OUT = "chaos-txn-out"
TXN_GROUP = "chaos-txn-g"
TXN_PARTITIONS = 2
_quiet = logging.getLogger("chaos.librdkafka")

Anomaly = dict[str, Any]


class TxnWorkload:
    def __init__(self, bootstrap: str, history: History, stop: threading.Event) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.stop = stop
        self.commits = 0
        self.aborts = 0
        self.sessions = 0

    def _common(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": _quiet, "log_level": 0}

    def setup(self) -> None:
        admin = AdminClient(self._common())
        conf = {"min.insync.replicas": "2"}
        fs = admin.create_topics([NewTopic(t, TXN_PARTITIONS, 3, config=conf)
                                  for t in (TXN_IN, TXN_OUT)])  # fmt: skip
        for f in fs.values():
            f.result(30)

    def targets(self) -> list[tuple[str, Any]]:
        return [("txn-feeder", self._feed), ("txn-copier", self._copy)]

    def _feed(self, rate_per_s: float = 20.0, max_records: int = 4000) -> None:
        p = Producer({**self._common(), "acks": "all", "enable.idempotence": True,
                      "message.timeout.ms": 20_000,
                      "error_cb": self.history.fatal_errors("txn-feeder")})  # fmt: skip
        seq = 0
        next_at = time.monotonic()
        while not self.stop.is_set() and seq < max_records:
            partition = seq % TXN_PARTITIONS
            try:
                p.produce(TXN_IN, value=f"in-{seq}".encode(), partition=partition)
            except BufferError:
                pass
            except KafkaException:  # fatal: recorded by error_cb with its reason
                break
            seq += 1
            p.poll(0)
            next_at += 1.0 / rate_per_s
            time.sleep(max(next_at - time.monotonic(), 0))
        p.flush(30)

    def _copy(self) -> None:
        while not self.stop.is_set():
            self.sessions += 1
            try:
                self._session()
            except Exception as e:  # the next session starts from the committed offsets
                self.history.info("txn-copier", "error", repr(e)[:300])
                time.sleep(0.5)

    def _session(self) -> None:
        p = Producer({**self._common(), "transactional.id": "chaos-copier",
                      "transaction.timeout.ms": 10_000, "message.timeout.ms": 9_000,
                      "request.timeout.ms": 5_000})  # fmt: skip
        p.init_transactions(30)
        c = Consumer({**self._common(), "group.id": TXN_GROUP, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})  # fmt: skip
        c.subscribe([TXN_IN])
        in_txn = False
        # the next offset each input partition should deliver in this session: a
        # delivery below it (the consumer went back) is recorded, so a duplicate has
        # its cause in the history
        expect: dict[int, int] = {}
        try:
            while not self.stop.is_set():
                msgs = [m for m in c.consume(50, 0.5) if m.error() is None]
                if not msgs:
                    continue
                self._note_rewinds(msgs, expect)
                p.begin_transaction()
                in_txn = True
                for m in msgs:
                    p.produce(TXN_OUT, value=b"out:" + m.value(), partition=m.partition())
                positions = c.position(c.assignment())
                meta = c.consumer_group_metadata()
                p.send_offsets_to_transaction(positions, meta, 30)
                p.commit_transaction(30)
                in_txn = False
                self.commits += 1
                self.history.info(
                    "txn-copier",
                    "txn",
                    {str(tp.partition): tp.offset for tp in positions},
                )
        except KafkaException as e:
            err = e.args[0]
            if in_txn and err.txn_requires_abort():
                try:
                    p.abort_transaction(30)
                    in_txn = False
                    self.aborts += 1
                except KafkaException:
                    pass
            raise
        finally:
            if in_txn:  # stopping: end it rather than leave it to its timeout
                try:
                    p.abort_transaction(10)
                    self.aborts += 1
                except KafkaException:
                    pass
            c.close()

    def _note_rewinds(self, msgs: list[Any], expect: dict[int, int]) -> None:
        for m in msgs:
            want = expect.get(m.partition())
            if want is not None and m.offset() < want:
                self.history.info(
                    "txn-copier",
                    "rewind",
                    {"partition": m.partition(), "offset": m.offset(), "expected": want},
                )
            expect[m.partition()] = m.offset() + 1


def read_topic(bootstrap: str, topic: str, partition: int, timeout_s: float = 30.0) -> list[str]:
    """The records a read_committed consumer gets, up to the last stable offset (the
    last offsets are markers: read until the position passes them)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-txn-reader",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "logger": _quiet, "log_level": 0})  # fmt: skip
    try:
        tp = TopicPartition(topic, partition)
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        c.assign([TopicPartition(topic, partition, lo)])
        out: list[str] = []
        deadline = time.monotonic() + timeout_s
        while hi > lo:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append(m.value().decode())
            if c.position([tp])[0].offset >= hi:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition}: read {len(out)} records, not up to {hi}")
        return out
    finally:
        c.close()


def final_state(
    bootstrap: str,
) -> tuple[dict[int, list[str]], dict[int, list[str]], dict[int, int]]:
    inputs = {p: read_topic(bootstrap, TXN_IN, p) for p in range(TXN_PARTITIONS)}
    outputs = {p: read_topic(bootstrap, TXN_OUT, p) for p in range(TXN_PARTITIONS)}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": TXN_GROUP,
                  "enable.auto.commit": False, "logger": _quiet, "log_level": 0})  # fmt: skip
    try:
        # stable offsets only (read_committed): a transaction the copier could not end
        # when it stopped holds them until its timeout aborts it
        deadline = time.monotonic() + 40
        while True:
            try:
                tps = c.committed(
                    [TopicPartition(TXN_IN, p) for p in range(TXN_PARTITIONS)], timeout=10
                )
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
        committed = {tp.partition: max(tp.offset, 0) for tp in tps if tp.error is None}
    finally:
        c.close()
    return inputs, outputs, committed


def check_exactly_once(
    inputs: dict[int, list[str]], outputs: dict[int, list[str]], committed: dict[int, int]
) -> list[Anomaly]:
    """Each partition's committed output is its input below the group's committed
    offset (the input topic has no gaps: one record per offset), transformed, in order."""
    out: list[Anomaly] = []
    for p, records in inputs.items():
        upto = committed.get(p, 0)
        expected = ["out:" + v for v in records[:upto]]
        got = outputs.get(p, [])
        if got == expected:
            continue
        extra_copies = Counter(got) - Counter(expected)
        missing = Counter(expected) - Counter(got)
        dups = sorted(v for v in extra_copies if v in expected)
        foreign = sorted(v for v in extra_copies if v not in expected)
        lost = sorted(missing)
        kind = (
            "txn-duplicate" if dups
            else "txn-lost" if lost
            else "txn-uncommitted-offsets" if foreign
            else "txn-reordered"
        )  # fmt: skip
        out.append({"kind": kind, "partition": p, "committed_offset": upto,
                    "duplicates": dups[:10], "lost": lost[:10], "extra": foreign[:10],
                    "expected": len(expected), "got": len(got)})  # fmt: skip
    return out
