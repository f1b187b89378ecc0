"""Issue 17: the ACLs of the metadata log enforced by the StandardAuthorizer, principal
by principal (SASL/PLAIN users on a SASL_PLAINTEXT listener), set with `acls` as with
kafka-acls.sh: no ACL, ALLOW, DENY overriding ALLOW, PREFIXED patterns, host
restrictions and a super user, for produce, consume, groups, topic admin, configs,
transactional ids and cluster operations; Metadata hides what a principal may not
describe."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Node, free_port, keeperless

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}


def _name(err: Any) -> str:
    """KafkaError{code=NAME,...} -> NAME."""
    m = re.search(r"code=(\w+)", str(err))
    return m.group(1) if m else str(err)


class Secured:
    def __init__(self, node: Node, port: int, workdir: Path) -> None:
        self.node = node
        self.port = port
        self.controller_port = -1  # a SASL_PLAINTEXT controller listener
        self.admin_config = workdir / "admin.properties"
        self.admin_config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.username=admin\nsasl.password=admin-pw\n"
        )

    def conf(self, user: str, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.port}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": USERS[user], **extra}  # fmt: skip

    def acls(self, *args: str) -> str:
        return str(keeperless("acls", "--bootstrap-server", f"127.0.0.1:{self.port}",
                              "--command-config", str(self.admin_config), *args,
                              check=True).stdout)  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    work = tmp_path_factory.mktemp("acls")
    probe = Node(work)
    port, ctl_sasl = free_port(), free_port()
    users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    extra = {
        "listeners": f"PLAINTEXT://127.0.0.1:{probe.port},"
        f"CONTROLLER://127.0.0.1:{probe.controller_port},SASL://127.0.0.1:{port},"
        f"CSASL://127.0.0.1:{ctl_sasl}",
        "controller.listener.names": "CONTROLLER,CSASL",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{probe.port},SASL://127.0.0.1:{port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "SASL:SASL_PLAINTEXT,CSASL:SASL_PLAINTEXT",
        "listener.name.csasl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
    }  # fmt: skip
    node = Node(work, extra=extra)
    node.port, node.controller_port = probe.port, probe.controller_port
    node.format()
    node.start()
    try:
        secured = Secured(node, port, work)
        secured.controller_port = ctl_sasl
        yield secured
    finally:
        node.stop()


def _topic(s: Secured, name: str | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = name or f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(s.conf("admin"))
    fut = admin.create_topics([NewTopic(name, 1, 1)])[name]
    assert fut.result(30) is None
    del fut
    admin.poll(0)
    return name


_PRODUCE = """
import json, re, sys
from confluent_kafka import Producer
conf, topic = json.loads(sys.argv[1]), sys.argv[2]
got = []
p = Producer(conf)
p.produce(topic, value=b"x", on_delivery=lambda e, m: got.append(None if e is None else str(e)))
p.flush(15)
m = re.search(r"code=(\\w+)", got[0]) if got and got[0] else None
print("delivered" if got == [None] else (m.group(1) if m else "NOT_DELIVERED"))
"""


def _produce(s: Secured, user: str, topic: str, **extra: Any) -> str | None:
    """None if delivered; else the error's name. (In a process of its own: under pytest,
    confluent-kafka's delivery report of a refused produce once left an exception set.)"""
    import json
    import subprocess
    import sys

    conf = json.dumps(s.conf(user, **{"message.timeout.ms": 5000, **extra}))
    run = subprocess.run([sys.executable, "-c", _PRODUCE, conf, topic], capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    out = run.stdout.strip().splitlines()[-1]
    return None if out == "delivered" else out


_INIT = """
import json, sys
from confluent_kafka import Producer
p = Producer(json.loads(sys.argv[1]))
try:
    p.init_transactions(15)
    print("ok")
except Exception as e:
    print(e.args[0].name() if e.args and hasattr(e.args[0], "name") else repr(e))
"""


def _init_transactions(s: Secured, user: str, tid: str) -> str:
    import json
    import subprocess
    import sys

    conf = json.dumps(s.conf(user, **{"transactional.id": tid}))
    run = subprocess.run([sys.executable, "-c", _INIT, conf], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    return run.stdout.strip().splitlines()[-1]


def _consume(s: Secured, user: str, topic: str, group: str) -> str:
    """'ok' once a record is read; else the first error's name."""
    from confluent_kafka import Consumer

    c = Consumer(s.conf(user, **{"group.id": group, "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False}))  # fmt: skip
    c.subscribe([topic])
    try:
        for _ in range(30):
            m = c.poll(1)
            if m is None:
                continue
            if m.error() is not None:
                return _name(m.error())
            return "ok"
        return "nothing"
    finally:
        c.close()


def _visible(s: Secured, user: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(s.conf(user)).list_topics(timeout=10).topics)


def test_no_acl_allow_and_deny(secured: Secured) -> None:
    s = secured
    topic = _topic(s)
    assert _produce(s, "alice", topic) == "TOPIC_AUTHORIZATION_FAILED"
    assert topic not in _visible(s, "alice")  # hidden from who may not describe it
    out = s.acls("--add", "--allow-principal", "User:alice", "--operation", "Write",
                 "--topic", topic)  # fmt: skip
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in out
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in out
    assert _produce(s, "alice", topic) is None
    assert topic in _visible(s, "alice")  # WRITE implies DESCRIBE
    assert _produce(s, "bob", topic) == "TOPIC_AUTHORIZATION_FAILED"  # alice's, not bob's
    # consuming needs READ on the topic and on the group
    s.acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    assert _consume(s, "alice", topic, "g-" + topic) == "GROUP_AUTHORIZATION_FAILED"
    s.acls("--add", "--allow-principal", "User:alice", "--operation", "Read",
           "--group", "g-" + topic)  # fmt: skip
    assert _consume(s, "alice", topic, "g-" + topic) == "ok"
    # DENY wins over ALLOW
    s.acls("--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", topic)
    assert _produce(s, "alice", topic) == "TOPIC_AUTHORIZATION_FAILED"
    listed = s.acls("--list", "--topic", topic)
    assert "permissionType=DENY" in listed
    s.acls("--remove", "--deny-principal", "User:alice", "--operation", "Write", "--topic", topic)
    assert _produce(s, "alice", topic) is None


def test_prefixed_patterns_and_hosts(secured: Secured) -> None:
    s = secured
    mine, other = _topic(s, f"bob-{uuid.uuid4().hex[:6]}"), _topic(s)
    s.acls("--add", "--allow-principal", "User:bob", "--producer", "--topic", "bob-",
           "--resource-pattern-type", "prefixed")  # fmt: skip
    assert _produce(s, "bob", mine) is None
    assert _produce(s, "bob", other) == "TOPIC_AUTHORIZATION_FAILED"
    # an ACL for another host does not apply to connections from 127.0.0.1
    s.acls("--add", "--allow-principal", "User:alice", "--allow-host", "10.1.2.3",
           "--operation", "Write", "--topic", other)  # fmt: skip
    assert _produce(s, "alice", other) == "TOPIC_AUTHORIZATION_FAILED"


def test_admin_operations_and_transactional_ids(secured: Secured) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
    )

    s = secured
    admin = AdminClient(s.conf("alice"))
    name = f"new-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    s.acls("--add", "--allow-principal", "User:alice", "--operation", "Create", "--cluster")
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        admin.delete_topics([name])[name].result(30)
    entry = ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource("topic", name, incremental_configs=[entry])
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        admin.incremental_alter_configs([res])[res].result(30)
    # cluster operations: DescribeAcls needs DESCRIBE on the cluster (kafka-python shows
    # the answer's error; librdkafka's describe_acls drops it and returns no ACLs)
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError

    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{s.port}",
                          security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="PLAIN", sasl_plain_username="alice",
                          sasl_plain_password=USERS["alice"])  # fmt: skip
    anything = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
    flt = ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, anything)
    with pytest.raises(ClusterAuthorizationFailedError):
        kp.describe_acls(flt)
    kp.close()
    # transactional ids: WRITE on the id
    assert _init_transactions(s, "alice", "tx-alice") == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    s.acls("--add", "--allow-principal", "User:alice", "--operation", "Write",
           "--transactional-id", "tx-alice")  # fmt: skip
    assert _init_transactions(s, "alice", "tx-alice") == "ok"
    # the super user may do all of it
    root = AdminClient(s.conf("admin"))
    root.delete_topics([name])[name].result(30)


def test_controllers_authorize_what_they_serve(secured: Secured) -> None:
    """A request sent to a controller listener (KIP-919 admin clients, tools with
    --bootstrap-controller) is authorized by the controller as a broker would."""
    from keeperless.tools import client

    def create(user: str, name: str) -> int:
        client.configure({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                          "sasl.username": user, "sasl.password": USERS[user]}, "test")  # fmt: skip
        try:
            body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                "assignments": [], "configs": []}],
                    "timeout": 10000, "validate_only": False}  # fmt: skip
            resp = client.call([("127.0.0.1", secured.controller_port)], 19, 7, body)
            return int(resp.topics[0].error_code)
        finally:
            client.configure({}, "test")

    name = f"ctl-{uuid.uuid4().hex[:6]}"
    assert create("bob", name) == 29  # TOPIC_AUTHORIZATION_FAILED
    assert create("admin", name) == 0


def test_groups_are_listed_described_and_deleted_per_principal(secured: Secured) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    s = secured
    topic = _topic(s)
    group = "g-" + topic
    _produce(s, "admin", topic)
    s.acls("--add", "--allow-principal", "User:alice", "--consumer", "--topic", topic,
           "--group", group)  # fmt: skip
    assert _consume(s, "alice", topic, group) == "ok"
    bob, alice = AdminClient(s.conf("bob")), AdminClient(s.conf("alice"))

    def listed(admin: AdminClient) -> set[str]:
        result = admin.list_consumer_groups().result(30)
        return {g.group_id for g in result.valid}

    assert group in listed(alice)
    assert group not in listed(bob)
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        bob.describe_consumer_groups([group])[group].result(30)
    assert alice.describe_consumer_groups([group])[group].result(30).group_id == group
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        bob.delete_consumer_groups([group])[group].result(30)


def test_what_any_principal_may_ask_and_the_acls_tools_care(secured: Secured) -> None:
    """From a helper's probing: DescribeCluster answers every principal (its authorized
    operations say what it may do); ListTransactions lists only the ids a principal may
    describe; kafka-acls.sh --producer --consumer together works, --remove matches
    LITERAL unless told otherwise (a PREFIXED ACL stays), and operations a resource
    type does not have are refused."""
    from confluent_kafka.admin import AdminClient

    s = secured
    bob = AdminClient(s.conf("bob"))
    described = bob.describe_cluster(include_authorized_operations=True).result(30)
    assert described.cluster_id
    assert not described.authorized_operations  # nothing allowed on the cluster
    topic = _topic(s, f"both-{uuid.uuid4().hex[:6]}")
    added = s.acls("--add", "--allow-principal", "User:bob", "--producer", "--consumer",
                   "--topic", topic, "--group", "g-both")  # fmt: skip
    assert "operation=DESCRIBE" in added
    s.acls("--add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "pub-",
           "--resource-pattern-type", "prefixed")  # fmt: skip
    s.acls("--remove", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "pub-")
    assert "patternType=PREFIXED" in s.acls("--list", "--topic", "pub-",
                                            "--resource-pattern-type", "prefixed")  # fmt: skip
    bad = keeperless("acls", "--bootstrap-server", f"127.0.0.1:{s.port}", "--command-config",
                     str(s.admin_config), "--add", "--allow-principal", "User:bob",
                     "--operation", "Write", "--group", "g1")  # fmt: skip
    assert bad.returncode != 0
    assert "GROUP only supports operations" in bad.stderr
    # kafka-log-dirs.sh without DESCRIBE on the cluster: an error, not an empty list
    bob_config = s.admin_config.parent / "bob.properties"
    bob_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          f"sasl.username=bob\nsasl.password={USERS['bob']}\n")  # fmt: skip
    dirs = keeperless("log-dirs", "--bootstrap-server", f"127.0.0.1:{s.port}",
                      "--command-config", str(bob_config), "--describe")  # fmt: skip
    assert dirs.returncode != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in dirs.stderr
    # kafka-acls.sh --list likewise: "not allowed to look" is not "no ACLs"
    listing = keeperless("acls", "--bootstrap-server", f"127.0.0.1:{s.port}",
                         "--command-config", str(bob_config), "--list")  # fmt: skip
    assert listing.returncode != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in listing.stderr
    # ListTransactions: only what the principal may describe
    assert _init_transactions(s, "alice", "tx-listed") == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    s.acls("--add", "--allow-principal", "User:alice", "--operation", "Write",
           "--transactional-id", "tx-listed")  # fmt: skip
    assert _init_transactions(s, "alice", "tx-listed") == "ok"
    from keeperless.tools import client

    def listed(user: str) -> set[str]:
        client.configure({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                          "sasl.username": user, "sasl.password": USERS[user]}, "test")  # fmt: skip
        try:
            body = {"state_filters": [], "producer_id_filters": []}
            resp = client.call([("127.0.0.1", s.port)], 66, 0, body)
        finally:
            client.configure({}, "test")
        assert resp.error_code == 0
        return {t.transactional_id for t in resp.transaction_states}

    assert "tx-listed" in listed("alice")
    assert "tx-listed" not in listed("bob")


def test_the_apis_that_checked_nothing_check_as_kafka(secured: Secured) -> None:
    """Found by the authorization table generated from the API registry: these answered
    any principal. Now, as Kafka's KafkaApis: DescribeTopicPartitions and
    OffsetForLeaderEpoch need DESCRIBE on each topic, ConsumerGroupDescribe DESCRIBE on
    each group, ListConfigResources DESCRIBE_CONFIGS on the cluster."""
    from keeperless.tools import client

    topic = _topic(secured)

    def ask(user: str, key: int, version: int, body: dict[str, Any]) -> Any:
        client.configure({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                          "sasl.username": user, "sasl.password": USERS[user]}, "test")  # fmt: skip
        try:
            return client.call([("127.0.0.1", secured.port)], key, version, body)
        finally:
            client.configure({}, "test")

    dtp = {"topics": [{"name": topic}], "response_partition_limit": 100, "cursor": None}
    assert int(ask("bob", 75, 0, dtp).topics[0].error_code) == 29  # TOPIC_AUTHORIZATION_FAILED
    [mine] = ask("admin", 75, 0, dtp).topics
    assert int(mine.error_code) == 0
    listed = ask("bob", 75, 0, {"topics": [], "response_partition_limit": 100, "cursor": None})
    assert topic not in {t.name for t in listed.topics}
    ofle = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}  # fmt: skip
    assert int(ask("bob", 23, 4, ofle).topics[0].partitions[0].error_code) == 29
    assert int(ask("admin", 23, 4, ofle).topics[0].partitions[0].error_code) == 0
    cgd = {"group_ids": ["g-secret"], "include_authorized_operations": False}
    assert int(ask("bob", 69, 0, cgd).groups[0].error_code) == 30  # GROUP_AUTHORIZATION_FAILED
    assert int(ask("admin", 69, 0, cgd).groups[0].error_code) != 30
    lcr = {"resource_types": [2]}
    assert int(ask("bob", 74, 1, lcr).error_code) == 31  # CLUSTER_AUTHORIZATION_FAILED
    assert int(ask("admin", 74, 1, lcr).error_code) == 0


def _ask(s: Secured, user: str, key: int, version: int, body: dict[str, Any]) -> Any:
    """One request as ``user`` over the SASL listener, through the tools' client."""
    from keeperless.tools import client

    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": user, "sasl.password": USERS[user]}  # fmt: skip
    sec = client.security_of(props, "test")
    return client.call([("127.0.0.1", s.port)], key, version, body, security=sec,
                       error_first=True)  # fmt: skip


def _first_partition_error(resp: Any, topics: str = "topics", parts: str = "partitions") -> int:
    return int(getattr(getattr(resp, topics)[0], parts)[0].error_code)


def test_every_api_checked_in_its_handler_refuses_as_kafka(secured: Secured) -> None:
    """Generated from the API registry's rule table: every API whose authorization is
    checked inside its handler (security/api_rules.py IN_HANDLER) has a row here, and a
    principal without ACLs (bob) is refused what a super user (admin) is served, with
    the error Kafka's KafkaApis answers for the refused part. A new API checked in its
    handler fails this test until it has a row."""
    from keeperless.protocol.apis import ApiKey
    from keeperless.protocol.records import build_batch
    from keeperless.security.api_rules import IN_HANDLER

    topic = _topic(secured)
    batch = build_batch([(None, b"v", [])])
    rows: dict[int, tuple[int, dict[str, Any], Any, int] | str] = {
        ApiKey.PRODUCE: (9, {"transactional_id": None, "acks": -1, "timeout": 5000,
                             "topic_data": [{"name": topic, "partition_data": [
                                 {"index": 0, "records": batch}]}]},
                         lambda r: _first_partition_error(r, "responses", "partition_responses"),
                         29),  # TOPIC_AUTHORIZATION_FAILED
        ApiKey.FETCH: (12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0,
                            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                            "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                 "last_fetched_epoch": -1, "log_start_offset": -1,
                                 "partition_max_bytes": 1 << 20}]}],
                            "forgotten_topics_data": [], "rack_id": ""},
                       lambda r: _first_partition_error(r, "responses"), 29),
        ApiKey.LIST_OFFSETS: (7, {"replica_id": -1, "isolation_level": 0, "topics": [
                                  {"name": topic, "partitions": [{"partition_index": 0,
                                   "current_leader_epoch": -1, "timestamp": -1}]}]},
                              _first_partition_error, 29),
        ApiKey.METADATA: (12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": topic}],
                               "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False},
                          lambda r: int(r.topics[0].error_code), 29),
        ApiKey.DELETE_RECORDS: (2, {"topics": [{"name": topic, "partitions": [
                                    {"partition_index": 0, "offset": 0}]}], "timeout": 5000},
                                _first_partition_error, 29),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (4, {"replica_id": -1, "topics": [
                                             {"topic": topic, "partitions": [
                                                 {"partition": 0, "current_leader_epoch": -1,
                                                  "leader_epoch": 0}]}]},
                                         _first_partition_error, 29),
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, {"topics": [{"name": topic}],
                                               "response_partition_limit": 100,
                                               "cursor": None},
                                           lambda r: int(r.topics[0].error_code), 29),
        # a token for another owner needs CREATE_TOKENS on that user
        # (DELEGATION_TOKEN_AUTHORIZATION_FAILED; the super user's goes on to the
        # controller, which has no secret key here: DELEGATION_TOKEN_AUTH_DISABLED)
        ApiKey.CREATE_DELEGATION_TOKEN: (3, {"owner_principal_type": "User",
                                             "owner_principal_name": "alice", "renewers": [],
                                             "max_lifetime": -1},
                                         lambda r: int(r.error_code), 65),
        ApiKey.DESCRIBE_DELEGATION_TOKEN: "tests/integration/test_delegation_tokens.py "
        "(another user's token is described only with DESCRIBE on it or DESCRIBE_TOKENS)",
    }  # fmt: skip
    assert set(rows) == set(IN_HANDLER), "an API checked in its handler has no row here"
    for key, row in rows.items():
        if isinstance(row, str):
            continue
        version, body, error_of, refused = row
        got = error_of(_ask(secured, "bob", key, version, body))
        assert got == refused, (ApiKey(key).name, got)
        served = error_of(_ask(secured, "admin", key, version, body))
        assert served != refused, (ApiKey(key).name, served)
