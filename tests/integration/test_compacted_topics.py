"""Compacted topics (issue 15): a record without a key is refused as Kafka refuses it
(INVALID_RECORD, with the rejected records' indexes in Produce v8+ record_errors); the
log cleaner keeps exactly the latest value of each key, at its offset."""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.cluster import Cluster, Node, _recv, keeperless, wait_until


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    n.format()
    n.start()
    try:
        keeperless(
            "topics", "--bootstrap-server", n.bootstrap, "--create", "--topic", "keyed",
            "--partitions", "1", "--config", "cleanup.policy=compact", check=True,
        )  # fmt: skip
        yield n
    finally:
        n.stop()


def _produce(port: int, version: int, records: bytes) -> object:
    from kio.index import load_request_schema

    from keeperless.protocol.build import build
    from keeperless.protocol.framing import decode_response, encode_request

    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 5000,
        "topic_data": [{"name": "keyed", "partition_data": [{"index": 0, "records": records}]}],
    }
    req = build(load_request_schema(0, version), body)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(encode_request(0, version, 1, "test", req))
        size = struct.unpack(">i", _recv(s, 4))[0]
        return decode_response(memoryview(_recv(s, size)), 0, version)[1]


def test_a_compacted_topic_refuses_records_without_a_key(node: Node) -> None:
    from confluent_kafka import KafkaError, Producer

    from keeperless.protocol.records import build_batch

    # on the wire: the indexes of the key-less records, nothing appended
    batch = build_batch([(b"k0", b"a", ()), (None, b"b", ()), (b"k2", b"c", ()), (None, b"d", ())])
    resp = _produce(node.port, 9, batch)
    part = resp.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert part.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    assert "without key" in (part.record_errors[0].batch_index_error_message or "")
    assert "compact" in (part.error_message or "")
    # with keys, accepted
    resp = _produce(node.port, 9, build_batch([(b"k", b"v", ())]))
    part = resp.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)
    # a client is told INVALID_RECORD
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": node.bootstrap, "retries": 0})
    p.produce("keyed", value=b"no key", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)  # alone in its batch (a batch with one key-less record is refused whole)
    p.produce("keyed", key=b"k", value=b"v2", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    codes = sorted(str(e.name()) if e is not None else "ok" for e in errors)
    assert codes == ["INVALID_RECORD", "ok"], codes


def _compacted(n: Node, topic: str, *configs: str) -> None:
    """A compacted topic of one partition, with ``configs`` (key=value) too."""
    extra = [arg for c in configs for arg in ("--config", c)]
    keeperless("topics", "--bootstrap-server", n.bootstrap, "--create", "--topic", topic,
               "--partitions", "1", "--config", "cleanup.policy=compact", *extra,
               check=True)  # fmt: skip


def _produce_keyed(
    bootstrap: str, topic: str, n: int, keys: int, seed: int, pad: int = 0
) -> dict[bytes, tuple[int, bytes | None]]:
    """n updates of ``keys`` keys (one in ten a tombstone); key -> (offset, value) of
    its latest record, from the delivery reports."""
    import random

    from confluent_kafka import Producer

    rng = random.Random(seed)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})

    def report(err: object, msg: object) -> None:
        assert err is None, err
        latest[msg.key()] = (msg.offset(), msg.value())  # type: ignore[attr-defined]

    for i in range(n):
        k = b"key-%d" % rng.randrange(keys)
        v = None if rng.random() < 0.1 else b"value-%d-" % i + b"x" * pad
        p.produce(topic, key=k, value=v, partition=0, on_delivery=report)
        if i % 200 == 0:
            p.flush(30)
    assert p.flush(30) == 0
    return latest


def _read_all(
    bootstrap: str, topic: str, **conf: str
) -> list[tuple[int, bytes | None, bytes | None]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False} | conf
    )
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, lo)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < hi - 1) and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def _state(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for _off, k, v in records:
        assert k is not None
        if v is None:
            state.pop(k, None)
        else:
            state[k] = v
    return state


def test_the_cleaner_keeps_exactly_the_latest_value_of_each_key(tmp_path: Path) -> None:
    """Compaction as Kafka's: a consumer reading the cleaned log from the start builds
    the same keyed state as from everything produced, every record it reads is at the
    offset it was produced at, replaced values and old tombstones are gone."""
    n = Node(tmp_path, extra={"log.cleaner.backoff.ms": "200"})
    n.format()
    n.start()
    try:
        _compacted(n, "state", "segment.bytes=4096", "min.cleanable.dirty.ratio=0.1",
                   "delete.retention.ms=0")  # fmt: skip
        latest = _produce_keyed(n.bootstrap, "state", 3000, 60, seed=1)
        expected = {k: v for k, (_o, v) in latest.items() if v is not None}
        wait_until(lambda: "Cleaned state-0" in n.logs(), 30, what="a cleaning")
        # a first cleaning may have run while the data was still arriving (a loaded
        # machine): read until the cleaner has reached the replaced values
        records: list[tuple[int, bytes | None, bytes | None]] = []

        def cleaned() -> bool:
            records[:] = _read_all(n.bootstrap, "state")
            assert _state(records) == expected  # at every step, never another state
            return len(records) < 3000 / 2

        wait_until(cleaned, 60, interval=1, what="the cleaner to drop the replaced values")
        produced_at = {o: k for k, (o, _v) in latest.items()}
        for off, k, _v in records:
            if off in produced_at:
                assert produced_at[off] == k  # the latest records are where they were
        # and after a restart (the cleaned segments, the cleaner's checkpoint)
        n.stop()
        n.start()
        assert _state(_read_all(n.bootstrap, "state")) == expected
        assert (n.data / "cleaner-offset-checkpoint").read_text().startswith("0\n1\nstate 0 ")
        # more updates: the segments cleaned before, now small, are cleaned into fewer,
        # as Kafka's cleaner groups them (up to segment.bytes)
        more = _produce_keyed(n.bootstrap, "state", 1000, 60, seed=2)
        expected.update({k: v for k, (_o, v) in more.items() if v is not None})
        for k, (_o, v) in more.items():
            if v is None:
                expected.pop(k, None)

        def merged() -> bool:
            found = re.findall(r"Cleaned state-0 .*?(\d+) segment\(s\) into (\d+)", n.logs())
            return any(int(a) > int(b) for a, b in found)

        wait_until(merged, 60, interval=0.5, what="segments cleaned into fewer")
        assert _state(_read_all(n.bootstrap, "state")) == expected
    finally:
        n.stop()


def test_kill_9_while_cleaning_loses_no_latest_value(tmp_path: Path) -> None:
    """A broker killed while it cleans (its worker writing .cleaned files, throttled by
    log.cleaner.io.max.bytes.per.second, or swapping them in), five times: the restarted
    log drops the unfinished cleaning, and a consumer reads exactly the keyed state of
    everything acknowledged."""
    import random

    rng = random.Random(7)
    n = Node(
        tmp_path,
        extra={
            "log.cleaner.backoff.ms": "50",
            "log.cleaner.io.max.bytes.per.second": "400000",
            "broker.session.timeout.ms": "2000",
            "broker.heartbeat.interval.ms": "500",
        },
    )
    n.format()
    n.start()
    try:
        _compacted(n, "crashy", "segment.bytes=65536", "min.cleanable.dirty.ratio=0.01",
                   "delete.retention.ms=0")  # fmt: skip
        pdir = n.data / "crashy-0"
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for round_ in range(5):
            latest.update(_produce_keyed(n.bootstrap, "crashy", 2500, 300, seed=round_, pad=400))
            wait_until(lambda: list(pdir.glob("*.cleaned")), 20, 0.01, what="a cleaning")
            time.sleep(rng.uniform(0.0, 0.5))
            n.kill9()
            n.start()
            expected = {k: v for k, (_o, v) in latest.items() if v is not None}
            assert _state(_read_all(n.bootstrap, "crashy")) == expected, f"round {round_}"
        assert "of a cleaning that did not finish" in n.logs()
        wait_until(lambda: not list(pdir.glob("*.cleaned")), 60, what="a cleaning to finish")
        expected = {k: v for k, (_o, v) in latest.items() if v is not None}
        assert _state(_read_all(n.bootstrap, "crashy")) == expected
    finally:
        n.stop()


def _removed_some(n: Node, name: str) -> bool:
    """Whether one of the node's cleanings of ``name`` kept fewer records than it read (a
    first cleaning may cover one early segment of a follower and remove nothing)."""
    for m in re.finditer(rf"Cleaned {name} .*?(\d+) of (\d+) records kept", n.logs()):
        if int(m.group(1)) < int(m.group(2)):
            return True
    return False


def _bytes_out(n: Node) -> float:
    for line in n.scrape().splitlines():
        if line.startswith("kafka_server_brokertopicmetrics_bytes_out_total "):
            return float(line.split()[1])
    raise AssertionError("no bytes-out metric")


def test_rf3_replicas_compact_on_their_own_and_each_serves_the_same_keyed_state(
    tmp_path: Path,
) -> None:
    """Three replicas of a compacted topic, each cleaned by its own broker: a consumer
    reading from each replica in turn (client.rack, KIP-392's RackAwareReplicaSelector)
    builds the same keyed state, that of everything acknowledged, with every latest
    record at the offset it was produced at; and the replica in the consumer's rack,
    not the leader, sent the records."""
    c = Cluster(
        tmp_path,
        controllers=1,
        brokers=3,
        metrics=True,
        extra={
            "log.cleaner.backoff.ms": "200",
            "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        },
    )
    for j, b in c.brokers.items():
        b.config.write_text(b.config.read_text() + f"broker.rack=rack-{j}\n")
    c.start()
    try:
        keeperless(
            "topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", "rf3",
            "--partitions", "1", "--replication-factor", "3",
            "--config", "cleanup.policy=compact", "--config", "segment.bytes=4096",
            "--config", "min.cleanable.dirty.ratio=0.1", "--config", "delete.retention.ms=0",
            check=True,
        )  # fmt: skip
        latest = _produce_keyed(c.bootstrap, "rf3", 3000, 60, seed=3)
        expected = {k: v for k, (_o, v) in latest.items() if v is not None}
        for b in c.brokers.values():  # each replica cleans its own copy, removing records
            wait_until(lambda b=b: _removed_some(b, "rf3-0"), 40, what=f"{b.node_id} cleans")
        produced_at = {o: k for k, (o, _v) in latest.items()}
        for j in c.brokers:
            before = {i: _bytes_out(n) for i, n in c.brokers.items()}
            records = _read_all(c.bootstrap, "rf3", **{"client.rack": f"rack-{j}"})
            assert _state(records) == expected, f"replica on broker {j}"
            cleanings = [ln for ln in c.brokers[j].logs().splitlines() if "Cleaned rf3-0" in ln]
            assert len(records) < 3000, (j, len(records), cleanings)  # its own cleaning
            for off, k, _v in records:
                if off in produced_at:
                    assert produced_at[off] == k, (j, off)
            after = {i: _bytes_out(n) for i, n in c.brokers.items()}
            assert after[j] - before[j] > 0, f"broker {j} sent no records to its rack"
            others = sum(after[i] - before[i] for i in c.brokers if i != j)
            assert others == 0, f"records read outside rack-{j}: {before} -> {after}"
    finally:
        c.stop()


def test_a_cleaner_worker_killed_mid_cleaning_is_replaced(tmp_path: Path) -> None:
    """A cleaner worker process killed while it writes a cleaned copy (the OOM killer,
    say): the broker starts another worker and goes on cleaning, instead of a broken
    pool refusing every cleaning until a restart (found by review); the half-written
    copy is dropped and the keyed state is whole."""
    import os
    import signal as sig

    n = Node(tmp_path, extra={"log.cleaner.backoff.ms": "50",
                              "log.cleaner.io.max.bytes.per.second": "200000"})  # fmt: skip
    n.format()
    n.start()
    try:
        _compacted(n, "workers", "segment.bytes=65536", "min.cleanable.dirty.ratio=0.01")
        pdir = n.data / "workers-0"
        latest = _produce_keyed(n.bootstrap, "workers", 2500, 300, seed=3, pad=400)
        wait_until(lambda: list(pdir.glob("*.cleaned")), 30, 0.01, what="a cleaning")
        assert n.proc is not None
        children = Path(f"/proc/{n.proc.pid}/task/{n.proc.pid}/children").read_text().split()
        assert children, "no cleaner worker process"
        for child in children:
            os.kill(int(child), sig.SIGKILL)
        wait_until(lambda: "A log cleaner worker died while cleaning workers-0" in n.logs(), 30,
                   what="the dead worker noticed")  # fmt: skip
        before = n.logs().count("Cleaned workers-0")
        latest.update(_produce_keyed(n.bootstrap, "workers", 500, 300, seed=4, pad=400))
        wait_until(lambda: n.logs().count("Cleaned workers-0") > before, 60,
                   what="a cleaning by a new worker")  # fmt: skip
        expected = {k: v for k, (_o, v) in latest.items() if v is not None}
        assert _state(_read_all(n.bootstrap, "workers")) == expected
    finally:
        n.stop()
