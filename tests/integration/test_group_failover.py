"""Groups survive their coordinator's failover (Kafka's GroupMetadata records, and the
consumer protocol's ConsumerGroup* records, in __consumer_offsets): the new coordinator
restores the members, their ids, generation or epochs and assignments, so heartbeats,
commits and a transactional copier's offsets go on without a rebalance or a fencing."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from tests.integration.cluster import Cluster, keeperless, wait_until

GROUP = "survivors"


@pytest.fixture
def three(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path, controllers=1, brokers=3,
        extra={"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "1",
               "group.initial.rebalance.delay.ms": "0"},
    )  # fmt: skip
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _coordinator(c: Cluster, group: str, key_type: int = 0) -> int:
    """The node id of the group's (key_type 1: the transactional id's) coordinator, as
    a live broker answers."""
    for b in c.brokers.values():
        if b.proc is None or b.proc.poll() is not None:
            continue
        resp = call([("127.0.0.1", b.port)], ApiKey.FIND_COORDINATOR, 4,
                    {"key_type": key_type, "coordinator_keys": [group]})  # fmt: skip
        co = resp.coordinators[0]
        if co.error_code.name == "none":
            return int(co.node_id)
    return -1


def _subscription(topic: str) -> bytes:
    return struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", -1)


def _assignment(topic: str, parts: list[int]) -> bytes:
    head = struct.pack(">hih", 0, 1, len(topic)) + topic.encode()
    return head + struct.pack(f">i{len(parts)}i", len(parts), *parts) + struct.pack(">i", -1)


def _join_and_sync(port: int, group: str) -> tuple[str, int]:
    """One classic member, by hand: JoinGroup (twice, KIP-394), SyncGroup as the leader."""
    server = [("127.0.0.1", port)]
    join: dict[str, Any] = {
        "group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": _subscription("orders")}],
    }  # fmt: skip
    first = call(server, ApiKey.JOIN_GROUP, 5, join)
    assert first.error_code.name == "member_id_required", first
    joined = call(server, ApiKey.JOIN_GROUP, 5, {**join, "member_id": first.member_id})
    assert joined.error_code.name == "none", joined
    mid, gen = joined.member_id, joined.generation_id
    sync = call(server, ApiKey.SYNC_GROUP, 3, {
        "group_id": group, "generation_id": gen, "member_id": mid, "group_instance_id": None,
        "assignments": [{"member_id": mid, "assignment": _assignment("orders", [0, 1])}],
    })  # fmt: skip
    assert sync.error_code.name == "none", sync
    return mid, gen


def _heartbeat(port: int, group: str, member: str, generation: int) -> str:
    resp = call([("127.0.0.1", port)], ApiKey.HEARTBEAT, 3, {
        "group_id": group, "generation_id": generation, "member_id": member,
        "group_instance_id": None,
    })  # fmt: skip
    return str(resp.error_code.name)


def test_a_classic_group_keeps_its_members_when_its_coordinator_dies(three: Cluster) -> None:
    c = three
    for topic, parts in (("orders", "2"), ("copies", "1")):
        keeperless("topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
                   "--partitions", parts, "--replication-factor", "3", check=True)  # fmt: skip
    p = Producer({"bootstrap.servers": c.bootstrap})
    for i in range(20):
        p.produce("orders", value=f"o{i}".encode(), partition=i % 2)
    p.flush(30)
    # a member by hand, and a confluent-kafka consumer in another group on the same
    # coordinator (one __consumer_offsets partition)
    wait_until(lambda: _coordinator(c, GROUP) in c.brokers, 60, what="__consumer_offsets")
    old = _coordinator(c, GROUP)
    member, generation = _join_and_sync(c.brokers[old].port, GROUP)
    assert _heartbeat(c.brokers[old].port, GROUP, member, generation) == "none"
    # a confluent-kafka consumer of each protocol, in groups on the same coordinator
    assigned: dict[str, list[list[TopicPartition]]] = {"classic": [], "consumer": []}
    consumers = {
        protocol: Consumer(
            {
                "bootstrap.servers": c.bootstrap,
                "group.id": f"readers-{protocol}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **(
                    {"session.timeout.ms": 30_000, "heartbeat.interval.ms": 500}
                    if protocol == "classic"
                    else {"group.protocol": "consumer"}
                ),
            }
        )
        for protocol in assigned
    }
    for protocol, cons in consumers.items():
        cons.subscribe(
            ["orders"], on_assign=lambda _c, parts, p=protocol: assigned[p].append(parts)
        )
    got = dict.fromkeys(consumers, 0)

    def read(n: int) -> bool:
        for protocol, cons in consumers.items():
            m = cons.poll(0.1)
            got[protocol] += m is not None and m.error() is None
        return min(got.values()) >= n

    try:
        wait_until(lambda: read(20), 60, what="the consumers read the topic")
        members_before = {}
        for protocol, cons in consumers.items():
            cons.commit(asynchronous=False)
            members_before[protocol] = cons.memberid()
        assert _coordinator(c, "readers-classic") == _coordinator(c, "readers-consumer") == old
        # a transactional copier of the classic group, mid-transaction at the failover
        # (its transaction coordinator on another broker: __transaction_state has one
        # replica here, so a copier whose coordinator dies waits for it to come back, as
        # in Kafka; the transaction coordinator's failover is the next test)
        wait_until(lambda: _coordinator(c, "copier-0", 1) in c.brokers, 60, what="txn state")
        tid = next(f"copier-{i}" for i in range(200) if _coordinator(c, f"copier-{i}", 1) != old)
        copier = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid})
        copier.init_transactions(30)
        copier.begin_transaction()
        copier.produce("copies", value=b"copied")
        copier.flush(30)
        c.brokers[old].kill9()
        new = 0

        def moved() -> bool:
            nonlocal new
            new = _coordinator(c, GROUP)
            return new not in (-1, old)

        wait_until(moved, 60, what="another coordinator")
        # the member by hand: the same id and generation are known to the new coordinator
        wait_until(
            lambda: _heartbeat(c.brokers[new].port, GROUP, member, generation) == "none",
            30,
            what="a heartbeat of the restored member",
        )
        # the copier's offsets go to the new coordinator, which knows its member and
        # generation: the transaction commits, nothing fenced
        classic = consumers["classic"]
        positions = classic.position(classic.assignment())
        copier.send_offsets_to_transaction(positions, classic.consumer_group_metadata(), 30)
        copier.commit_transaction(30)
        committed = classic.committed(classic.assignment(), 30)
        assert sorted((t.partition, t.offset) for t in committed) == sorted(
            (t.partition, t.offset) for t in positions
        )
        # the consumers: heartbeats on, no rebalance, and their commits are accepted
        for i in range(20, 30):
            p.produce("orders", value=f"o{i}".encode(), partition=i % 2)
        p.flush(30)
        wait_until(lambda: read(30), 60, what="the consumers read on after the failover")
        for protocol, cons in consumers.items():
            cons.commit(asynchronous=False)
            assert cons.memberid() == members_before[protocol], protocol
            assert len(assigned[protocol]) == 1, f"{protocol} rebalanced: {assigned[protocol]}"
    finally:
        for cons in consumers.values():
            cons.close()


def test_a_transaction_goes_on_when_its_coordinator_dies(tmp_path: Path) -> None:
    """The transaction coordinator fails over mid-transaction (__transaction_state with
    three replicas): the new coordinator loads the ongoing transaction, and the producer
    adds its offsets, commits, and goes on to the next transaction, nothing fenced."""
    c = Cluster(
        tmp_path, controllers=1, brokers=3,
        extra={"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "1",
               "transaction.state.log.replication.factor": "3",
               "transaction.state.log.min.isr": "2", "transaction.state.log.num.partitions": "1",
               "replica.lag.time.max.ms": "3000"},
    )  # fmt: skip
    c.start()
    try:
        keeperless("topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", "copies",
                   "--partitions", "1", "--replication-factor", "3", check=True)  # fmt: skip
        producer = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "mover"})
        producer.init_transactions(30)
        old = _coordinator(c, "mover", 1)
        assert old in c.brokers
        producer.begin_transaction()
        producer.produce("copies", value=b"first")
        producer.flush(30)
        reader = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "movers",
                           "enable.auto.commit": False})  # fmt: skip
        meta = reader.consumer_group_metadata()
        c.brokers[old].kill9()
        wait_until(lambda: _coordinator(c, "mover", 1) not in (-1, old), 60, what="a new one")
        producer.send_offsets_to_transaction([TopicPartition("copies", 0, 1)], meta, 60)
        producer.commit_transaction(60)
        producer.begin_transaction()
        producer.produce("copies", value=b"second")
        producer.commit_transaction(60)
        reader.close()
        committed = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "checker",
                              "isolation.level": "read_committed",
                              "auto.offset.reset": "earliest"})  # fmt: skip
        try:
            got: list[bytes] = []

            def read() -> bool:
                m = committed.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m.value())
                return len(got) >= 2

            committed.subscribe(["copies"])
            wait_until(read, 60, what="both transactions read committed")
            assert got == [b"first", b"second"]
        finally:
            committed.close()
        offsets = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "movers"})
        try:
            [tp] = offsets.committed([TopicPartition("copies", 0)], 30)
            assert tp.offset == 1
        finally:
            offsets.close()
    finally:
        c.stop()
