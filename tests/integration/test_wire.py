"""Kafka 4.x on the wire: requests answered at once where Kafka answers at once, and
the APIs and versions clients expect (issue 13)."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.cluster import Cluster, Node, _recv, kafka_request, wait_until


class Pipe:
    """One connection, requests written back to back before any answer is read (as
    clients pipeline them); answers are read in order with the time each took."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sent: list[tuple[int, int, float]] = []

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        from kio.index import load_request_schema

        from keeperless.protocol.build import build
        from keeperless.protocol.framing import encode_request

        req = build(load_request_schema(api_key, version), body)
        corr = len(self.sent) + 1
        self.sock.sendall(encode_request(api_key, version, corr, "test", req))
        self.sent.append((api_key, version, time.monotonic()))

    def receive(self) -> list[tuple[Any, float]]:
        from keeperless.protocol.framing import decode_response

        out = []
        for key, version, t0 in self.sent:
            size = struct.unpack(">i", _recv(self.sock, 4))[0]
            _, resp = decode_response(memoryview(_recv(self.sock, size)), key, version)
            out.append((resp, time.monotonic() - t0))
        self.sent = []
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def rf3_offsets(tmp_path: Path) -> Iterator[Node]:
    """One node whose __consumer_offsets cannot be created (replication factor 3)."""
    n = Node(tmp_path, extra={"offsets.topic.replication.factor": "3"})
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _fetch_body(topic_id: Any) -> dict[str, Any]:
    return {
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def test_requests_that_cannot_succeed_are_answered_at_once(rf3_offsets: Node) -> None:
    """A FindCoordinator that cannot be satisfied (no __consumer_offsets on one broker
    with replication factor 3) and a Metadata naming an illegal topic are answered at
    once with Kafka's errors; the requests behind them on the connection are not held
    (they were held 10 s each: a consumer with a group id read ~1,000 msg/s)."""
    node = rf3_offsets
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(20):
        p.produce("data", value=b"%d" % i)
    assert p.flush(30) == 0
    pipe = Pipe(node.port)
    try:
        for _ in range(3):
            pipe.send(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
            pipe.send(
                3,
                12,
                {
                    "topics": [
                        {"name": "bad topic!", "topic_id": None},
                        {"name": "data", "topic_id": None},
                        {"name": "fresh", "topic_id": None},
                    ],
                    "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False,
                },
            )
        answers = pipe.receive()
        find, meta = answers[0][0], answers[1][0]
        assert find.coordinators[0].error_code == ErrorCode.coordinator_not_available
        errors = {t.name: t.error_code for t in meta.topics}
        assert errors["bad topic!"] == ErrorCode.invalid_topic_exception
        assert errors["data"] == ErrorCode.none
        assert errors["fresh"] in (ErrorCode.leader_not_available, ErrorCode.none)
        # all six answered well inside the 10 s the broker used to hold each
        assert max(t for _, t in answers) < 5.0, [round(t, 2) for _, t in answers]
        topic_id = next(t.topic_id for t in meta.topics if t.name == "data")
        pipe.send(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        pipe.send(1, 17, _fetch_body(topic_id))
        (find, _), (fetch, waited) = pipe.receive()
        assert find.coordinators[0].error_code == ErrorCode.coordinator_not_available
        assert fetch.responses[0].partitions[0].error_code == ErrorCode.none
        assert waited < 5.0
    finally:
        pipe.close()
    # the auto-created topic appears; the refused coordinator topic is explained once
    wait_until(lambda: "Cannot create topic __consumer_offsets" in node.logs(), 10)
    assert "offsets.topic.replication.factor" in node.logs()
    assert node.logs().count("Cannot create topic __consumer_offsets") == 1


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One controller and three brokers, as client suites assume (RF 3 topics)."""
    c = Cluster(
        tmp_path_factory.mktemp("three"),
        controllers=1,
        brokers=3,
        extra={"offsets.topic.replication.factor": "3"},
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _leader(c: Cluster, topic: str, partition: int = 0) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    md = admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]
    return int(md.leader)


def test_offset_for_leader_epoch_names_where_each_epoch_ends(three: Cluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    admin.create_topics([NewTopic("ofle", 1, 3)])["ofle"].result(20)
    p = Producer({"bootstrap.servers": three.bootstrap, "acks": "all"})
    for i in range(5):
        p.produce("ofle", value=b"%d" % i)
    assert p.flush(30) == 0
    first = _leader(three, "ofle")
    three.brokers[first].stop()  # controlled shutdown: leader epoch 1 elsewhere
    try:
        wait_until(lambda: _leader(three, "ofle") not in (first, -1), 30)
        for i in range(3):
            p.produce("ofle", value=b"x%d" % i)
        assert p.flush(30) == 0
        second = _leader(three, "ofle")

        def ask(leader_epoch: int, current: int = -1) -> Any:
            body = {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": "ofle",
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": current,
                                "leader_epoch": leader_epoch,
                            }
                        ],
                    }
                ],
            }
            return kafka_request(three.brokers[second].port, 23, 4, body).topics[0].partitions[0]

        e0 = ask(0)
        assert (e0.error_code, e0.leader_epoch, e0.end_offset) == (ErrorCode.none, 0, 5)
        e1 = ask(1)
        assert (e1.error_code, e1.leader_epoch, e1.end_offset) == (ErrorCode.none, 1, 8)
        assert ask(1, current=0).error_code == ErrorCode.fenced_leader_epoch
        assert ask(1, current=7).error_code == ErrorCode.unknown_leader_epoch
        other = next(b for b in three.brokers if b not in (first, second))
        body = {"replica_id": -1, "topics": [{"topic": "ofle", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}  # fmt: skip
        r = kafka_request(three.brokers[other].port, 23, 4, body).topics[0].partitions[0]
        assert r.error_code == ErrorCode.not_leader_or_follower
    finally:
        three.brokers[first].start()


def _topic_configs(bootstrap: str, topic: str) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(10)


def test_legacy_alter_configs_replaces_the_set(three: Cluster) -> None:
    """AlterConfigs (API 33): deprecated but served by Kafka 4.x (librdkafka's and
    kafka-python's alter_configs use it): the given set replaces the topic's own."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    new = NewTopic("legacy", 1, 3, config={"retention.ms": "1000", "segment.ms": "5000"})
    admin.create_topics([new])["legacy"].result(20)
    res = ConfigResource(
        ConfigResource.Type.TOPIC, "legacy", set_config={"cleanup.policy": "compact"}
    )
    with pytest.warns(DeprecationWarning, match="alter_configs"):
        futures = admin.alter_configs([res])
    futures[res].result(20)
    got = _topic_configs(three.bootstrap, "legacy")
    assert got["cleanup.policy"].value == "compact"
    assert got["retention.ms"].value == "604800000"  # not in the set: back to the default
    assert got["retention.ms"].source != 1  # not a dynamic topic config any more

    # Kafka's refusals, one resource at a time; a resource named twice is refused
    def alter(*resources: tuple[str, dict[str, str]]) -> list[ErrorCode]:
        body = {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in cfg.items()],
                }
                for name, cfg in resources
            ],
            "validate_only": False,
        }
        port = next(iter(three.brokers.values())).port
        return [r.error_code for r in kafka_request(port, 33, 2, body).responses]

    assert alter(("legacy", {"retention.ms": "soon"}), ("nope", {})) == [
        ErrorCode.invalid_config,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert alter(("legacy", {"retention.ms": "3"}), ("legacy", {})) == [
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    assert _topic_configs(three.bootstrap, "legacy")["cleanup.policy"].value == "compact"
    assert alter(("legacy", {"retention.ms": "2000"})) == [ErrorCode.none]
    got = _topic_configs(three.bootstrap, "legacy")
    assert (got["retention.ms"].value, got["cleanup.policy"].value) == ("2000", "delete")


def test_offset_delete(three: Cluster) -> None:
    """OffsetDelete (KIP-496) through kafka-python: offsets of a topic the group no
    longer consumes go; those of a subscribed topic stay (GROUP_SUBSCRIBED_TO_TOPIC)."""
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    for f in admin.create_topics([NewTopic("od-a", 1, 3), NewTopic("od-b", 1, 3)]).values():
        f.result(20)
    c = CConsumer(
        {"bootstrap.servers": three.bootstrap, "group.id": "od", "session.timeout.ms": 6000}
    )
    c.subscribe(["od-a"])
    wait_until(lambda: c.poll(0.2) is None and c.assignment() != [], 30, what="an assignment")
    c.commit(
        offsets=[TopicPartition("od-a", 0, 3), TopicPartition("od-b", 0, 5)], asynchronous=False
    )
    kadmin = KafkaAdminClient(bootstrap_servers=three.bootstrap)
    try:
        got = kadmin.delete_group_offsets("od", [KTP("od-b", 0), KTP("od-a", 0)])
        assert got == {KTP("od-b", 0): NoError, KTP("od-a", 0): GroupSubscribedToTopicError}
        committed = c.committed([TopicPartition("od-a", 0), TopicPartition("od-b", 0)], 10)
        assert [tp.offset for tp in committed] == [3, -1001]
        c.close()
        assert kadmin.delete_group_offsets("od", [KTP("od-a", 0)]) == {KTP("od-a", 0): NoError}
        with pytest.raises(GroupIdNotFoundError):
            kadmin.delete_group_offsets("never-was", [KTP("od-a", 0)])
    finally:
        kadmin.close()


def test_describe_quorum_through_a_broker(three: Cluster) -> None:
    """Brokers forward DescribeQuorum to the active controller (Kafka 4.x serves it on
    the broker listener: kafka-metadata-quorum --bootstrap-server)."""
    from tests.integration.cluster import keeperless

    body = {
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
    }
    for b in three.brokers.values():
        resp = kafka_request(b.port, 55, 2, body)
        p = resp.topics[0].partitions[0]
        assert p.error_code == ErrorCode.none
        assert p.leader_id == 1
        assert [v.replica_id for v in p.current_voters] == [1]
        assert sorted(o.replica_id for o in p.observers) == sorted(three.brokers)
    out = keeperless(
        "metadata-quorum", "--bootstrap-server", three.bootstrap, "describe", "--status", check=True
    ).stdout
    fields = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in out.splitlines())}
    assert fields["LeaderId"] == "1"
    assert [v["id"] for v in json.loads(fields["CurrentVoters"])] == [1]
    assert [o["id"] for o in json.loads(fields["CurrentObservers"])] == sorted(three.brokers)


def test_list_config_resources(three: Cluster) -> None:
    """ListConfigResources v1 (KIP-1142) through kafka-python: topics, brokers, broker
    loggers; a resource type outside Kafka 4.1's set is UNSUPPORTED_VERSION."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    admin.create_topics([NewTopic("lcr", 1, 1)])["lcr"].result(20)
    kadmin = KafkaAdminClient(bootstrap_servers=three.bootstrap)
    try:
        got = kadmin.list_config_resources(["TOPIC", "BROKER"])
        assert "lcr" in got["topic"]
        assert sorted(got["broker"]) == sorted(str(b) for b in three.brokers)
        everything = kadmin.list_config_resources()
        assert sorted(everything["broker_logger"]) == sorted(got["broker"])
    finally:
        kadmin.close()
    port = next(iter(three.brokers.values())).port
    assert kafka_request(port, 74, 1, {"resource_types": [1]}).error_code == (
        ErrorCode.unsupported_version
    )
    assert kafka_request(port, 74, 0, {}).config_resources == ()  # no client metrics


def test_describe_topic_partitions_pages_with_a_cursor(three: Cluster) -> None:
    """DescribeTopicPartitions (KIP-966): name order, a partition limit per answer and
    a cursor to resume from; unknown and illegal names answered in place."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    for f in admin.create_topics([NewTopic("dtp-a", 3, 1), NewTopic("dtp-b", 2, 1)]).values():
        f.result(20)
    port = next(iter(three.brokers.values())).port
    names = ["dtp-b", "dtp-a", "dtp-missing", "bad name!"]

    def page(cursor: dict[str, Any] | None, limit: int) -> Any:
        body = {
            "topics": [{"name": n} for n in names],
            "response_partition_limit": limit,
            "cursor": cursor,
        }
        return kafka_request(port, 75, 0, body)

    seen: list[tuple[str, int]] = []
    errors: dict[str, ErrorCode] = {}
    cursor = None
    for _ in range(10):
        resp = page(cursor, 2)
        for t in resp.topics:
            if t.error_code != ErrorCode.none:
                errors[t.name] = t.error_code
            seen += [(t.name, p.partition_index) for p in t.partitions]
            assert all(len(p.isr_nodes) == 1 and p.leader_id in three.brokers for p in t.partitions)
        assert sum(len(t.partitions) for t in resp.topics) <= 2
        if resp.next_cursor is None:
            break
        cursor = {
            "topic_name": resp.next_cursor.topic_name,
            "partition_index": resp.next_cursor.partition_index,
        }
    assert seen == [("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2), ("dtp-b", 0), ("dtp-b", 1)]
    assert errors == {
        "bad name!": ErrorCode.invalid_topic_exception,
        "dtp-missing": ErrorCode.unknown_topic_or_partition,
    }
    # confluent-kafka's describe_topics uses it on a 4.x broker
    from confluent_kafka import TopicCollection

    described = admin.describe_topics(TopicCollection(["dtp-a"]))["dtp-a"].result(10)
    assert [p.id for p in described.partitions] == [0, 1, 2]


def test_describe_scram_credentials_of_every_user(three: Cluster) -> None:
    """An empty users array means every user, as a null one does (Kafka); a user named
    twice is DUPLICATE_RESOURCE."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for user in ("ann", "bob"):
        up = UserScramCredentialUpsertion(user, info, b"secret-" + user.encode())
        admin.alter_user_scram_credentials([up])[user].result(20)
    port = next(iter(three.brokers.values())).port

    def users(body: dict[str, Any]) -> dict[str, ErrorCode]:
        wait_until(lambda: kafka_request(port, 50, 0, body).results, 10)
        return {r.user: r.error_code for r in kafka_request(port, 50, 0, body).results}

    assert users({"users": []}) == {"ann": ErrorCode.none, "bob": ErrorCode.none}
    assert users({"users": None}) == {"ann": ErrorCode.none, "bob": ErrorCode.none}
    assert users({"users": [{"name": "ann"}, {"name": "ann"}]}) == {
        "ann": ErrorCode.duplicate_resource
    }
    assert set(admin.describe_user_scram_credentials().result(20)) == {"ann", "bob"}


def test_describe_configs_as_kafka_fills_them(three: Cluster) -> None:
    """Every broker config (clients look up e.g. advertised.listeners), topic configs
    with their types, sources and synonyms, and the cluster-wide dynamic default
    reaching topics without their own value."""
    from confluent_kafka.admin import (
        AdminClient,
        ConfigResource,
        ConfigSource,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    admin.create_topics([NewTopic("dc", 1, 3, config={"retention.ms": "1000"})])["dc"].result(20)
    broker_id = str(min(three.brokers))
    res = ConfigResource(ConfigResource.Type.BROKER, broker_id)
    configs = admin.describe_configs([res])[res].result(10)
    assert len(configs) > 60
    port = three.brokers[int(broker_id)].port
    assert configs["advertised.listeners"].value == f"PLAINTEXT://127.0.0.1:{port}"
    assert configs["advertised.listeners"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["advertised.listeners"].is_read_only  # in KRaft, as Kafka 4.x
    assert configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["node.id"].is_read_only
    assert not configs["log.retention.ms"].is_read_only
    # a topic: its own value, then what the brokers say
    t = ConfigResource(ConfigResource.Type.TOPIC, "dc")
    got = admin.describe_configs([t])[t].result(10)
    assert got["retention.ms"].value == "1000"
    assert got["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [s.name for s in got["retention.ms"].synonyms.values()][:2] == [
        "retention.ms",
        "log.retention.hours",
    ]
    assert got["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    # the raw answer carries types and documentation (v4)
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "dc", "configuration_keys": ["cleanup.policy"]}
        ],
        "include_synonyms": False,
        "include_documentation": True,
    }
    (entry,) = kafka_request(port, 32, 4, body).results[0].configs
    assert (entry.name, entry.config_type) == ("cleanup.policy", 7)  # LIST
    assert entry.documentation
    # the cluster-wide dynamic default reaches the topic configs that have no value
    from tests.integration.cluster import keeperless

    keeperless(
        "configs", "--bootstrap-server", three.bootstrap, "--entity-type", "brokers",
        "--entity-default", "--alter", "--add-config", "log.segment.bytes=2097152", check=True,
    )  # fmt: skip

    def segment_bytes() -> Any:
        return admin.describe_configs([t])[t].result(10)["segment.bytes"]

    wait_until(lambda: segment_bytes().value == "2097152", 10)
    assert segment_bytes().source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    body = {
        "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
        "include_synonyms": False,
        "include_documentation": False,
    }
    cluster = kafka_request(port, 32, 4, body).results[0].configs
    # and min.insync.replicas, which a controller with eligible leader replicas (on in
    # a new cluster, as Kafka 4.1) writes cluster-wide when it becomes active
    dynamic_default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert [(c.name, c.value, c.config_source) for c in cluster] == [
        ("log.segment.bytes", "2097152", dynamic_default),
        ("min.insync.replicas", "1", dynamic_default),
    ]


def test_alter_replica_log_dirs(three: Cluster) -> None:
    """One log directory per broker: moving a replica to it is done at once; another
    directory is LOG_DIR_NOT_FOUND, a replica not hosted here REPLICA_NOT_AVAILABLE."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    admin.create_topics([NewTopic("arld", 1, 3)])["arld"].result(20)
    b = next(iter(three.brokers.values()))
    wait_until(lambda: (b.data / "arld-0").exists(), 10)

    def move(path: str, topic: str) -> ErrorCode:
        body = {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [0]}]}]}
        return kafka_request(b.port, 34, 2, body).results[0].partitions[0].error_code

    assert move(str(b.data), "arld") == ErrorCode.none
    assert move("/nonexistent/dir", "arld") == ErrorCode.log_dir_not_found
    assert move(str(b.data), "no-such-topic") == ErrorCode.replica_not_available


def test_authorized_operations_without_an_authorizer(three: Cluster) -> None:
    """Asked for, the authorized operations are every operation the resource supports
    (no authorizer: Kafka's answer); not asked for, they are absent."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    admin.create_topics([NewTopic("authops", 1, 1)])["authops"].result(20)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert AclOperation.DESCRIBE in cluster.authorized_operations
    assert AclOperation.IDEMPOTENT_WRITE in cluster.authorized_operations
    assert AclOperation.READ not in cluster.authorized_operations
    assert admin.describe_cluster().result(10).authorized_operations is None
    topic = admin.describe_topics(TopicCollection(["authops"]), include_authorized_operations=True)[
        "authops"
    ].result(10)
    assert {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE} <= set(
        topic.authorized_operations
    )
    assert AclOperation.CLUSTER_ACTION not in topic.authorized_operations
