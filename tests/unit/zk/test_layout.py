"""A ZooKeeper-mode Kafka cluster's znodes read into its metadata (zk/layout.py): every
kind of metadata a migration brings, the refusals, and malformed layouts named path by
path."""

from __future__ import annotations

import json

import pytest

from keeperless.zk.layout import ZkLayoutError, parse_layout
from tests.zookeeper import CLUSTER_ID, TOPIC_IDS, kafka_layout


def problems(tree: dict[str, bytes | None]) -> list[tuple[str, str]]:
    with pytest.raises(ZkLayoutError) as e:
        parse_layout(tree)
    return e.value.problems


def test_a_kafka_3_layout_is_read_whole() -> None:
    md = parse_layout(kafka_layout())
    assert (md.cluster_id, md.controller_id, md.controller_epoch) == (CLUSTER_ID, 1, 7)
    assert sorted(md.brokers) == [1, 2, 3]
    assert md.brokers[2].endpoints == ("PLAINTEXT://broker2:9092",)
    assert md.brokers[2].rack == "rack-2"
    orders = md.topics["orders"]
    assert orders.topic_id == TOPIC_IDS["orders"]
    assert sorted(orders.partitions) == [0, 1, 2]
    p1 = orders.partitions[1]
    assert (p1.replicas, p1.leader, p1.leader_epoch, p1.isr) == ((2, 3, 1), 2, 5, (2, 3, 1))
    assert orders.configs == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    assert md.topics["payments"].configs == {}
    assert md.broker_configs == {"": {"log.retention.ms": "86400000"},
                                 "2": {"log.cleaner.threads": "2"}}  # fmt: skip
    assert md.quotas == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0},
        (("user", "alice"), ("client-id", "app-1")): {"consumer_byte_rate": 2048.0},
        (("client-id", None),): {"request_percentage": 50.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 10.0},
    }
    assert sorted((c.user, c.mechanism, c.iterations) for c in md.scram) == [
        ("alice", "SCRAM-SHA-256", 8192), ("bob@example.com", "SCRAM-SHA-512", 4096),
    ]  # fmt: skip
    assert sorted(
        (a.resource_type, a.pattern_type, a.name, a.principal, a.operation) for a in md.acls
    ) == [
        ("Cluster", "LITERAL", "kafka-cluster", "User:admin", "Alter"),
        ("Group", "PREFIXED", "app-", "User:bob@example.com", "Read"),
        ("Topic", "LITERAL", "orders", "User:alice", "Read"),
        ("Topic", "LITERAL", "orders", "User:alice", "Write"),
    ]
    assert md.producer_id_block_end == 1999
    assert md.refusals() == []


def test_a_reassignment_or_a_deletion_in_progress_is_refused() -> None:
    tree = kafka_layout()
    tree["/admin/reassign_partitions"] = json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [2, 3, 4]}]}).encode()  # fmt: skip
    tree["/admin/delete_topics/payments"] = None
    found = parse_layout(tree).refusals()
    assert len(found) == 2
    assert "reassignment is in progress (orders-0)" in found[0]
    assert "pending deletion (payments)" in found[1]
    # an API-driven reassignment (KIP-455) shows in the topic's adding_replicas only
    tree = kafka_layout()
    doc = json.loads(tree["/brokers/topics/orders"] or b"")
    doc["adding_replicas"] = {"2": [4]}
    tree["/brokers/topics/orders"] = json.dumps(doc).encode()
    assert "being moved (orders-2)" in parse_layout(tree).refusals()[0]


@pytest.mark.parametrize(
    ("path", "data", "expected"),
    [
        ("/cluster/id", b"{not json", "/cluster/id: not JSON"),
        ("/brokers/topics/orders/partitions/1/state",
         json.dumps({"leader": -1, "leader_epoch": 3, "isr": [], "controller_epoch": 7,
                     "version": 1}).encode(),
         "/brokers/topics/orders/partitions/1/state: partition has no leader"),
        ("/config/topics/orders",
         json.dumps({"version": 1, "config": {"no.such.key": "1"}}).encode(),
         "/config/topics/orders: unknown topic config 'no.such.key'"),
        ("/config/users/alice",
         json.dumps({"version": 1, "config": {"SCRAM-SHA-256": "salt=x"}}).encode(),
         "/config/users/alice: SCRAM-SHA-256 credential is not"),
        ("/kafka-acl/Topic/orders", json.dumps({"version": 1}).encode(),
         "/kafka-acl/Topic/orders: no \"acls\" list"),
        ("/brokers/topics/orders/partitions/1/state",
         json.dumps({"leader": 2, "leader_epoch": 3, "isr": [3, 1, 9], "controller_epoch": 7,
                     "version": 1}).encode(),
         "/brokers/topics/orders/partitions/1/state: isr [3, 1, 9] is not among the replicas"),
        ("/brokers/topics/orders/partitions/1/state",
         json.dumps({"leader": 2, "leader_epoch": 2**40, "isr": [2], "controller_epoch": 7,
                     "version": 1}).encode(),
         "/brokers/topics/orders/partitions/1/state: no leader or leader_epoch"),
        ("/config/topics/orders",
         json.dumps({"version": 1, "config": {"retention.ms": "abc"}}).encode(),
         "/config/topics/orders: "),
        ("/config/clients/<default>",
         json.dumps({"version": 1, "config": {"foo_rate": "2"}}).encode(),
         "/config/clients/<default>: unknown quota or user config 'foo_rate'"),
        ("/config/ips/10.0.0.1",
         json.dumps({"version": 1, "config": {"connection_creation_rate": "-5"}}).encode(),
         "/config/ips/10.0.0.1: quota connection_creation_rate='-5' is not a number >= 0"),
        ("/config/users/alice",
         json.dumps({"version": 1, "config": {
             "SCRAM-SHA-256": "salt=a,stored_key=b,server_key=c,iterations=100"}}).encode(),
         "/config/users/alice: SCRAM-SHA-256 credential is not"),
        ("/kafka-acl/Topic/orders",
         json.dumps({"version": 1, "acls": [{"principal": "alice", "permissionType": "Allow",
                                             "operation": "Read", "host": "*"}]}).encode(),
         "/kafka-acl/Topic/orders: principal 'alice' is not TYPE:NAME"),
        ("/latest_producer_id_block",
         json.dumps({"version": 1, "broker": 1, "block_start": "0",
                     "block_end": str(2**63 - 1)}).encode(),
         "/latest_producer_id_block: no block_end number"),
    ],
    ids=["bad-json", "no-leader", "unknown-config", "bad-scram", "no-acls", "isr-outside",
         "huge-epoch", "bad-config-value", "unknown-quota", "negative-quota", "few-iterations",
         "bare-principal", "huge-block"],
)  # fmt: skip
def test_malformed_znodes_are_named(path: str, data: bytes, expected: str) -> None:
    tree = kafka_layout()
    tree[path] = data
    assert any(f"{p}: {what}".startswith(expected) for p, what in problems(tree)), problems(tree)


def test_missing_znodes_are_named_all_at_once() -> None:
    tree = kafka_layout()
    del tree["/cluster/id"]
    del tree["/brokers/topics/payments/partitions/0/state"]
    found = problems(tree)
    assert ("/cluster/id", "missing") in found
    assert ("/brokers/topics/payments/partitions/0/state", "missing") in found


def test_the_records_are_kafkas() -> None:
    from keeperless.metadata import _records_gen as r
    from keeperless.zk.records import POST_MIGRATION, migration_records

    tree = kafka_layout()
    tree["/kafka-acl/Topic/odd"] = json.dumps({"version": 1, "acls": [
        {"principal": "User:x", "permissionType": "Allow", "operation": "Fly",
         "host": "*"}]}).encode()  # fmt: skip
    records, skipped = migration_records(parse_layout(tree))
    assert skipped == ["ACL Allow User:x Fly on Topic:LITERAL:odd (unknown to Kafka)"]
    kinds = [type(rec).__name__ for rec in records]
    assert kinds.count("TopicRecord") == 2
    assert kinds.count("PartitionRecord") == 5
    acl = [rec for rec in records if isinstance(rec, r.AccessControlEntryRecord)
           and rec.resource_name == "app-"]  # fmt: skip
    assert [(a.resource_type, a.pattern_type, a.operation, a.permission_type) for a in acl] == [
        (3, 4, 3, 3)  # GROUP, PREFIXED, READ, ALLOW
    ]
    cluster = [rec for rec in records if isinstance(rec, r.AccessControlEntryRecord)
               and rec.resource_type == 4]  # fmt: skip
    assert [(a.resource_name, a.operation) for a in cluster] == [("kafka-cluster", 7)]  # ALTER
    [ids] = [rec for rec in records if isinstance(rec, r.ProducerIdsRecord)]
    assert ids.next_producer_id == 2000
    assert records[-1] == r.ZkMigrationStateRecord(zk_migration_state=POST_MIGRATION)
    [p1] = [rec for rec in records if isinstance(rec, r.PartitionRecord)
            and rec.partition_id == 1 and len(rec.replicas) == 3]  # fmt: skip
    assert (p1.leader, p1.leader_epoch, p1.isr) == (2, 5, (2, 3, 1))


def test_topic_ids_must_be_unique_and_not_reserved() -> None:
    tree = kafka_layout()
    doc = json.loads(tree["/brokers/topics/payments"] or b"")
    doc["topic_id"] = TOPIC_IDS["orders"]
    tree["/brokers/topics/payments"] = json.dumps(doc).encode()
    assert any("is also topic orders's" in what for _p, what in problems(tree))
    doc["topic_id"] = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's ZERO_UUID
    tree["/brokers/topics/payments"] = json.dumps(doc).encode()
    assert ("/brokers/topics/payments", "topic_id: 'AAAAAAAAAAAAAAAAAAAAAA' is reserved") in (
        problems(tree)
    )


def test_a_missing_partition_state_is_one_problem() -> None:
    tree = kafka_layout()
    del tree["/brokers/topics/payments/partitions/0/state"]
    assert [p for p, _ in problems(tree)] == ["/brokers/topics/payments/partitions/0/state"]


def test_duplicate_acls_are_one_and_encrypted_passwords_are_not_migrated() -> None:
    from keeperless.zk.records import migration_records

    tree = kafka_layout()
    acl = {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
           "host": "*"}  # fmt: skip
    tree["/kafka-acl/Topic/orders"] = json.dumps({"version": 1, "acls": [acl, acl]}).encode()
    tree["/config/brokers/2"] = json.dumps({"version": 1, "config": {
        "listener.name.plaintext.ssl.keystore.password": "c2VjcmV0", "log.cleaner.threads": "2",
    }}).encode()  # fmt: skip
    md = parse_layout(tree)
    assert len([a for a in md.acls if a.name == "orders"]) == 1
    records, skipped = migration_records(md)
    assert any("ssl.keystore.password" in s and "password.encoder.secret" in s for s in skipped)
    assert not any(getattr(r, "name", "").endswith("keystore.password") for r in records)
