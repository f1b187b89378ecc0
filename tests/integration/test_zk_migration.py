"""Reading a ZooKeeper-mode Kafka cluster from a real ZooKeeper (Debian's package, started
here) for a migration (issue 31's first step): ``keeperless migrate-zk --dry-run`` reports
what it would bring, under a chroot too, refuses a cluster mid-reassignment or with
topics pending deletion and storage formatted for another cluster, names malformed
znodes, and changes nothing in ZooKeeper or on disk."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from tests.integration.cluster import Node, free_port, keeperless
from tests.zookeeper import CLUSTER_ID, TOPIC_IDS, ZooKeeper, kafka_layout, write_layout


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    z = ZooKeeper(tmp_path_factory.mktemp("zk"), free_port())
    z.start()
    try:
        yield z
    finally:
        z.stop()


def _snapshot(client: Any, root: str) -> dict[str, bytes]:
    out = {}
    pending = [root]
    while pending:
        path = pending.pop()
        data, _ = client.get(path)
        out[path] = data
        pending += [f"{path.rstrip('/')}/{c}" for c in client.get_children(path)]
    return out


def _populated(zk: ZooKeeper, chroot: str, **changes: bytes | None) -> str:
    """The layout written under ``chroot`` (with ``changes``): its connect string."""
    layout = kafka_layout()
    layout.update(changes)
    client = zk.client()
    try:
        client.ensure_path(chroot)
        client.chroot = chroot
        write_layout(client, layout)
    finally:
        client.stop()
        client.close()
    return f"{zk.connect}{chroot}"


def _migrate(node: Node, connect: str, *extra: str) -> tuple[int, str]:
    res = keeperless("migrate-zk", "--zookeeper-connect", connect, "-c", str(node.config),
                     *extra)  # fmt: skip
    return res.returncode, res.stdout + res.stderr


def test_a_dry_run_reports_the_clusters_metadata_and_writes_nothing(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    connect = _populated(zk, "/kafka-a")
    node = Node(tmp_path)
    client = zk.client()
    before = _snapshot(client, "/kafka-a")
    code, out = _migrate(node, connect, "--dry-run")
    assert code == 0, out
    assert f"Cluster id: {CLUSTER_ID} (controller 1, controller epoch 7)" in out
    assert "Brokers registered: 3 (1, 2, 3)" in out
    assert "Topics: 2 with 5 partitions (1 with configs, 0 without a topic id" in out
    assert "Broker configs: 2 entities (2, <default>)" in out
    assert "Client quotas: 4 entities" in out
    assert "SCRAM credentials: 2 (1 SCRAM-SHA-256, 1 SCRAM-SHA-512)" in out
    assert "ACLs: 4 (3 literal, 1 prefixed)" in out
    assert "Producer ids given out: up to 1999" in out
    assert "records would be written; nothing was written." in out
    assert _snapshot(client, "/kafka-a") == before  # ZooKeeper unchanged
    assert not node.data.exists() or not any(node.data.iterdir())  # nothing on disk
    client.stop()
    client.close()


def test_a_migrated_controller_serves_zookeepers_metadata(zk: ZooKeeper, tmp_path: Path) -> None:
    """The one-shot path: the node is formatted with ZooKeeper's cluster id and starts
    with the topics (their ids, partitions, leaders and epochs), configs, ACLs, SCRAM
    users, quotas and producer ids ZooKeeper had."""
    connect = _populated(zk, "/kafka-e")
    node = Node(tmp_path, extra={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    })  # fmt: skip
    client = zk.client()
    before = _snapshot(client, "/kafka-e")
    code, out = _migrate(node, connect)
    assert code == 0, out
    assert f"Formatting {node.data} with cluster id {CLUSTER_ID}." in out
    assert _snapshot(client, "/kafka-e") == before  # ZooKeeper is never written
    client.stop()
    client.close()
    code, out = _migrate(node, connect)  # again: the storage is formatted already
    assert code != 0
    assert "already formatted" in out
    node.start()
    try:
        bs = ("--bootstrap-server", node.bootstrap)
        desc = keeperless("topics", *bs, "--describe", "--topic", "orders").stdout
        assert f"TopicId: {TOPIC_IDS['orders']}" in desc, desc
        assert "PartitionCount: 3" in desc
        assert "cleanup.policy=compact" in desc
        rows = [ln.split() for ln in desc.splitlines() if "Partition: 1" in ln]
        assert rows[0][rows[0].index("Leader:") + 1] == "2", desc  # as ZooKeeper had it
        acls = keeperless("acls", *bs, "--list").stdout
        assert "principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW" in acls
        assert "patternType=PREFIXED" in acls
        users = keeperless("configs", *bs, "--describe", "--entity-type", "users").stdout
        for expected in ("alice", "SCRAM-SHA-256", "bob@example.com", "SCRAM-SHA-512"):
            assert expected in users, users
        quotas = keeperless("configs", *bs, "--describe", "--entity-type", "clients",
                            "--entity-default").stdout  # fmt: skip
        assert "request_percentage=50.0" in quotas, quotas
        resp = call([("127.0.0.1", node.port)], ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60),
            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        assert resp.producer_id >= 2000  # past the ids ZooKeeper's brokers gave out
        assert "Wrote the bootstrap metadata" in node.logs()
    finally:
        node.stop()


def test_a_cluster_mid_reassignment_or_deleting_topics_is_refused(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    moving = json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": 2, "replicas": [1, 2, 4]}]}).encode()  # fmt: skip
    connect = _populated(zk, "/kafka-b", **{"/admin/reassign_partitions": moving,
                                            "/admin/delete_topics/payments": None})  # fmt: skip
    code, out = _migrate(Node(tmp_path), connect, "--dry-run")
    assert code == 1, out
    assert "Refused: a partition reassignment is in progress (orders-2)" in out
    assert "Refused: topics are pending deletion (payments)" in out


def test_storage_formatted_for_another_cluster_is_refused(zk: ZooKeeper, tmp_path: Path) -> None:
    connect = _populated(zk, "/kafka-c")
    node = Node(tmp_path)
    node.format()  # a new cluster's id
    code, out = _migrate(node, connect, "--dry-run")
    assert code == 1, out
    assert "is formatted for cluster" in out
    assert f"not {CLUSTER_ID}" in out


def test_malformed_znodes_are_named_and_nothing_migrates(zk: ZooKeeper, tmp_path: Path) -> None:
    state = json.dumps({"controller_epoch": 7, "leader": -1, "version": 1, "leader_epoch": 2,
                        "isr": []}).encode()  # fmt: skip
    connect = _populated(zk, "/kafka-d", **{
        "/config/topics/orders": b"{broken",
        "/brokers/topics/payments/partitions/1/state": state,
    })  # fmt: skip
    code, out = _migrate(Node(tmp_path), connect, "--dry-run")
    assert code == 1, out
    assert "Cannot migrate: ZooKeeper at" in out
    assert "/config/topics/orders: not JSON" in out
    assert "/brokers/topics/payments/partitions/1/state: partition has no leader" in out
    # a chroot with nothing in it is not a Kafka cluster
    code, out = _migrate(Node(tmp_path / "n2"), f"{zk.connect}/nothing-here", "--dry-run")
    assert code == 1
    assert "/cluster/id: missing" in out


def test_an_unreachable_zookeeper_is_one_line(tmp_path: Path) -> None:
    code, out = _migrate(Node(tmp_path), f"127.0.0.1:{free_port()}", "--dry-run")
    assert code == 1
    assert "no ZooKeeper answered at" in out
    assert "Traceback" not in out
