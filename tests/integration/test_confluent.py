"""confluent-kafka (librdkafka) against a real node: admin, produce, consume, groups."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from keeperless.protocol.records import build_batch
from tests.integration.cluster import Node, kafka_request, wait_until
from tests.integration.conftest import AUTHORIZED, running


def create(node: Node, name: str, partitions: int = 1, config: dict[str, str] | None = None):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    fs[name].result(15)
    return admin


def consume_all(node: Node, topic: str, n: int, group: str | None = None, timeout: float = 30):
    c = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": group or f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    if group is None:
        meta = c.list_topics(topic, timeout=10)
        c.assign([TopicPartition(topic, p, 0) for p in meta.topics[topic].partitions])
    else:
        c.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        out.append(m)
    if group is not None:
        c.commit(asynchronous=False)
    c.close()
    return out


def test_admin_create_describe_delete(node: Node) -> None:
    admin = create(node, "orders", 3, {"retention.ms": "3600000"})
    md = admin.list_topics(timeout=10)
    assert len(md.topics["orders"].partitions) == 3
    assert md.topics["orders"].partitions[0].leader == 1
    with pytest.raises(KafkaException, match="already exists"):
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
    with pytest.raises(KafkaException, match="illegal"):
        admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"].result(10)
    with pytest.raises(KafkaException, match="replicat"):
        admin.create_topics([NewTopic("rf3", 1, 3)])["rf3"].result(10)
    with pytest.raises(KafkaException, match="Unknown topic config"):
        admin.create_topics([NewTopic("cfg", 1, 1, config={"nope": "1"})])["cfg"].result(10)
    res = admin.describe_configs([ConfigResource("topic", "orders")])
    cfg = next(iter(res.values())).result(10)
    assert cfg["retention.ms"].value == "3600000"
    assert cfg["cleanup.policy"].value == "delete"
    admin.create_partitions([NewPartitions("orders", 5)])["orders"].result(10)
    assert len(admin.list_topics(timeout=10).topics["orders"].partitions) == 5
    admin.delete_topics(["orders"])["orders"].result(10)
    assert "orders" not in admin.list_topics(timeout=10).topics
    assert not (node.data / "orders-0").exists()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_acks(node: Node, acks: str) -> None:
    topic = f"acks-{acks}"
    create(node, topic, 2)
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": acks, "linger.ms": 5})
    for i in range(200):
        p.produce(topic, key=str(i % 7).encode(), value=b"value-%d" % i)
    assert p.flush(20) == 0
    msgs = consume_all(node, topic, 200)
    assert sorted(m.value() for m in msgs) == sorted(b"value-%d" % i for i in range(200))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_keys_headers(node: Node, codec: str) -> None:
    topic = f"c-{codec}"
    create(node, topic)
    p = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 20,
        }
    )
    for i in range(100):
        key = None if i % 10 == 0 else b"k%d" % i
        p.produce(topic, key=key, value=b"x" * 50 + b"%d" % i, headers=[("h", b"%d" % i)])
    assert p.flush(20) == 0
    msgs = consume_all(node, topic, 100)
    assert [m.offset() for m in msgs] == list(range(100))
    for i, m in enumerate(msgs):
        assert m.key() == (None if i % 10 == 0 else b"k%d" % i)
        assert m.value() == b"x" * 50 + b"%d" % i
        assert m.headers() == [("h", b"%d" % i)]
    # the batches are stored as the client compressed them
    seg = (node.data / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    attrs = int.from_bytes(seg[21:23], "big") & 7
    assert attrs == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]


def test_group_of_two_commit_restart_resume(node: Node) -> None:
    topic = "grouped"
    create(node, topic, 4)
    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(400):
        p.produce(topic, key=b"%d" % i, value=b"%d" % i)
    assert p.flush(20) == 0

    conf = {
        "bootstrap.servers": node.bootstrap,
        "group.id": "two",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
    }
    c1, c2 = Consumer(conf), Consumer(conf)
    c1.subscribe([topic])
    c2.subscribe([topic])
    seen: dict[int, list[bytes]] = {1: [], 2: []}
    deadline = time.monotonic() + 40
    while len(seen[1]) + len(seen[2]) < 300 and time.monotonic() < deadline:
        for i, c in ((1, c1), (2, c2)):
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen[i].append(m.value())
    assert seen[1], "both consumers get partitions"
    assert seen[2], "both consumers get partitions"
    assert set(c1.assignment()).isdisjoint(set(c2.assignment()))
    c1.commit(asynchronous=False)
    c2.commit(asynchronous=False)
    first = set(seen[1]) | set(seen[2])
    c1.close()
    c2.close()

    node.restart()

    rest = consume_all(node, topic, 400 - len(first), group="two")
    second = [m.value() for m in rest]
    assert len(second) == len(set(second))
    assert first.isdisjoint(second), "no duplicate after restart"
    assert first | set(second) == {b"%d" % i for i in range(400)}, "no loss after restart"


def test_idempotent_duplicates_are_rejected(node: Node) -> None:
    """A producer retries a batch whose response was lost: the same batch (producer id,
    epoch, base sequence) arrives twice. The broker answers the retry with the offset it
    gave the first copy and stores it once; a batch that skips a sequence is refused
    (OUT_OF_ORDER_SEQUENCE_NUMBER). The batches go over the wire by hand, since no client
    library sends a duplicate on purpose."""
    topic = "idem"
    create(node, topic)
    init = kafka_request(
        node.port,
        22,
        4,
        {
            "transactional_id": None,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert int(init.error_code) == 0
    pid, epoch = init.producer_id, init.producer_epoch

    def produce(records: list[bytes], sequence: int) -> tuple[int, int]:
        batch = build_batch(
            [(None, v, ()) for v in records],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
            timestamp_ms=int(time.time() * 1000),
        )
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        }
        part = kafka_request(node.port, 0, 8, body).responses[0].partition_responses[0]
        return int(part.error_code), part.base_offset

    assert produce([b"a", b"b"], 0) == (0, 0)
    assert produce([b"c"], 2) == (0, 2)
    assert produce([b"c"], 2) == (0, 2), "a retried batch must get its first offset"
    assert produce([b"a", b"b"], 0) == (0, 0), "an older duplicate too"
    err, _ = produce([b"e"], 5)  # sequence 3 and 4 never came
    assert err == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce([b"d"], 3) == (0, 3)
    msgs = consume_all(node, topic, 4)
    assert [m.value() for m in msgs] == [b"a", b"b", b"c", b"d"]
    assert [m.offset() for m in msgs] == [0, 1, 2, 3]
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "idem-hw"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 4)
    c.close()


def test_auto_create_on_produce_and_list_offsets(node: Node) -> None:
    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(10):
        p.produce("auto-created", value=b"%d" % i)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "lo"})
    lo, hi = c.get_watermark_offsets(TopicPartition("auto-created", 0), timeout=10)
    assert (lo, hi) == (0, 10)
    ts = c.offsets_for_times([TopicPartition("auto-created", 0, 0)], timeout=10)
    assert ts[0].offset == 0
    c.close()
    wait_until(lambda: (node.data / "auto-created-0").exists(), 5)
    # only Kafka's internal topics are never auto-created: a name that merely starts
    # with "__" is an ordinary topic (Debezium's heartbeats go to __debezium-heartbeat.*;
    # a CDC task failed on UNKNOWN_TOPIC_OR_PARTITION before)
    for i in range(3):
        p.produce("__debezium-heartbeat.db1", value=b"%d" % i)
    assert p.flush(20) == 0
    md = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10)
    assert "__debezium-heartbeat.db1" in md.topics
    internal = kafka_request(node.port, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})  # fmt: skip  # noqa: E501
    flags = {t.name: t.is_internal for t in internal.topics}
    assert flags["__debezium-heartbeat.db1"] is False


def test_log_append_time_and_min_insync_replicas(node: Node) -> None:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError

    create(node, "lat", config={"message.timestamp.type": "LogAppendTime"})
    p = Producer({"bootstrap.servers": node.bootstrap})
    before = int(time.time() * 1000)
    p.produce("lat", value=b"x", timestamp=1000)
    assert p.flush(10) == 0
    [m] = consume_all(node, "lat", 1)
    kind, ts = m.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    assert ts >= before - 1000

    create(node, "misr", config={"min.insync.replicas": "2"})
    errors: list[KafkaError] = []
    strict = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "acks": "all",
            "message.timeout.ms": 3000,
            "retries": 0,
        }
    )
    strict.produce("misr", value=b"x", on_delivery=lambda e, _m: errors.append(e))
    strict.flush(10)
    assert errors
    assert errors[0] is not None
    assert errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS
    leader_only = Producer({"bootstrap.servers": node.bootstrap, "acks": "1"})
    leader_only.produce("misr", value=b"y")
    assert leader_only.flush(10) == 0


@pytest.fixture
def authorized(tmp_path: Path) -> Iterator[Node]:
    """A node whose StandardAuthorizer enforces ACLs, allowing what no ACL names."""
    yield from running(Node(tmp_path, extra=AUTHORIZED))


def _everything() -> Any:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


def test_acls_without_an_authorizer_are_security_disabled(node: Node) -> None:
    """As Kafka's: with no authorizer.class.name nothing would enforce an ACL, so
    CreateAcls, DescribeAcls and DeleteAcls answer SECURITY_DISABLED and store nothing."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    read = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                      "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    with pytest.raises(KafkaException, match="SECURITY_DISABLED|No Authorizer") as made:
        admin.create_acls([read])[read].result(timeout=20)
    assert made.value.args[0].code() == KafkaError.SECURITY_DISABLED
    # librdkafka passes over DescribeAcls' error (an empty list); kafka-python raises it
    assert admin.describe_acls(_everything()).result(timeout=20) == []
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import SecurityDisabledError

    kp = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        anything = ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY)
        with pytest.raises(SecurityDisabledError, match="No Authorizer is configured"):
            kp.describe_acls(ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                                       anything))  # fmt: skip
    finally:
        kp.close()
    with pytest.raises(KafkaException) as deleted:
        admin.delete_acls([_everything()])[_everything()].result(timeout=20)
    assert deleted.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_acls_through_the_admin_client(authorized: Node) -> None:
    """CreateAcls / DescribeAcls / DeleteAcls with confluent-kafka's AdminClient on a
    node with an authorizer (the records live in the metadata log)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    node = authorized
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    read = AclBinding(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    write = AclBinding(
        ResourceType.TOPIC,
        "ord",
        ResourcePatternType.PREFIXED,
        "User:bob",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for fut in admin.create_acls([read, write]).values():
        fut.result(timeout=20)
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = admin.describe_acls(everything).result(timeout=20)
    assert sorted(found, key=str) == sorted([read, write], key=str)
    matching_orders = AclBindingFilter(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert len(admin.describe_acls(matching_orders).result(timeout=20)) == 2
    bad = AclBinding(
        ResourceType.TOPIC,
        "x",
        ResourcePatternType.LITERAL,
        "alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException, match="principal"):
        admin.create_acls([bad])[bad].result(timeout=20)
    bob = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:bob",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deleted = admin.delete_acls([bob])[bob].result(timeout=20)
    assert deleted == [write]
    assert admin.describe_acls(everything).result(timeout=20) == [read]
    # they live in the metadata log: a restart keeps them
    node.restart()
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    assert admin.describe_acls(everything).result(timeout=20) == [read]


def test_client_quotas_round_trip(node: Node) -> None:
    """AlterClientQuotas through a broker (forwarded to the controller), then
    DescribeClientQuotas from the broker's image, across a restart."""
    from keeperless.tools.client import call

    server = [("127.0.0.1", node.port)]
    alter = {
        "entries": [
            {
                "entity": [{"entity_type": "user", "entity_name": "alice"}],
                "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
            },
            {
                "entity": [{"entity_type": "user", "entity_name": "bob"}],
                "ops": [{"key": "bogus", "value": 1.0, "remove": False}],
            },
        ],
        "validate_only": False,
    }
    resp = call(server, 49, 1, alter)
    assert [int(e.error_code) for e in resp.entries] == [0, 42]  # INVALID_REQUEST
    assert "Invalid configuration key bogus" in resp.entries[1].error_message

    def describe() -> list[tuple[str, str | None, str, float]]:
        d = call(
            server,
            48,
            1,
            {
                "components": [{"entity_type": "user", "match_type": 2, "match": None}],
                "strict": False,
            },
        )
        return [
            (e.entity[0].entity_type, e.entity[0].entity_name, v.key, v.value)
            for e in d.entries
            for v in e.values
        ]

    assert describe() == [("user", "alice", "producer_byte_rate", 1024.0)]
    node.restart()
    assert describe() == [("user", "alice", "producer_byte_rate", 1024.0)]


def test_scram_credentials_through_the_admin_client(node: Node) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    up = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"secret"
    )
    for fut in admin.alter_user_scram_credentials([up]).values():
        fut.result(timeout=20)
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=20)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=20)
    gone = UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)
    for fut in admin.alter_user_scram_credentials([gone]).values():
        fut.result(timeout=20)
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=20)


def test_a_consumer_of_an_empty_partition_reads_on_after_a_restart(node: Node) -> None:
    """A Connect worker's offset-topic reader hung after broker restarts (CI of c167694):
    asked where epoch 0 of an empty partition ends, its new leader (epoch bumped by the
    restart) held no epoch and answered UNDEFINED; librdkafka took that for a truncation,
    reset, and read nothing more from the partition. Kafka's leader holds its epoch from
    the election on and answers (0, 0)."""
    create(node, "quiet", 2)
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "quiet",
                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.assign([TopicPartition("quiet", p, -2) for p in (0, 1)])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # fetching both, at leader epoch 0
            c.consume(10, 0.1)
        node.kill9()
        node.start()
        p = Producer({"bootstrap.servers": node.bootstrap})
        for i in range(5):
            p.produce("quiet", b"after-%d" % i, partition=i % 2)
        assert p.flush(20) == 0
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(10, 0.2) if m.error() is None]
        assert sorted(got) == [b"after-%d" % i for i in range(5)], "records after the restart"
    finally:
        c.close()
