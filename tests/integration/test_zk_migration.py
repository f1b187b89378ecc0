"""Reading a ZooKeeper-mode Kafka cluster from a real ZooKeeper (Debian's package, started
here) for a migration (issue 31's first step): ``keeperless migrate-zk --dry-run`` reports
what it would bring, under a chroot too, refuses a cluster mid-reassignment or with
topics pending deletion and storage formatted for another cluster, names malformed
znodes, and changes nothing in ZooKeeper or on disk."""

from __future__ import annotations

import datetime
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from tests.integration.cluster import Cluster, Node, free_port, keeperless
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


def _written(zk: ZooKeeper, chroot: str, layout: dict[str, bytes | None]) -> str:
    """``layout`` written under ``chroot``: its connect string."""
    client = zk.client()
    try:
        client.ensure_path(chroot)
        client.chroot = chroot
        write_layout(client, layout)
    finally:
        client.stop()
        client.close()
    return f"{zk.connect}{chroot}"


def _populated(zk: ZooKeeper, chroot: str, **changes: bytes | None) -> str:
    """The layout written under ``chroot`` (with ``changes``): its connect string."""
    return _written(zk, chroot, {**kafka_layout(), **changes})


def _broker_2_layout(
    topic: str, topic_id: str, epochs: dict[int, int], block_end: int
) -> dict[str, bytes | None]:
    """A one-broker ZooKeeper-mode cluster (broker 2) with one topic: its partitions
    (index -> leader epoch) led by broker 2, and producer ids given out to ``block_end``."""
    layout: dict[str, bytes | None] = {
        "/cluster/id": json.dumps({"version": "1", "id": CLUSTER_ID}).encode(),
        "/controller_epoch": b"3",
        "/brokers/ids/2": json.dumps(
            {"endpoints": ["PLAINTEXT://b2:9092"], "version": 5, "host": "b2", "port": 9092}
        ).encode(),
        f"/brokers/topics/{topic}": json.dumps(
            {
                "version": 3,
                "topic_id": topic_id,
                "partitions": {str(i): [2] for i in epochs},
                "adding_replicas": {},
                "removing_replicas": {},
            }
        ).encode(),
        "/latest_producer_id_block": json.dumps(
            {
                "version": 1,
                "broker": 2,
                "block_start": str(block_end - 999),
                "block_end": str(block_end),
            }
        ).encode(),
    }
    for i, epoch in epochs.items():
        layout[f"/brokers/topics/{topic}/partitions/{i}/state"] = json.dumps({
            "controller_epoch": 3, "leader": 2, "version": 1, "leader_epoch": epoch, "isr": [2],
        }).encode()  # fmt: skip
    return layout


def _migrated_and_started(controller: Node, broker: Node, connect: str) -> None:
    """The one-shot migration into ``controller``; it and ``broker`` started."""
    code, out = _migrate(controller, connect)
    assert code == 0, out
    controller.start_background()
    controller.wait_listening()
    broker.start()


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


def _zk_mode(data: Path, broker_id: int) -> None:
    """What a ZooKeeper-mode Kafka 3.x broker leaves in its log directory: meta.properties
    version 0 (broker.id, cluster.id), partition directories with partition.metadata, no
    metadata log."""
    (data / "meta.properties").write_text(
        f"#\nversion=0\nbroker.id={broker_id}\ncluster.id={CLUSTER_ID}\n"
    )
    for d in list(data.iterdir()):
        if d.name.startswith("__") or d.name == "bootstrap.checkpoint":
            shutil.rmtree(d) if d.is_dir() else d.unlink()


def test_a_broker_adopts_a_zookeeper_mode_log_directory(zk: ZooKeeper, tmp_path: Path) -> None:
    """The stopped cluster's broker 2 restarts as a keeperless broker on its own log
    directory: every record is served at its offset, producing goes on after it, and
    meta.properties becomes version 1 with a directory id."""
    source = Node(tmp_path / "zk-broker", node_id=2)
    source.format()
    source.start()
    try:
        admin = AdminClient({"bootstrap.servers": source.bootstrap})
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(30)
        p = Producer({"bootstrap.servers": source.bootstrap, "enable.idempotence": True})
        for i in range(100):
            p.produce("orders", value=f"v{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
    finally:
        source.stop()
    topic_id = (source.data / "orders-0" / "partition.metadata").read_text().split()[-1]
    _zk_mode(source.data, 2)
    connect = _written(zk, "/kafka-f", _broker_2_layout("orders", topic_id, {0: 0, 1: 0}, 999))
    c = Cluster(tmp_path / "kraft", controllers=1, brokers=1)
    controller, broker = c.controllers[1], c.brokers[2]
    shutil.copytree(source.data, broker.data)
    _migrated_and_started(controller, broker, connect)
    try:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                             "enable.auto.commit": False})  # fmt: skip
        consumer.assign([TopicPartition("orders", i, 0) for i in (0, 1)])
        got: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < 100 and time.monotonic() < deadline:
            for m in consumer.consume(100, 1.0):
                if m.error() is None:
                    got[m.partition()].append((m.offset(), m.value()))
        consumer.close()
        for i in (0, 1):
            assert got[i] == [(n, f"v{2 * n + i}".encode()) for n in range(50)], got[i][:5]
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        offsets: list[int] = []
        p.produce("orders", value=b"after", partition=0,
                  on_delivery=lambda err, m: offsets.append(m.offset()))  # fmt: skip
        assert p.flush(30) == 0
        assert offsets == [50]
        meta = (broker.data / "meta.properties").read_text()
        assert "version=1" in meta
        assert "directory.id=" in meta
        assert "Adopted log directory" in broker.logs()
    finally:
        broker.stop()
        controller.stop()


def _zk_get(zk: ZooKeeper, chroot: str, path: str) -> bytes | None:
    from kazoo.exceptions import NoNodeError

    client = zk.client()
    try:
        return bytes(client.get(chroot + path)[0])
    except NoNodeError:
        return None
    finally:
        client.stop()
        client.close()


def test_a_live_migration_copies_zookeeper_then_writes_every_change_back_until_finalized(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    """KIP-866's path: a quorum formatted with ZooKeeper's cluster id and started with
    zookeeper.metadata.migration.enable claims ZooKeeper's controllership (a ZooKeeper-
    mode controller is fenced), copies its metadata in one batch, then writes every
    change back to ZooKeeper in Kafka's layout (so a rollback stays possible) until a
    controller started without migration finalizes it; ZooKeeper is then left alone."""
    from keeperless.zk.layout import ZkTopic, parse_layout
    from keeperless.zk.reader import read_tree
    from tests.integration.cluster import wait_until

    connect = _populated(zk, "/kafka-live")
    migrating = {"zookeeper.metadata.migration.enable": "true", "zookeeper.connect": connect}
    node = Node(tmp_path, node_id=1, extra={
        **migrating, "super.users": "User:ANONYMOUS",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    })  # fmt: skip
    node.format(cluster_id=CLUSTER_ID)
    node.start()
    try:
        wait_until(lambda: "Migrated the metadata of ZooKeeper" in node.logs(), 30,
                   what="the migration")  # fmt: skip
        assert "Claimed ZooKeeper's controllership" in node.logs()
        assert _zk_get(zk, "/kafka-live", "/controller_epoch") == b"8"  # 7, bumped
        claim = json.loads(_zk_get(zk, "/kafka-live", "/controller") or b"{}")
        assert claim["brokerid"] == 1
        bs = ("--bootstrap-server", node.bootstrap)
        desc = keeperless("topics", *bs, "--describe", "--topic", "orders").stdout
        assert f"TopicId: {TOPIC_IDS['orders']}" in desc, desc
        # dual-write: a topic created, a config altered, a topic deleted, an ACL added
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("fresh", 2, 1)])["fresh"].result(30)
        keeperless("configs", *bs, "--alter", "--entity-type", "topics", "--entity-name",
                   "orders", "--add-config", "retention.ms=1234", check=True)  # fmt: skip
        admin.delete_topics(["payments"])["payments"].result(30)
        keeperless("acls", *bs, "--add", "--allow-principal", "User:carol", "--operation",
                   "Read", "--topic", "fresh", check=True)  # fmt: skip

        def in_step() -> bool:
            md = parse_layout(read_tree(connect))
            return (
                "fresh" in md.topics
                and "payments" not in md.topics
                and md.topics["orders"].configs.get("retention.ms") == "1234"
                and any(a.principal == "User:carol" and a.name == "fresh" for a in md.acls)
            )

        wait_until(in_step, 30, interval=0.2, what="ZooKeeper in step with the quorum")
        md = parse_layout(read_tree(connect))
        fresh = md.topics["fresh"]
        assert sorted(fresh.partitions) == [0, 1]
        # a change of more than three of dual-write's transactions (200 znodes each): a
        # topic of 300 partitions is ~900 znodes, all written
        admin.create_topics([NewTopic("wide", 300, 1)])["wide"].result(60)
        wait_until(lambda: len(parse_layout(read_tree(connect)).topics.get(
            "wide", ZkTopic("wide", None, {})).partitions) == 300, 60, interval=0.5,
            what="the wide topic in ZooKeeper")  # fmt: skip
        assert all(p.leader == 1 and p.isr == (1,) for p in fresh.partitions.values())
        desc = keeperless("topics", *bs, "--describe", "--topic", "fresh").stdout
        assert f"TopicId: {fresh.topic_id}" in desc, desc  # the quorum's id, in ZooKeeper
        assert _zk_get(zk, "/kafka-live", "/config/topics/payments") is None
        assert md.topics["orders"].configs["cleanup.policy"] == "compact"  # kept
        # /controller gone as with an expired session: written again while idle, before
        # a ZooKeeper-mode broker could elect itself (found by review)
        client = zk.client()
        client.delete("/kafka-live/controller")
        client.stop()
        client.close()
        wait_until(lambda: _zk_get(zk, "/kafka-live", "/controller") is not None, 15,
                   what="/controller written again")  # fmt: skip
        assert json.loads(_zk_get(zk, "/kafka-live", "/controller") or b"{}")["brokerid"] == 1
    finally:
        node.stop()
    # finalized: the controllers restarted without the migration's keys
    node.config.write_text("".join(
        line + "\n" for line in node.config.read_text().splitlines()
        if not line.startswith(("zookeeper.metadata.migration.enable", "zookeeper.connect"))
    ))  # fmt: skip
    node.start()
    try:
        wait_until(lambda: "Finalized the migration from ZooKeeper" in node.logs(), 30,
                   what="the finalization")  # fmt: skip
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("after", 1, 1)])["after"].result(30)
        deadline = time.monotonic() + 2  # (dual-write writes within ~0.1 s of a change)
        while time.monotonic() < deadline:
            assert _zk_get(zk, "/kafka-live", "/brokers/topics/after") is None
            time.sleep(0.1)
        assert node.logs().count("Claimed ZooKeeper's controllership") == 1
    finally:
        node.stop()


def test_a_controller_killed_at_each_step_of_a_live_migration_leaves_it_to_finish_once(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    """kill -9 of the active controller with the migration pending (ZooKeeper not
    reachable), with ZooKeeper claimed but the copy refused (a reassignment in
    progress), and in dual-write right after a change: each restart takes the migration
    from the state its log holds, the metadata is copied exactly once, and ZooKeeper
    ends in step with the quorum."""
    from tests.integration.cluster import wait_until

    connect = _populated(zk, "/kafka-kill")
    node = Node(tmp_path, node_id=1, extra={
        "zookeeper.metadata.migration.enable": "true",
        "zookeeper.connect": f"127.0.0.1:{free_port()}/nowhere",  # (no ZooKeeper there)
    })  # fmt: skip
    node.format(cluster_id=CLUSTER_ID)

    def restart_with(connect_to: str) -> None:
        node.config.write_text("".join(
            (f"zookeeper.connect={connect_to}" if ln.startswith("zookeeper.connect=") else ln)
            + "\n" for ln in node.config.read_text().splitlines()
        ))  # fmt: skip
        node.start()

    node.start()
    try:  # 1. pending: PRE_MIGRATION recorded, ZooKeeper unreachable
        wait_until(lambda: "no ZooKeeper answered" in node.logs(), 60, what="the retry")
        # a topic created now would clash with ZooKeeper's (found by review): refused
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        with pytest.raises(Exception, match="NOT_CONTROLLER|pre-migration|timed out"):
            admin.create_topics([NewTopic("orders", 1, 1)],
                                request_timeout=5)["orders"].result(20)  # fmt: skip
    finally:
        node.kill9()
    client = zk.client()
    reassign = json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 2, 1]}]}).encode()  # fmt: skip
    client.create("/kafka-kill/admin/reassign_partitions", reassign)
    restart_with(connect)
    try:  # 2. claimed, the copy refused
        wait_until(lambda: "ZooKeeper migration refused: a partition reassignment" in node.logs(),
                   30, what="the refusal")  # fmt: skip
        assert _zk_get(zk, "/kafka-kill", "/controller_epoch") == b"8"
    finally:
        node.kill9()
    client.delete("/kafka-kill/admin/reassign_partitions")
    restart_with(connect)
    try:  # 3. migrated; killed right after a change it is to write back
        wait_until(lambda: "Migrated the metadata of ZooKeeper" in node.logs(), 30,
                   what="the migration")  # fmt: skip
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("late", 1, 1)])["late"].result(30)
    finally:
        node.kill9()
    restart_with(connect)
    try:
        wait_until(lambda: _zk_get(zk, "/kafka-kill", "/brokers/topics/late/partitions/0/state"),
                   30, interval=0.2, what="the change written back after the restart")  # fmt: skip
        assert node.logs().count("Migrated the metadata of ZooKeeper") == 1  # exactly once
        assert _zk_get(zk, "/kafka-kill", "/controller_epoch") == b"10"  # claimed 3 times
        bs = ("--bootstrap-server", node.bootstrap)
        desc = keeperless("topics", *bs, "--describe", "--topic", "orders").stdout
        assert f"TopicId: {TOPIC_IDS['orders']}" in desc, desc
        assert desc.count("TopicId:") == 1, desc  # ZooKeeper's orders alone
        listed = keeperless("topics", *bs, "--list").stdout.split()
        assert sorted(t for t in listed if not t.startswith("__")) == ["late", "orders", "payments"]
    finally:
        node.stop()
        client.stop()
        client.close()


def test_a_live_migration_into_a_metadata_version_too_old_is_refused(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    """A quorum formatted at a metadata.version that cannot hold the migration's records
    (before 3.4-IV0) says so in one line, and neither ZooKeeper nor the quorum changes."""
    from tests.integration.cluster import wait_until

    connect = _populated(zk, "/kafka-old")
    node = Node(tmp_path, node_id=1, extra={
        "zookeeper.metadata.migration.enable": "true", "zookeeper.connect": connect,
    })  # fmt: skip
    node.format(cluster_id=CLUSTER_ID, release="3.3")
    client = zk.client()
    before = _snapshot(client, "/kafka-old")
    node.start()
    try:
        wait_until(lambda: "ZooKeeper migration refused: metadata.version 3.3" in node.logs(), 30,
                   what="the refusal")  # fmt: skip
        assert "older than 3.4-IV0" in node.logs()
        assert "--release-version 3.4 or later" in node.logs()
        assert _snapshot(client, "/kafka-old") == before  # not even claimed
        listed = keeperless("topics", "--bootstrap-server", node.bootstrap, "--list").stdout
        assert "orders" not in listed
    finally:
        node.stop()
        client.stop()
        client.close()


def _kafka_3_partition(part: Path, topic_id: str) -> None:
    """A ZooKeeper-mode Kafka 3.x broker's partition directory, every file laid out here
    from Kafka's published formats (not by keeperless's writers), as an unclean shutdown
    left it: a segment of 10 idempotent batches (producer 4000, epoch 3, sequences 0-9;
    leader epoch 0 for offsets 0-4, 2 after), offset and time indexes preallocated to
    10 MiB of zeros, the leader epoch checkpoint, no partition.metadata (a directory
    written before Kafka 2.8: the broker writes it with the migrated topic id), and a
    producer snapshot at offset 10 that also knows producer 5000 (epoch 1, last sequence 41),
    whose batches are no longer in the log."""
    import struct

    import crc32c

    from keeperless.protocol.records import build_batch, patch_offsets

    part.mkdir(parents=True)
    log = bytearray()
    for i in range(10):
        b = bytearray(build_batch([(None, f"r{i}".encode(), ())],
                                  timestamp_ms=1_700_000_000_000 + i, producer_id=4000,
                                  producer_epoch=3, base_sequence=i))  # fmt: skip
        patch_offsets(b, 0, i, 0 if i < 5 else 2)
        log += b
    (part / "00000000000000000000.log").write_bytes(bytes(log))
    for suffix in (".index", ".timeindex"):
        (part / f"00000000000000000000{suffix}").write_bytes(bytes(10 * 1024 * 1024))
    (part / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n2 5\n")
    # (no partition.metadata: written before Kafka 2.8, which had no topic ids)
    # ProducerStateManager's snapshot, version 1: version int16, crc uint32 (CRC-32C of
    # what follows), then the entries: producer id int64, epoch int16, last sequence
    # int32, last offset int64, offset delta int32, timestamp int64, coordinator epoch
    # int32, current transaction's first offset int64 (-1: none)
    entries = [(4000, 3, 9, 9, 0, 1_700_000_000_009, -1, -1),
               (5000, 1, 41, 2, 0, 1_699_000_000_000, -1, -1)]  # fmt: skip
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    snapshot = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    (part / "00000000000000000010.snapshot").write_bytes(snapshot)


def test_a_kafka_written_partition_directory_is_served_with_its_producers_and_epochs(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    """Files laid out as Kafka 3.x writes them (an unclean shutdown: preallocated
    indexes, no clean-shutdown marker) adopted by a keeperless broker: every record at its
    offset and timestamp, the leader epochs from Kafka's checkpoint (OffsetForLeaderEpoch
    answers where epoch 0 ended), and the producers of Kafka's snapshot: the log's
    producer continues its sequence, and one known only to the snapshot too, while a
    sequence gap is refused (OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    import base64
    import uuid

    from keeperless.protocol.records import build_batch

    topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    c = Cluster(tmp_path / "kraft", controllers=1, brokers=1)
    controller, broker = c.controllers[1], c.brokers[2]
    broker.data.mkdir(parents=True)
    (broker.data / "meta.properties").write_text(
        f"#\nversion=0\nbroker.id=2\ncluster.id={CLUSTER_ID}\n"
    )
    (broker.data / "recovery-point-offset-checkpoint").write_text("0\n1\nledger 0 0\n")
    (broker.data / "log-start-offset-checkpoint").write_text("0\n1\nledger 0 0\n")
    (broker.data / "replication-offset-checkpoint").write_text("0\n1\nledger 0 10\n")
    _kafka_3_partition(broker.data / "ledger-0", topic_id)
    connect = _written(zk, "/kafka-g", _broker_2_layout("ledger", topic_id, {0: 2}, 5999))
    _migrated_and_started(controller, broker, connect)
    try:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                             "enable.auto.commit": False})  # fmt: skip
        consumer.assign([TopicPartition("ledger", 0, 0)])
        got: list[tuple[int, bytes, int]] = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            for m in consumer.consume(10, 1.0):
                if m.error() is None:
                    got.append((m.offset(), m.value(), m.timestamp()[1]))
        consumer.close()
        assert got == [(i, f"r{i}".encode(), 1_700_000_000_000 + i) for i in range(10)]
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTopicPartition

        kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                           consumer_timeout_ms=10000)  # fmt: skip
        kc.assign([KTopicPartition("ledger", 0)])
        kc.seek(KTopicPartition("ledger", 0), 0)
        read = [(m.offset, m.value) for _, m in zip(range(10), kc, strict=False)]
        kc.close()
        assert read == [(i, f"r{i}".encode()) for i in range(10)]  # kafka-python too
        addr = [("127.0.0.1", broker.port)]
        epochs = call(addr, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
            "replica_id": -1, "topics": [{"topic": "ledger", "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})  # fmt: skip
        assert epochs.topics[0].partitions[0].end_offset == 5  # from Kafka's checkpoint

        def produce(pid: int, epoch: int, seq: int) -> tuple[int, int]:
            batch = build_batch([(None, b"next", ())], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq)  # fmt: skip
            resp = call(addr, ApiKey.PRODUCE, 9, {
                "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=30),
                "topic_data": [{"name": "ledger", "partition_data": [
                    {"index": 0, "records": batch}]}]})  # fmt: skip
            p = resp.responses[0].partition_responses[0]
            return int(p.error_code), int(p.base_offset)

        assert produce(4000, 3, 12)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: a gap
        assert produce(4000, 3, 10) == (0, 10)  # the log's producer goes on
        # the snapshot's producer is known (an unknown one's first sequence is taken as
        # it comes, as Kafka takes it): a gap is refused, its next sequence taken
        assert produce(5000, 1, 45)[0] == 45
        assert produce(5000, 1, 42) == (0, 11)
        meta = (broker.data / "ledger-0" / "partition.metadata").read_text()
        assert f"topic_id: {topic_id}" in meta, meta
    finally:
        broker.stop()
        controller.stop()


def _kafka_scram(password: str, iterations: int) -> str:
    """A SCRAM-SHA-256 credential as Kafka's ScramFormatter stores it in ZooKeeper."""
    import base64
    import hashlib
    import hmac
    import os

    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored = hashlib.sha256(client_key).digest()
    server = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = base64.b64encode
    return (f"salt={b64(salt).decode()},stored_key={b64(stored).decode()},"
            f"server_key={b64(server).decode()},iterations={iterations}")  # fmt: skip


def test_migrated_scram_users_log_in_with_their_old_passwords_under_the_old_acls(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    """A user whose SCRAM-SHA-256 credential ZooKeeper held logs in with the password
    it had, and the ACLs ZooKeeper held are enforced: alice may write the topic her
    literal ACL names, not another; a wrong password is refused."""
    from confluent_kafka import KafkaException

    alice = json.dumps({"version": 1, "config": {
        "SCRAM-SHA-256": _kafka_scram("alice-secret", 4096)}}).encode()  # fmt: skip
    connect = _populated(zk, "/kafka-h", **{"/config/users/alice": alice})
    probe = Node(tmp_path / "probe")
    sasl = free_port()
    node = Node(tmp_path, extra={
        "listeners": f"PLAINTEXT://127.0.0.1:{probe.port},"
                     f"CONTROLLER://127.0.0.1:{probe.controller_port},SASL://127.0.0.1:{sasl}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{probe.port},SASL://127.0.0.1:{sasl}",
        "controller.quorum.voters": f"1@127.0.0.1:{probe.controller_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                          "SASL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    })  # fmt: skip
    node.port, node.controller_port = probe.port, probe.controller_port
    code, out = _migrate(node, connect)
    assert code == 0, out
    node.start()
    try:

        def produce(topic: str, password: str) -> str:
            failures: list[str] = []
            p = Producer({"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol":
                          "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                          "sasl.username": "alice", "sasl.password": password, "acks": 1,
                          "message.timeout.ms": 5000,
                          "error_cb": lambda e: failures.append(e.name())})  # fmt: skip
            errors: list[str] = []

            def report(err: Any, _m: Any) -> None:
                errors.append(err.name() if err else "")

            p.produce(topic, b"hello", key=b"k", partition=0, on_delivery=report)  # (compacted)
            try:
                p.flush(15)
            except KafkaException as e:
                return str(e)
            if "_AUTHENTICATION" in failures:
                return "_AUTHENTICATION"
            return errors[0] if errors else "no delivery report"

        assert produce("orders", "alice-secret") == ""  # her Write ACL on orders
        assert produce("payments", "alice-secret") == "TOPIC_AUTHORIZATION_FAILED"
        assert produce("orders", "not-her-password") == "_AUTHENTICATION"
    finally:
        node.stop()


def test_a_kraft_controller_of_a_newer_epoch_in_zookeeper_is_not_claimed_over(
    zk: ZooKeeper, tmp_path: Path
) -> None:
    """Found by review: a controller that lost its leadership unawares (it was retrying
    ZooKeeper) must not claim ZooKeeper over its successor. ZooKeeper naming a KRaft
    controller of a newer epoch is left as it is, and nothing is copied."""
    from tests.integration.cluster import wait_until

    newer = json.dumps({"version": 2, "brokerid": 7, "timestamp": "1700000000000",
                        "kraftControllerEpoch": 99}).encode()  # fmt: skip
    connect = _populated(zk, "/kafka-newer", **{"/controller": newer})
    node = Node(tmp_path, node_id=1, extra={
        "zookeeper.metadata.migration.enable": "true", "zookeeper.connect": connect,
    })  # fmt: skip
    node.format(cluster_id=CLUSTER_ID)
    node.start()
    try:
        wait_until(lambda: "names KRaft controller 7 of epoch 99" in node.logs(), 30,
                   what="the refusal to claim")  # fmt: skip
        assert _zk_get(zk, "/kafka-newer", "/controller_epoch") == b"7"  # not bumped
        assert _zk_get(zk, "/kafka-newer", "/controller") == newer
        assert "Migrated the metadata" not in node.logs()
    finally:
        node.stop()


def test_brokers_of_another_inter_broker_protocol_version_are_refused(tmp_path: Path) -> None:
    """Brokers rolled from a ZooKeeper-mode cluster keep Kafka 3.x's
    inter.broker.protocol.version: each registers at that release's metadata.version
    only, so a broker of another release than the cluster's is refused (one line, the
    node stops) and the brokers never mix releases."""
    from tests.integration.cluster import wait_until

    c = Cluster(tmp_path, controllers=1, brokers=2, release="3.7")
    same, other = c.brokers[2], c.brokers[3]
    for n, ibp in ((same, "3.7"), (other, "3.6")):
        n.config.write_text(n.config.read_text() + f"inter.broker.protocol.version={ibp}\n")
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    for n in (*c.controllers.values(), same, other):
        n.format(cid, "3.7")
    c.controllers[1].start()
    try:
        same.start()
        other.start_background()
        wait_until(lambda: other.proc is not None and other.proc.poll() is not None, 60,
                   what="the other release's broker to stop")  # fmt: skip
        logs = other.logs()
        assert "broker registration refused: UNSUPPORTED_VERSION" in logs, logs[-2000:]
        assert "with inter.broker.protocol.version set it registers at that release" in logs
        listed = keeperless("topics", "--bootstrap-server", same.bootstrap, "--list")
        assert listed.returncode == 0  # the broker of the cluster's release serves
    finally:
        other.stop()
        same.stop()
        c.controllers[1].stop()
