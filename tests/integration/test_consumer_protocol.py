"""The consumer group protocol of KIP-848 with confluent-kafka's group.protocol=consumer:
server-side assignment, rebalances as members join and leave, commits, describe."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.cluster import Node


@pytest.fixture
def node848(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path, extra={"group.consumer.heartbeat.interval.ms": "500"})
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _consumer(node: Node, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _assigned(c: Consumer) -> set[tuple[str, int]]:
    return {(p.topic, p.partition) for p in c.assignment()}


def _poll_until(
    consumers: list[Consumer], cond: Any, timeout: float, what: str, got: list[Any] | None = None
) -> list[Any]:
    got = [] if got is None else got
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and not m.error():
                got.append(m)
        if cond():
            return got
    raise TimeoutError(f"timed out waiting for {what}: {[_assigned(c) for c in consumers]}")


def test_members_join_share_and_leave(node848: Node) -> None:
    node = node848
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic("kip848", 6, 1)])["kip848"].result(20)
    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(60):
        p.produce("kip848", value=b"%d" % i, partition=i % 6)
    assert p.flush(20) == 0
    everything = {("kip848", i) for i in range(6)}
    a = _consumer(node, "g848")
    a.subscribe(["kip848"])
    got: list[Any] = []
    _poll_until([a], lambda: _assigned(a) == everything, 30, "a gets every partition", got)
    _poll_until([a], lambda: len(got) >= 60, 30, "a reads everything", got)
    assert sorted(int(m.value()) for m in got) == list(range(60))
    a.commit(asynchronous=False)
    committed = a.committed([TopicPartition("kip848", i) for i in range(6)], timeout=10)
    assert sum(tp.offset for tp in committed) == 60
    b = _consumer(node, "g848")
    b.subscribe(["kip848"])
    _poll_until(
        [a, b],
        lambda: len(_assigned(a)) == 3 and len(_assigned(b)) == 3,
        40,
        "three partitions each",
    )
    assert _assigned(a) | _assigned(b) == everything
    # the coordinator describes the group as a consumer group
    desc = admin.describe_consumer_groups(["g848"])["g848"].result(10)
    assert str(desc.type).endswith("CONSUMER")
    assert len(desc.members) == 2
    assert sorted(
        (tp.topic, tp.partition) for m in desc.members for tp in m.assignment.topic_partitions
    ) == sorted(everything)
    listed = admin.list_consumer_groups().result(10)
    assert "g848" in {g.group_id for g in listed.valid}
    # Kafka's consumer-groups --describe shows the members that own each partition
    from tests.integration.cluster import keeperless

    out = keeperless(
        "consumer-groups", "--bootstrap-server", node.bootstrap, "--describe", "--group",
        "g848", check=True,
    ).stdout  # fmt: skip
    rows = [line.split() for line in out.splitlines()[1:] if line.startswith("g848")]
    assert len(rows) == 6
    members = {m.member_id for m in desc.members}
    assert {r[6] for r in rows} == members
    # --verbose shows the KIP-848 epochs (from ConsumerGroupDescribe): each member's, the
    # group's and its target assignment's (found missing by a fresh-eyes trial: '-')
    bs = ("--bootstrap-server", node.bootstrap, "--describe", "--group", "g848")
    out = keeperless("consumer-groups", *bs, "--members", "--verbose", check=True).stdout
    header, *lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    current, target = header.index("CURRENT-EPOCH"), header.index("TARGET-EPOCH")
    assert len(lines) == 2
    assert all(int(r[current]) > 0 and int(r[target]) > 0 for r in lines), out
    out = keeperless("consumer-groups", *bs, "--state", "--verbose", check=True).stdout
    header, row = [ln.split() for ln in out.splitlines() if ln.strip()]
    assert header[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert int(row[-3]) >= int(row[-2]) > 0, out
    b.close()  # leaves: a gets everything back
    _poll_until([a], lambda: _assigned(a) == everything, 40, "a gets b's partitions")
    a.close()


def test_classic_and_consumer_members_share_one_group(node848: Node) -> None:
    """KIP-848's online migration, as Kafka 4 allows it by default: a classic member
    joins a consumer group and gets its share from the server assignor; the last
    consumer-protocol member leaving turns the group classic again, and its classic
    member takes everything; a consumer-protocol member joining that classic group
    converts it back (before, the classic member was refused)."""
    from confluent_kafka import KafkaError

    node = node848
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic("mixed", 4, 1)])["mixed"].result(20)
    every = {("mixed", p) for p in range(4)}
    a = _consumer(node, "mixed-g")
    a.subscribe(["mixed"])
    _poll_until([a], lambda: _assigned(a) == every, 30, "the consumer member")
    errors: list[Any] = []
    classic = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": "mixed-g",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "error_cb": errors.append,
        }
    )
    classic.subscribe(["mixed"])

    def shared(x: Consumer, y: Consumer) -> bool:
        ax, ay = _assigned(x), _assigned(y)
        return bool(ax) and bool(ay) and not ax & ay and ax | ay == every

    _poll_until([a, classic], lambda: shared(a, classic), 40, "a classic member's share")
    desc = admin.describe_consumer_groups(["mixed-g"])["mixed-g"].result(10)
    assert len(desc.members) == 2
    # the consumer-protocol member leaves: classic again, the classic member takes all
    a.close()
    _poll_until([classic], lambda: _assigned(classic) == every, 40, "the group back to classic")
    # and a consumer-protocol member converts it once more
    b = _consumer(node, "mixed-g")
    b.subscribe(["mixed"])
    _poll_until([b, classic], lambda: shared(b, classic), 40, "the group converted again")
    b.close()
    classic.close()
    assert all(e.code() != KafkaError._FATAL for e in errors), errors


def test_group_configs_set_with_kafka_configs_reach_the_group(node848: Node) -> None:
    """kafka-configs.sh --entity-type groups: a group's consumer.heartbeat.interval.ms is
    stored in the metadata log, described with source GROUP_CONFIG, listed among the
    groups with configs, and what the group's members are told to heartbeat at."""
    from tests.integration.cluster import kafka_request, keeperless

    bs = ["--bootstrap-server", node848.bootstrap]
    grp = ["--entity-type", "groups", "--entity-name", "tuned"]
    items = "consumer.heartbeat.interval.ms=7000,share.auto.offset.reset=earliest"
    alter = keeperless("configs", *bs, *grp, "--alter", "--add-config", items)
    assert alter.returncode == 0, alter.stderr
    assert "Completed updating config for group tuned." in alter.stdout
    desc = keeperless("configs", *bs, *grp, "--describe", check=True).stdout
    assert desc.splitlines()[0] == "Dynamic configs for group tuned are:"
    assert "  consumer.heartbeat.interval.ms=7000 sensitive=false synonyms={GROUP_CONFIG:" in desc
    assert "share.auto.offset.reset=earliest" in desc
    # what the group does not set is the broker's (this node's 500 ms interval)
    other = ["--entity-type", "groups", "--entity-name", "plain", "--describe", "--all"]
    full = keeperless("configs", *bs, *other, check=True).stdout
    assert "  consumer.heartbeat.interval.ms=500 sensitive=false synonyms={DEFAULT_CONFIG:" in full
    every = keeperless("configs", *bs, "--entity-type", "groups", "--describe", check=True)
    assert "Dynamic configs for group tuned are:" in every.stdout
    bad = keeperless("configs", *bs, *grp, "--alter", "--add-config", "consumer.x=1")
    assert bad.returncode != 0
    assert "Unknown group config name: consumer.x" in bad.stderr
    # FindCoordinator creates __consumer_offsets
    kafka_request(node848.port, 10, 4, {"key_type": 0, "coordinator_keys": ["tuned"]})
    body = {"group_id": "tuned", "member_id": "", "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout": datetime.timedelta(seconds=30),
            "subscribed_topic_names": ["t"],
            "server_assignor": None, "topic_partitions": []}  # fmt: skip
    deadline = time.monotonic() + 30
    while True:  # the group coordinator's topic may still be coming up
        resp = kafka_request(node848.port, 68, 0, body)
        if int(resp.error_code) == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert int(resp.error_code) == 0, resp
    assert resp.heartbeat_interval.total_seconds() == 7.0


def test_the_protocol_is_gated_on_group_version(tmp_path: Path) -> None:
    """KIP-848 is on when group.version is 1: a cluster formatted at 3.9 (before 4.0-IV0
    bootstrapped it) answers ConsumerGroupHeartbeat with UNSUPPORTED_VERSION, naming the
    feature, until kafka-features.sh upgrade --feature group.version=1."""
    from keeperless.protocol.apis import ApiKey
    from keeperless.tools.client import call
    from tests.integration.cluster import keeperless, wait_until

    n = Node(tmp_path)
    n.format(release="3.9")
    n.start()
    try:
        server = [("127.0.0.1", n.port)]
        body = {
            "group_id": "gated", "member_id": "", "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout": 60000, "subscribed_topic_names": ["t"],
            "server_assignor": None, "topic_partitions": [],
        }  # fmt: skip

        def heartbeat() -> Any:
            return call(server, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, body)

        refused = heartbeat()
        assert refused.error_code.name == "unsupported_version"
        assert "group.version is 0" in refused.error_message
        bs = ["--bootstrap-server", n.bootstrap]
        up = keeperless("features", "upgrade", *bs, "--feature", "group.version=1", check=True)
        assert up.stdout == "group.version was upgraded to 1.\n"

        def joined() -> bool:  # (once the group's coordinator is loaded)
            call(server, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["gated"]})
            return bool(heartbeat().error_code.name == "none")

        wait_until(joined, what="a member joins with the consumer protocol")
    finally:
        n.stop()
