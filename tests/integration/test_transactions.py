"""Exactly-once (issue 16) with real clients: transactional producers of confluent-kafka,
kafka-python and aiokafka commit and abort; read_committed consumers see committed
records in order and never aborted ones; offsets sent to a transaction apply only when
it commits; a zombie producer is fenced; a hung transaction is aborted after its
timeout."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Node, keeperless, wait_until


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(
        tmp_path_factory.mktemp("txn"),
        extra={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"},
    )
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _topic(node: Node, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    keeperless(
        "topics", "--bootstrap-server", node.bootstrap, "--create", "--topic", name,
        "--partitions", str(partitions), check=True,
    )  # fmt: skip
    return name


def _read(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[str]:
    """Everything a consumer of ``isolation`` reads up to the end it is shown."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
         "isolation.level": isolation, "enable.auto.commit": False}
    )  # fmt: skip
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[str] = []
        pos = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 20
        while any(pos[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in c.consume(100, 0.3):
                if m.error() is None:
                    got.append(m.value().decode())
                    pos[m.partition()] = m.offset() + 1
            for tp in c.position(tps):
                pos[tp.partition] = max(pos[tp.partition], tp.offset)
        return got
    finally:
        c.close()


def test_commit_and_abort_with_confluent_kafka(node: Node) -> None:
    from confluent_kafka import Producer

    topic = _topic(node)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "ck-1"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, value=b"a%d" % i, partition=i % 2)
    p.flush(30)  # written, then aborted
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=b"d%d" % i, partition=i % 2)
    p.commit_transaction(30)
    committed = _read(node.bootstrap, topic, "read_committed")
    everything = _read(node.bootstrap, topic, "read_uncommitted")
    assert sorted(everything) == sorted([f"c{i}" for i in range(20)] +
                                        [f"a{i}" for i in range(20)] +
                                        [f"d{i}" for i in range(6)])  # fmt: skip
    assert not [v for v in committed if v.startswith("a")]
    # each partition's committed records in the order produced
    for part in (0, 1):
        want = [f"c{i}" for i in range(part, 20, 2)] + [f"d{i}" for i in range(part, 6, 2)]
        assert [v for v in committed if int(v[1:]) % 2 == part] == want


def test_an_open_transaction_holds_read_committed_readers_back(node: Node) -> None:
    """The last stable offset: records after the first open transaction are not given
    to read_committed readers, even committed ones of another producer, until it ends."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = _topic(node, 1)
    slow = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "slow"})
    fast = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "fast"})
    slow.init_transactions(30)
    fast.init_transactions(30)
    slow.begin_transaction()
    slow.produce(topic, value=b"slow", partition=0)
    slow.flush(30)
    fast.begin_transaction()
    fast.produce(topic, value=b"fast", partition=0)
    fast.commit_transaction(30)
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "lso",
                  "isolation.level": "read_committed"})  # fmt: skip
    try:
        _lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert hi == 0  # read_committed: the LSO, where the open transaction starts
        assert _read(node.bootstrap, topic, "read_committed", 1) == []
        slow.commit_transaction(30)
        assert _read(node.bootstrap, topic, "read_committed", 1) == ["slow", "fast"]
    finally:
        c.close()


def test_offsets_sent_to_a_transaction_apply_only_when_it_commits(node: Node) -> None:
    """A consume-transform-produce step: the input offsets are committed with the
    output, or not at all."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    src, dst = _topic(node, 1), _topic(node, 1)
    feed = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(10):
        feed.produce(src, value=b"in%d" % i, partition=0)
    assert feed.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "ctp",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})  # fmt: skip
    c.subscribe([src])
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "ctp-1"})
    p.init_transactions(30)
    try:
        msgs: list = []
        deadline = time.monotonic() + 30
        while len(msgs) < 10 and time.monotonic() < deadline:
            msgs += [m for m in c.consume(10, 0.5) if m.error() is None]
        assert len(msgs) == 10

        def step(batch: list, commit: bool) -> None:
            p.begin_transaction()
            for m in batch:
                p.produce(dst, value=m.value().upper(), partition=0)
            last = batch[-1]
            p.send_offsets_to_transaction(
                [TopicPartition(src, 0, last.offset() + 1)], c.consumer_group_metadata(), 30
            )
            if commit:
                p.commit_transaction(30)
            else:
                p.flush(30)
                p.abort_transaction(30)

        def committed() -> int:
            return int(c.committed([TopicPartition(src, 0)], 10)[0].offset)

        step(msgs[:4], commit=True)
        assert committed() == 4
        step(msgs[4:8], commit=False)
        assert committed() == 4  # the aborted transaction's offsets never apply
        step(msgs[4:10], commit=True)
        assert committed() == 10
        out = _read(node.bootstrap, dst, "read_committed", 1)
        assert out == [f"IN{i}" for i in range(10)]  # exactly once, in order
    finally:
        c.close()


def test_a_zombie_producer_is_fenced(node: Node) -> None:
    from confluent_kafka import KafkaException, Producer

    topic = _topic(node, 1)
    old = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "z"})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"zombie", partition=0)
    old.flush(30)
    new = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "z"})
    new.init_transactions(30)  # aborts the old producer's transaction, bumps the epoch
    new.begin_transaction()
    new.produce(topic, value=b"new", partition=0)
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        old.commit_transaction(10)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower()
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["new"]


def test_a_hung_transaction_is_aborted_after_its_timeout(node: Node) -> None:
    from confluent_kafka import KafkaException, Producer

    topic = _topic(node, 1)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "hung",
                  "transaction.timeout.ms": 1500})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"hung", partition=0)
    p.flush(30)
    wait_until(
        lambda: "Aborting the transaction of hung" in node.logs(), 20, what="the timeout abort"
    )
    wait_until(lambda: _read(node.bootstrap, topic, "read_uncommitted", 1) == ["hung"], 10)
    assert _read(node.bootstrap, topic, "read_committed", 1) == []
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "h",
                  "isolation.level": "read_committed"})  # fmt: skip
    try:  # the marker moved the LSO past the aborted record
        wait_until(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), 10)[1] == 2, 10)
    finally:
        c.close()
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_kafka_python_transactions(node: Node) -> None:
    from kafka import KafkaProducer

    topic = _topic(node, 1)
    p = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="kp-1")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send(topic, value=b"k%d" % i, partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, value=b"gone", partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    assert _read(node.bootstrap, topic, "read_committed", 1) == [f"k{i}" for i in range(5)]
    assert "gone" in _read(node.bootstrap, topic, "read_uncommitted", 1)
    # kafka-python's own read_committed consumer skips the aborted record too
    from kafka import KafkaConsumer

    kc = KafkaConsumer(topic, bootstrap_servers=node.bootstrap, isolation_level="read_committed",
                       auto_offset_reset="earliest", consumer_timeout_ms=3000)  # fmt: skip
    try:
        assert [m.value for m in kc] == [b"k%d" % i for i in range(5)]
    finally:
        kc.close()


def test_aiokafka_transactions(node: Node) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    topic = _topic(node, 1)

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="aio-1")
        await p.start()
        try:
            async with p.transaction():
                for i in range(5):
                    await p.send_and_wait(topic, b"x%d" % i, partition=0)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"gone", partition=0)
            await p.abort_transaction()
            # TxnOffsetCommit v0 (no generation id): it failed, and aiokafka retried for ever
            from aiokafka import TopicPartition as AioTP

            async with p.transaction():
                await p.send_offsets_to_transaction({AioTP(topic, 0): 6}, "aio-g")
        finally:
            await p.stop()

    async def read() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=node.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 10
            while len(got) < 5 and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=300)).values():
                    got += [m.value for m in msgs]
            await asyncio.sleep(0.5)  # nothing more comes: the aborted record is skipped
            for msgs in (await c.getmany(timeout_ms=300)).values():
                got += [m.value for m in msgs]
        finally:
            await c.stop()
        return got

    asyncio.run(go())
    assert _read(node.bootstrap, topic, "read_committed", 1) == [f"x{i}" for i in range(5)]
    assert asyncio.run(read()) == [b"x%d" % i for i in range(5)]  # aiokafka's own consumer
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "aio-g"})
    try:
        assert c.committed([TopicPartition(topic, 0)], 10)[0].offset == 6
    finally:
        c.close()


def test_transactions_survive_a_restart(tmp_path: Path) -> None:
    """The coordinator's state and the partitions' open and aborted transactions come
    back from the logs: a producer resumes, aborted records stay hidden."""
    from confluent_kafka import Producer

    n = Node(tmp_path)
    n.format()
    n.start()
    try:
        topic = _topic(n, 1)
        p = Producer({"bootstrap.servers": n.bootstrap, "transactional.id": "r"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=b"kept", partition=0)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, value=b"dropped", partition=0)
        p.flush(30)
        p.abort_transaction(30)
        n.stop()
        n.start()
        assert _read(n.bootstrap, topic, "read_committed", 1) == ["kept"]
        q = Producer({"bootstrap.servers": n.bootstrap, "transactional.id": "r"})
        q.init_transactions(30)  # the next epoch of the same producer id
        q.begin_transaction()
        q.produce(topic, value=b"after", partition=0)
        q.commit_transaction(30)
        assert _read(n.bootstrap, topic, "read_committed", 1) == ["kept", "after"]
    finally:
        n.stop()


def _open_transaction(node: Node, topic: str, tid: str, value: bytes) -> Any:
    """A transactional producer with one record written to partition 0 of ``topic`` in
    a transaction left open."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=value, partition=0)
    p.flush(30)
    return p


@pytest.fixture
def unverified(tmp_path: Path) -> Iterator[Node]:
    """A node that does not verify transactional writes (KIP-890 off): the way a
    hanging transaction can still be made, to test the tools that find and end one."""
    yield from Node(
        tmp_path, extra={"transaction.partition.verification.enable": "false"}
    ).running()


def _producer_of(node: Node, tid: str) -> tuple[int, int]:
    """The producer id and epoch of a transactional id, as kafka-transactions.sh says."""
    described = keeperless("transactions", "--bootstrap-server", node.bootstrap, "describe",
                           "--transactional-id", tid, check=True).stdout.splitlines()  # fmt: skip
    row = described[1].split()
    return int(row[2]), int(row[3])


def _raw_txn_produce(
    node: Node,
    topic: str,
    tid: str | None,
    pid: int,
    epoch: int,
    seq: int,
    value: bytes,
    version: int = 9,
) -> int:
    """One transactional batch sent by hand to partition 0 (acks=all): its error code."""
    from keeperless.protocol.records import build_batch
    from tests.integration.cluster import kafka_request

    batch = build_batch([(None, value, ())], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=True)  # fmt: skip
    resp = kafka_request(node.port, 0, version, {
        "transactional_id": tid, "acks": -1, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    })  # fmt: skip
    return int(resp.responses[0].partition_responses[0].error_code)


def test_late_transactional_writes_are_refused(node: Node) -> None:
    """KIP-890 part 1: a transactional write to a partition that is not in its
    producer's ongoing transaction (a retry arriving after the abort, a zombie) is
    refused, so it cannot open a transaction no coordinator will end (read_committed
    readers would be held at it until transaction.max.timeout.ms)."""
    from confluent_kafka import Producer

    topic = _topic(node, 1)
    p = _open_transaction(node, topic, "late-1", b"aborted")
    bs = ["--bootstrap-server", node.bootstrap]
    pid, epoch = _producer_of(node, "late-1")
    p.abort_transaction(30)

    def produce(tid: str | None, seq: int, version: int = 9) -> int:
        return _raw_txn_produce(node, topic, tid, pid, epoch, seq, b"late", version)

    assert produce("late-1", 1) == 48  # INVALID_TXN_STATE: the transaction was aborted
    assert produce("late-1", 1, version=11) == 120  # TRANSACTION_ABORTABLE from v11
    assert produce("late-1", 1, version=12) == 120
    # transactional, without an id: Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert produce(None, 1) == 53
    hanging = keeperless("transactions", *bs, "find-hanging", "--topic", topic, check=True)
    assert len(hanging.stdout.splitlines()) == 1, hanging.stdout
    q = Producer({"bootstrap.servers": node.bootstrap})
    q.produce(topic, value=b"plain", partition=0)
    assert q.flush(30) == 0
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["plain"]  # not held back
    # the same producer's next transaction, with the partition added, is verified
    p.begin_transaction()
    p.produce(topic, value=b"next", partition=0)
    p.commit_transaction(30)
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["plain", "next"]


def test_a_producer_id_is_written_only_under_its_transactional_id(node: Node) -> None:
    """Found by a helper's probe: a client allowed its own transactional id wrote into
    another's open transaction by naming the other's producer id and epoch (its records
    were committed with that transaction). The leader has the coordinator confirm which
    transactional id a producer id belongs to before taking its transactional writes."""
    from tests.integration.cluster import kafka_request

    topic = _topic(node, 1)
    p = _open_transaction(node, topic, "owner-1", b"owned")
    pid, epoch = _producer_of(node, "owner-1")
    other = kafka_request(node.port, 22, 4, {"transactional_id": "intruder-1",
                                             "transaction_timeout": 30000,
                                             "producer_id": -1, "producer_epoch": -1})  # fmt: skip
    assert other.error_code == 0
    injected = _raw_txn_produce(node, topic, "intruder-1", pid, epoch, 1, b"injected")
    assert injected == 49  # INVALID_PRODUCER_ID_MAPPING
    p.commit_transaction(30)
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["owned"]


def test_offsets_outside_a_transaction_are_refused(node: Node) -> None:
    """KIP-890 for TxnOffsetCommit: offsets of a group whose __consumer_offsets partition
    is not in the producer's ongoing transaction (no AddOffsetsToTxn, or an epoch the
    coordinator does not have) are refused, so no open transaction is left in
    __consumer_offsets to hold the group's read_committed readers."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.integration.cluster import kafka_request

    topic = _topic(node, 1)
    init = kafka_request(node.port, 22, 4, {"transactional_id": "orphan-1",
                                            "transaction_timeout": 30000,
                                            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
    assert init.error_code == 0

    def commit(version: int, epoch: int) -> int:
        body = {"transactional_id": "orphan-1", "group_id": "g-orphan",
                "producer_id": init.producer_id, "producer_epoch": epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                     "committed_metadata": None}]}]}  # fmt: skip
        resp = kafka_request(node.port, 28, version, body)
        return int(resp.topics[0].partitions[0].error_code)

    assert commit(3, init.producer_epoch) == 48  # INVALID_TXN_STATE
    assert commit(4, init.producer_epoch) == 120  # TRANSACTION_ABORTABLE
    assert commit(3, init.producer_epoch + 3) != 0  # an epoch the coordinator never gave
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g-orphan",
                  "isolation.level": "read_committed"})  # fmt: skip
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)  # not held by anything
        assert tp.offset < 0
    finally:
        c.close()


def test_the_transactions_tool_as_kafkas(unverified: Node) -> None:
    """kafka-transactions.sh: list and describe a transaction, describe the producers of
    its partition, find it hanging once its coordinator no longer knows it (a marker
    lost, simulated by a producer writing transactional batches with no coordinator on a
    node that does not verify them), and abort it by its start offset: read_committed
    readers move past it."""
    from confluent_kafka import Producer

    node = unverified
    topic = _topic(node, 1)
    p = _open_transaction(node, topic, "tool-1", b"open")
    bs = ["--bootstrap-server", node.bootstrap]
    listed = keeperless("transactions", *bs, "list", check=True).stdout.splitlines()
    assert listed[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                 "TransactionState"]  # fmt: skip
    row = next(r.split() for r in listed[1:] if r.startswith("tool-1 "))
    assert row[3] == "Ongoing"
    described = keeperless("transactions", *bs, "describe", "--transactional-id", "tool-1",
                           check=True).stdout.splitlines()  # fmt: skip
    assert described[1].split()[1:5] == ["tool-1", row[2], "0", "Ongoing"]
    assert described[1].split()[-1] == f"{topic}-0"
    producers = keeperless("transactions", *bs, "describe-producers", "--topic", topic,
                           "--partition", "0", check=True).stdout.splitlines()  # fmt: skip
    assert producers[0].split()[0] == "ProducerId"
    assert producers[1].split()[0] == row[2]
    assert producers[1].split()[-1] == "0"  # its transaction starts at offset 0
    # a live transaction is never hanging, however old the limit makes it
    live = keeperless("transactions", *bs, "find-hanging", "--topic", topic,
                      "--max-transaction-timeout", "0", check=True)  # fmt: skip
    assert len(live.stdout.splitlines()) == 1, live.stdout
    p.commit_transaction(30)
    after_commit = keeperless("transactions", *bs, "describe-producers", "--topic", topic,
                              "--partition", "0", check=True).stdout.splitlines()  # fmt: skip
    assert after_commit[1].split()[2] != "-1"  # LatestCoordinatorEpoch, from the marker
    assert after_commit[1].split()[-1] == "None"  # no open transaction
    names = keeperless("transactions", *bs, "list", "--transactional-id-pattern", "tool-.*",
                       check=True).stdout.splitlines()  # fmt: skip
    assert [r.split()[0] for r in names[1:]] == ["tool-1"]
    old = keeperless("transactions", *bs, "list", "--duration-filter", "3600000",
                     check=True).stdout.splitlines()  # fmt: skip
    assert "tool-1" not in [r.split()[0] for r in old[1:]]  # not open for an hour
    # a transaction no coordinator knows: a producer id that never asked for one
    assert _raw_txn_produce(node, topic, "stray", 999_999, 0, 0, b"stray") == 0
    hanging = keeperless("transactions", *bs, "find-hanging", "--topic", topic,
                         check=True).stdout.splitlines()  # fmt: skip
    assert len(hanging) == 2, hanging
    assert hanging[1].split()[:3] == [topic, "0", "999999"]
    start = hanging[1].split()[5]
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["open"]  # stuck at the LSO
    aborted = keeperless("transactions", *bs, "abort", "--topic", topic, "--partition", "0",
                         "--start-offset", start, check=True)  # fmt: skip
    assert "Aborted the transaction of producer 999999" in aborted.stdout
    after = keeperless("transactions", *bs, "find-hanging", "--topic", topic, check=True)
    assert len(after.stdout.splitlines()) == 1
    q = Producer({"bootstrap.servers": node.bootstrap})
    q.produce(topic, value=b"later", partition=0)
    assert q.flush(30) == 0
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["open", "later"]


def test_an_idle_transactional_id_expires(tmp_path: Path) -> None:
    """transactional.id.expiration.ms: an id idle that long is forgotten (a tombstone in
    __transaction_state), also after a restart; its next producer starts anew."""
    from confluent_kafka import Producer

    sweep = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    removal = "transaction.remove.expired.transaction.cleanup.interval.ms"
    n = Node(tmp_path, extra={"transactional.id.expiration.ms": "1500", sweep: "300",
                              removal: "300"})  # fmt: skip
    n.format()
    n.start()
    try:
        topic = _topic(n, 1)
        p = Producer({"bootstrap.servers": n.bootstrap, "transactional.id": "idle"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=b"v", partition=0)
        p.commit_transaction(30)

        def listed() -> list[str]:
            out = keeperless("transactions", "--bootstrap-server", n.bootstrap, "list",
                             check=True).stdout  # fmt: skip
            return [line.split()[0] for line in out.splitlines()[1:]]

        assert listed() == ["idle"]
        wait_until(lambda: listed() == [], 20, what="the id to expire")
        assert "Expired 1 transactional id(s)" in n.logs()
        n.stop()
        n.start()
        assert listed() == []  # the tombstone, not the old state, is what is read back
        q = Producer({"bootstrap.servers": n.bootstrap, "transactional.id": "idle"})
        q.init_transactions(30)
        q.begin_transaction()
        q.produce(topic, value=b"w", partition=0)
        q.commit_transaction(30)
        assert _read(n.bootstrap, topic, "read_committed", 1) == ["v", "w"]
    finally:
        n.stop()


def test_dump_log_shows_markers_and_the_transaction_log(node: Node) -> None:
    """kafka-dump-log.sh: markers as Kafka prints them (endTxnMarker, coordinatorEpoch),
    __transaction_state decoded with --transaction-log-decoder."""
    from confluent_kafka import Producer

    topic = _topic(node, 1)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "dump-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"v", partition=0)
    p.commit_transaction(30)
    seg = node.data / f"{topic}-0" / "00000000000000000000.log"
    out = keeperless("dump-log", "--print-data-log", "--files", str(seg), check=True).stdout
    assert re.search(r"isTransactional: true isControl: true", out)
    assert re.search(r"\| offset: 1 .* endTxnMarker: COMMIT coordinatorEpoch: \d+$", out, re.M)
    states = [d for d in node.data.glob("__transaction_state-*")]
    dumped = "".join(
        keeperless("dump-log", "--transaction-log-decoder", "--files",
                   str(d / "00000000000000000000.log"), check=True).stdout
        for d in states
    )  # fmt: skip
    assert '"transactionalId":"dump-1"' in dumped
    assert '"transactionStatus":4' in dumped  # CompleteCommit
    assert re.search(
        r'"transactionPartitions":\[\{"topic":"' + topic + r'","partitionIds":\[0\]\}\]', dumped
    )
