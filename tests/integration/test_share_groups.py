"""Share groups (KIP-932, queues for Kafka) with confluent-kafka's ShareConsumer
(librdkafka's share consumer): records of one partition shared by several consumers,
released records redelivered with a higher delivery count, rejected ones archived, a
record delivered too often archived, and the records of a consumer killed -9 delivered to
others once their acquisition lock expires. Bad requests get Kafka's error codes."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from tests.integration.cluster import Node, free_port, keeperless, wait_until
from tests.integration.conftest import running

LOCK_MS = 15000  # the shortest acquisition lock Kafka allows a group
SHARE_APIS = (76, 77, 78, 79)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    metrics_port = free_port()
    n = Node(tmp_path_factory.mktemp("share"), extra={
        "group.share.record.lock.duration.ms": str(LOCK_MS),
        "group.share.min.record.lock.duration.ms": "1000",  # a group may go lower
        "group.share.delivery.count.limit": "3",
        # a snapshot every 3 updates, pruned each second: restarts read pruned logs
        "share.coordinator.snapshot.update.records.per.snapshot": "3",
        "share.coordinator.state.topic.prune.interval.ms": "1000",
        "share.coordinator.cold.partition.snapshot.interval.ms": "1000",
        "metrics.http.listener": f"127.0.0.1:{metrics_port}",
    })  # fmt: skip
    n.metrics_port = metrics_port
    # formatted at Kafka 4.1's release: share groups off until share.version is upgraded
    yield from running(n, release="4.1")


def _ok(*args: str) -> str:
    res = keeperless(*args)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _lines(text: str) -> list[str]:
    """A table's lines (Kafka's tool prints a blank line before each table)."""
    return [line for line in text.splitlines() if line.strip()]


def _send(n: Node, api: ApiKey, version: int, body: dict[str, Any]) -> Any:
    return call([("127.0.0.1", n.port)], api, version, body)


def _api_versions(n: Node) -> dict[int, tuple[int, int]]:
    resp = _send(n, ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                             "client_software_version": "1"})  # fmt: skip
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


def _heartbeat(n: Node, group: str, member: str, epoch: int, topics: list[str] | None) -> Any:
    return _send(n, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
        "subscribed_topic_names": topics,
    })  # fmt: skip


@pytest.fixture(scope="module")
def enabled(node: Node) -> Node:
    """share.version 1, after checking that share groups are off before it."""
    assert not set(SHARE_APIS) & set(_api_versions(node))
    resp = _heartbeat(node, "early", str(uuid.uuid4()), 0, ["t"])
    assert resp.error_code == 35  # UNSUPPORTED_VERSION
    assert "share.version" in (resp.error_message or "")
    bs = ("--bootstrap-server", node.bootstrap)
    assert "share.version was upgraded to 1." in _ok(
        "features", "upgrade", *bs, "--feature", "share.version=1"
    )
    wait_until(lambda: set(SHARE_APIS) <= set(_api_versions(node)), 10, what="share APIs")
    assert all(_api_versions(node)[k] == (1, 1) for k in SHARE_APIS)
    return node


def _topic(n: Node, name: str, count: int, group: str) -> list[bytes]:
    """A 1-partition topic with ``count`` records, one batch each, and ``group`` set to
    start from the earliest record."""
    admin = AdminClient({"bootstrap.servers": n.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    _ok("configs", "--bootstrap-server", n.bootstrap, "--alter", "--entity-type", "groups",
        "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest")  # fmt: skip
    p = Producer({"bootstrap.servers": n.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    values = [f"{name}-{i}".encode() for i in range(count)]
    for v in values:
        p.produce(name, value=v)
        p.poll(0)
    assert p.flush(30) == 0
    return values


def _share(n: Node, group: str, topic: str, **extra: Any) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": n.bootstrap, "group.id": group, **extra})
    c.subscribe([topic])
    return c


def _poll(c: ShareConsumer, timeout: float = 0.5) -> list[Any]:
    out = []
    for m in c.poll(timeout) or []:
        assert m.error() is None, m.error()
        out.append(m)
    return out


def _accept(c: ShareConsumer, expect: int, timeout_s: float = 60) -> dict[bytes, int]:
    """Accept what ``c`` gets (each batch committed) until ``expect`` records came:
    value -> delivery count."""
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < expect and time.monotonic() < deadline:
        polled = _poll(c)
        for m in polled:
            got[m.value()] = m.delivery_count()
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if polled:
            c.commit_sync()
    return got


def test_share_groups_are_off_until_share_version_1(enabled: Node) -> None:
    resp = _heartbeat(enabled, "g0", "", 0, ["t"])
    assert resp.error_code == 42  # INVALID_REQUEST: a member id is the client's (v1)


def test_a_groups_lock_duration_is_bounded_by_the_brokers_limits(enabled: Node) -> None:
    bs = ("--bootstrap-server", enabled.bootstrap)
    base = ("configs", *bs, "--alter", "--entity-type", "groups", "--entity-name", "lockg")
    _ok(*base, "--add-config", "share.record.lock.duration.ms=5000")  # min lowered to 1000
    res = keeperless(*base, "--add-config", "share.record.lock.duration.ms=500")
    assert res.returncode != 0
    assert "between 1000 and 60000" in res.stdout + res.stderr, res.stdout + res.stderr


def test_three_consumers_share_one_partition(enabled: Node) -> None:
    values = _topic(enabled, "shared", 300, "workers")
    consumers = [_share(enabled, "workers", "shared", **{"max.poll.records": 10})
                 for _ in range(3)]  # fmt: skip
    seen: dict[int, list[bytes]] = {i: [] for i in range(3)}
    deadline = time.monotonic() + 60
    while sum(map(len, seen.values())) < len(values) and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in _poll(c, 0.2):
                assert m.delivery_count() == 1
                seen[i].append(m.value())
    everything = [v for vs in seen.values() for v in vs]
    assert sorted(everything) == sorted(values)  # each record to exactly one consumer
    assert all(seen.values()), {i: len(v) for i, v in seen.items()}  # and all shared
    for c in consumers:
        c.commit_sync()  # implicit mode: the last poll's records accepted
        c.close()
    # every record accepted: a new member of the group gets nothing
    late = _share(enabled, "workers", "shared")
    end = time.monotonic() + 3
    while time.monotonic() < end:
        assert _poll(late) == []
    late.close()
    listed = _send(enabled, ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                   "types_filter": ["share"]})  # fmt: skip
    assert [(g.group_id, g.group_type) for g in listed.groups] == [("workers", "share")]


def test_release_redelivers_reject_archives_and_too_many_deliveries_archive(
    enabled: Node,
) -> None:
    values = _topic(enabled, "acks", 30, "ackers")
    c = _share(enabled, "ackers", "acks", **{"share.acknowledgement.mode": "explicit"})
    rounds: dict[bytes, list[int]] = {}
    deadline = time.monotonic() + 60
    # 0-9 released every time (delivery.count.limit 3: delivered 3 times, then
    # archived), 10-19 rejected (archived at once), 20-29 accepted
    while time.monotonic() < deadline:
        got = _poll(c)
        for m in got:
            rounds.setdefault(m.value(), []).append(m.delivery_count())
            i = int(m.value().split(b"-")[1])
            kind = AcknowledgeType.RELEASE if i < 10 else (
                AcknowledgeType.REJECT if i < 20 else AcknowledgeType.ACCEPT)  # fmt: skip
            c.acknowledge(m, kind)
        if got:
            c.commit_sync()
        if all(len(rounds.get(v, [])) == 3 for v in values[:10]) and len(rounds) == 30:
            break
    for v in values[:10]:
        assert rounds[v] == [1, 2, 3], (v, rounds[v])
    for v in values[10:]:
        assert rounds[v] == [1], (v, rounds[v])
    end = time.monotonic() + 3
    while time.monotonic() < end:  # nothing comes back: archived or accepted
        assert _poll(c) == []
    c.close()


def test_a_killed_consumers_records_go_to_others_after_the_lock(
    enabled: Node, tmp_path: Path
) -> None:
    values = _topic(enabled, "crash", 20, "crashers")
    script = tmp_path / "holder.py"
    script.write_text(
        "import sys, time\n"
        "from confluent_kafka import ShareConsumer\n"
        "c = ShareConsumer({'bootstrap.servers': sys.argv[1], 'group.id': 'crashers',\n"
        "                   'share.acknowledgement.mode': 'explicit'})\n"
        "c.subscribe(['crash'])\n"
        "got = []\n"
        "end = time.time() + 60\n"
        "while len(got) < 20 and time.time() < end:\n"
        "    got += [m for m in c.poll(0.5) or [] if m.error() is None]\n"
        "print(len(got), flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, str(script), enabled.bootstrap],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "20"  # it holds all of them
        other = _share(enabled, "crashers", "crash")
        assert _poll(other, 2.0) == []  # locked by the holder
        killed = time.monotonic()
        holder.kill()  # kill -9: no final acknowledgement, no leave
        holder.wait(10)
        got: list[Any] = []
        deadline = time.monotonic() + LOCK_MS / 1000 + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += _poll(other)
        waited = time.monotonic() - killed
        assert sorted(m.value() for m in got) == sorted(values)
        assert {m.delivery_count() for m in got} == {2}
        assert waited > 1.0  # only once the lock expired, not at once
        other.commit_sync()
        other.close()
    finally:
        holder.kill()


def test_share_state_survives_a_restart(enabled: Node) -> None:
    """What a share group did with each record is in __share_group_state: after a restart
    (SIGKILL, nothing said on the way down) the accepted and rejected records stay done,
    and the released ones come back with the delivery count they had plus one."""
    values = _topic(enabled, "durable", 60, "keepers")
    c = _share(enabled, "keepers", "durable", **{"share.acknowledgement.mode": "explicit"})
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    # 0-19 accepted, 20-29 rejected, 30-59 released once
    while len(seen) < len(values) and time.monotonic() < deadline:
        got = _poll(c)
        for m in got:
            assert m.delivery_count() == 1
            assert m.value() not in seen
            seen.add(m.value())
            i = int(m.value().split(b"-")[1])
            kind = AcknowledgeType.ACCEPT if i < 20 else (
                AcknowledgeType.REJECT if i < 30 else AcknowledgeType.RELEASE)  # fmt: skip
            c.acknowledge(m, kind)
            c.commit_sync()  # one write each, answered once the state is written
    assert seen == set(values)
    c.close()
    # __share_group_state keeps only what the state needs: pruned below the snapshots
    probe = Consumer({"bootstrap.servers": enabled.bootstrap, "group.id": "probe"})
    md = probe.list_topics("__share_group_state", timeout=10).topics["__share_group_state"]

    def pruned() -> bool:
        marks = [probe.get_watermark_offsets(TopicPartition("__share_group_state", i), 5)
                 for i in md.partitions]  # fmt: skip
        return any(low > 0 for low, _ in marks)

    wait_until(pruned, 20, what="__share_group_state pruned")
    probe.close()
    logged = len(enabled.logs())
    enabled.kill9()
    enabled.start()
    # the group itself is back (ShareGroupMetadata in __consumer_offsets), with no member,
    # and its offsets: the first record neither accepted nor rejected
    bs = ("--bootstrap-server", enabled.bootstrap)
    assert "keepers" in _ok("share-groups", *bs, "--list").split()
    rows = _lines(_ok("share-groups", *bs, "--describe", "--group", "keepers"))
    # start offset 30; lag 30: the high watermark 60, less the start, less no record past
    # the start delivered (30-59 were released)
    assert rows[1].split() == ["keepers", "durable", "0", "30", "30"]
    # each shard read once: not once per image of the metadata log's replay at start
    loads = enabled.logs()[logged:].count("share coordinator: loaded __share_group_state-[")
    assert loads == 1, enabled.logs()[logged:][-3000:]
    c = _share(enabled, "keepers", "durable", **{"share.acknowledgement.mode": "explicit"})
    again = _accept(c, 30)
    assert sorted(again) == sorted(values[30:])  # nothing accepted or rejected again
    assert set(again.values()) == {2}
    end = time.monotonic() + 2
    while time.monotonic() < end:
        assert _poll(c) == []
    c.close()
    # kafka-dump-log.sh --share-group-state-decoder reads the coordinator's records
    segments = sorted(str(f) for f in enabled.data.glob("__share_group_state-*/*.log"))
    dumped = _ok("dump-log", "--share-group-state-decoder", "--files", ",".join(segments))
    assert '"groupId":"keepers"' in dumped
    assert '"type":"0"' in dumped  # a ShareSnapshot
    assert '"stateBatches":[{"firstOffset":' in dumped


def test_the_share_groups_tool_lists_and_describes(enabled: Node) -> None:
    values = _topic(enabled, "tooled", 5, "tool-group")
    c = _share(enabled, "tool-group", "tooled", **{"client.id": "worker-7"})
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        got += _poll(c)
    bs = ("--bootstrap-server", enabled.bootstrap)
    assert "tool-group" in _ok("share-groups", *bs, "--list").split()
    assert "tool-group" not in _ok("consumer-groups", *bs, "--list").split()  # as Kafka's
    listed = _ok("share-groups", *bs, "--list", "--state", "stable").splitlines()
    assert listed[0].split() == ["GROUP", "STATE"]
    assert ["tool-group", "Stable"] in [line.split() for line in listed]
    members = _ok("share-groups", *bs, "--describe", "--group", "tool-group", "--members")
    header, row = _lines(members)
    assert header.split() == [
        "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]  # fmt: skip
    assert row.split()[0] == "tool-group"
    assert row.split()[3:] == ["worker-7", "1", "tooled:0"]
    verbose = _lines(_ok("share-groups", *bs, "--describe", "--group", "tool-group",
                         "--members", "--verbose"))  # fmt: skip
    assert verbose[0].split()[-2:] == ["MEMBER-EPOCH", "ASSIGNMENT"]
    assert int(verbose[1].split()[-2]) > 0
    state = _ok("share-groups", *bs, "--describe", "--group", "tool-group", "--state")
    assert _lines(state)[1].split()[-2:] == ["Stable", "1"]
    state = _ok("share-groups", *bs, "--describe", "--all-groups", "--state", "--verbose")
    header, *rows = _lines(state)
    assert header.split()[-3:] == ["GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert [r.split()[0] for r in rows if r.split()[0] == "tool-group"] == ["tool-group"]
    missing = keeperless("share-groups", *bs, "--describe", "--group", "nope", "--state")
    assert "Share group 'nope' does not exist." in missing.stdout
    assert missing.returncode == 1
    res = keeperless("share-groups", *bs, "--delete", "--group", "x")
    assert res.returncode == 0  # (Kafka's tool reports each group's failure, exits 0)
    assert (
        "* Group 'x' could not be deleted due to: org.apache.kafka.common.errors."
        "GroupIdNotFoundException: Group 'x' is not a share group."
    ) in res.stdout
    # a consumer group of the name is not deleted (DeleteGroups would delete any type;
    # found by a fresh-eyes trial: its committed offsets went with it)
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": enabled.bootstrap})
    committed = ConsumerGroupTopicPartitions("plain-cg", [TopicPartition("tooled", 0, 3)])
    admin.alter_consumer_group_offsets([committed])["plain-cg"].result(30)
    res = keeperless("share-groups", *bs, "--delete", "--group", "plain-cg")
    assert "Group 'plain-cg' is not a share group." in res.stdout, res.stdout
    assert "plain-cg" in _ok("consumer-groups", *bs, "--list").split()
    c.commit_sync()  # the 5 records accepted: the start moves past them
    offsets = _ok("share-groups", *bs, "--describe", "--group", "tool-group")
    header, row = _lines(offsets)
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert row.split() == ["tool-group", "tooled", "0", "5", "0"]
    assert _ok("share-groups", *bs, "--describe", "--group", "tool-group", "--offsets") == offsets
    header, row = _lines(_ok("share-groups", *bs, "--describe", "--group", "tool-group",
                             "--verbose"))  # fmt: skip
    assert header.split() == [
        "GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]  # fmt: skip
    assert row.split() == ["tool-group", "tooled", "0", "0", "5", "0"]
    c.close()


def test_offsets_are_reset_and_deleted_and_the_group_deleted_only_while_empty(
    enabled: Node,
) -> None:
    """kafka-share-groups.sh --reset-offsets (a dry run unless --execute), --delete-offsets
    and --delete: the next consumer starts where the reset put the group, a deleted
    state starts again from share.auto.offset.reset, and none of it while a member is in
    the group (NON_EMPTY_GROUP)."""
    values = _topic(enabled, "resets", 10, "resetters")
    bs = ("--bootstrap-server", enabled.bootstrap)
    grp = ("--group", "resetters")

    def drain(expect: int) -> list[Any]:
        c = _share(enabled, "resetters", "resets")
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < expect and time.monotonic() < deadline:
            got += _poll(c)
        c.commit_sync()
        c.close()
        return got

    def start() -> list[str]:
        rows = _lines(_ok("share-groups", *bs, "--describe", *grp))[1:]
        return [r.split()[3] for r in rows]

    assert sorted(m.value() for m in drain(10)) == sorted(values)
    assert start() == ["10"]
    reset = ("share-groups", *bs, "--reset-offsets", *grp, "--topic", "resets")
    dry = _ok(*reset, "--to-offset", "4", "--dry-run")
    assert dry.split()[-4:] == ["resetters", "resets", "0", "4"]
    assert start() == ["10"]  # a dry run changes nothing
    _ok(*reset, "--to-offset", "4", "--execute")
    assert start() == ["4"]
    again = drain(6)
    assert sorted(m.value() for m in again) == sorted(values[4:])
    assert {m.delivery_count() for m in again} == {1}  # a new start: counted afresh
    deleted = _ok("share-groups", *bs, "--delete-offsets", *grp, "--topic", "resets")
    assert deleted.split()[-2:] == ["resets", "Successful"]
    assert start() == []
    assert sorted(m.value() for m in drain(10)) == sorted(values)  # from 'earliest' again
    # a member in the group: refused
    busy = _share(enabled, "resetters", "resets")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "Stable" not in _ok(
        "share-groups", *bs, "--describe", *grp, "--state"
    ):
        _poll(busy)
    res = keeperless(*reset, "--to-earliest", "--execute")
    assert res.returncode == 1
    assert "member" in res.stderr, res.stderr
    assert "error: error" not in res.stderr.lower()  # one prefix, not two
    res = keeperless("share-groups", *bs, "--delete", *grp)
    assert (
        "could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException: "
        "Share group 'resetters' is not EMPTY."
    ) in res.stdout, res.stdout
    busy.close()
    gone = _ok("share-groups", *bs, "--delete", *grp)
    assert "Deletion of requested share groups ('resetters') was successful." in gone
    assert "resetters" not in _ok("share-groups", *bs, "--list").split()
    # found by a fresh-eyes review: deleting the offsets of a group that does not exist,
    # or of a topic it never read, is an error; a reset of a new group makes the group
    res = keeperless("share-groups", *bs, "--delete-offsets", *grp, "--topic", "resets")
    assert res.returncode == 1
    assert "does not exist" in res.stderr, res.stderr
    res = keeperless("share-groups", *bs, "--delete-offsets", *grp, "--topic", "resets:0")
    assert res.returncode == 1
    assert "without partitions" in res.stderr, res.stderr
    _ok(*reset, "--to-offset", "2", "--execute")  # 'resetters' exists again, empty
    assert "resetters" in _ok("share-groups", *bs, "--list").split()
    assert start() == ["2"]
    _topic(enabled, "unread", 1, "resetters")
    res = keeperless("share-groups", *bs, "--delete-offsets", *grp, "--topic", "unread")
    assert res.returncode == 1
    assert "no state for topic unread" in res.stdout, res.stdout


def test_a_deleted_topics_share_state_is_deleted(enabled: Node) -> None:
    """The share coordinator deletes the state of a topic deleted (which would otherwise
    stay in __share_group_state for ever and hold its pruning back)."""
    _topic(enabled, "doomed", 5, "doomers")
    c = _share(enabled, "doomers", "doomed")
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        got += _poll(c)
    c.commit_sync()
    c.close()
    md = _send(enabled, ApiKey.METADATA, 12, {"topics": [{"name": "doomed", "topic_id": None}],
               "allow_auto_topic_creation": False,
               "include_topic_authorized_operations": False})  # fmt: skip
    tid = md.topics[0].topic_id

    def start() -> int:
        resp = _send(enabled, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, {
            "group_id": "doomers",
            "topics": [{"topic_id": tid, "partitions": [{"partition": 0, "leader_epoch": -1}]}],
        })  # fmt: skip
        return int(resp.results[0].partitions[0].start_offset)

    assert start() == 5
    admin = AdminClient({"bootstrap.servers": enabled.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(30)
    wait_until(lambda: start() == -1, 30, what="the deleted topic's share state deleted")


def test_a_backlog_past_one_read_is_delivered_once(enabled: Node) -> None:
    """5 MB in one partition, 5x what a share fetch reads of it at once: every record
    delivered once, over many fetches."""
    admin = AdminClient({"bootstrap.servers": enabled.bootstrap})
    admin.create_topics([NewTopic("backlog", 1, 1)])["backlog"].result(30)
    _ok("configs", "--bootstrap-server", enabled.bootstrap, "--alter", "--entity-type",
        "groups", "--entity-name", "bl", "--add-config",
        "share.auto.offset.reset=earliest")  # fmt: skip
    p = Producer({"bootstrap.servers": enabled.bootstrap, "linger.ms": 20})
    pad = b"x" * 1000
    for i in range(5000):
        p.produce("backlog", value=b"%05d" % i + pad)
        p.poll(0)
    assert p.flush(30) == 0
    c = _share(enabled, "bl", "backlog")
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 5000 and time.monotonic() < deadline:
        seen += [m.value()[:5] for m in _poll(c)]
    assert len(seen) == 5000
    assert sorted(seen) == [b"%05d" % i for i in range(5000)]
    c.commit_sync()
    c.close()


def test_read_committed_share_groups_get_every_committed_record(enabled: Node) -> None:
    """Committed transactions after an aborted one are delivered, aborted ones never
    (found by a new user: everything between the first abort and the last was skipped)."""
    admin = AdminClient({"bootstrap.servers": enabled.bootstrap})
    admin.create_topics([NewTopic("txq", 1, 1)])["txq"].result(30)
    _ok("configs", "--bootstrap-server", enabled.bootstrap, "--alter", "--entity-type",
        "groups", "--entity-name", "txg", "--add-config",
        "share.auto.offset.reset=earliest,share.isolation.level=read_committed")  # fmt: skip
    p = Producer({"bootstrap.servers": enabled.bootstrap, "transactional.id": "share-tx",
                  "transaction.timeout.ms": 30000})  # fmt: skip
    p.init_transactions(30)
    committed: list[bytes] = []
    for n, commit in enumerate((True, False, True, False, True)):
        p.begin_transaction()
        values = [f"t{n}-{i}".encode() for i in range(20)]
        for v in values:
            p.produce("txq", value=v)
        p.flush(30)  # the aborted records reach the log too
        if commit:
            p.commit_transaction(30)
            committed += values
        else:
            p.abort_transaction(30)
    c = _share(enabled, "txg", "txq")
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(committed) and time.monotonic() < deadline:
        got += [m.value() for m in _poll(c)]
    end = time.monotonic() + 2
    while time.monotonic() < end:  # and nothing more (no aborted record)
        got += [m.value() for m in _poll(c)]
    assert sorted(got) == sorted(committed)
    c.commit_sync()
    c.close()


def test_bad_share_requests_get_kafkas_errors(enabled: Node) -> None:
    _topic(enabled, "bad", 5, "bad-group")
    # a share group id that is a consumer group's
    c = Consumer({"bootstrap.servers": enabled.bootstrap, "group.id": "classic-one",
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe(["bad"])
    wait_until(lambda: c.poll(0.5) is not None or bool(c.assignment()), 30, what="a member")
    resp = _heartbeat(enabled, "classic-one", str(uuid.uuid4()), 0, ["bad"])
    assert resp.error_code == 69, resp  # GROUP_ID_NOT_FOUND
    assert "not a share group" in (resp.error_message or "")
    c.close()
    # ... and one that only has committed offsets (a classic group in Kafka's eyes)
    simple = Consumer({"bootstrap.servers": enabled.bootstrap, "group.id": "offsets-only"})
    simple.commit(offsets=[TopicPartition("bad", 0, 2)], asynchronous=False)
    simple.close()
    resp = _heartbeat(enabled, "offsets-only", str(uuid.uuid4()), 0, ["bad"])
    assert resp.error_code == 69, resp
    member = str(uuid.uuid4())
    joined = _heartbeat(enabled, "bad-group", member, 0, ["bad"])
    assert joined.error_code == 0
    assert joined.member_epoch > 0
    # a consumer-protocol member on a share group's id (found by a new user: it joined)
    cg = _send(enabled, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
        "group_id": "bad-group", "member_id": "", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout": datetime.timedelta(seconds=30),
        "subscribed_topic_names": ["bad"], "server_assignor": None, "topic_partitions": [],
    })  # fmt: skip
    assert cg.error_code == 69, cg  # GROUP_ID_NOT_FOUND
    assert "is not a consumer group" in (cg.error_message or "")
    fenced = _heartbeat(enabled, "bad-group", member, joined.member_epoch + 5, None)
    assert fenced.error_code == 110  # FENCED_MEMBER_EPOCH
    unknown = _heartbeat(enabled, "bad-group", str(uuid.uuid4()), 3, None)
    assert unknown.error_code == 25  # UNKNOWN_MEMBER_ID
    tid = joined.assignment.topic_partitions[0].topic_id
    fetch = {"group_id": "bad-group", "member_id": member, "max_wait": 0, "min_bytes": 1,
             "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
             "forgotten_topics_data": []}  # fmt: skip
    no_session = _send(enabled, ApiKey.SHARE_FETCH, 1, {**fetch, "share_session_epoch": 4,
                                                        "topics": []})  # fmt: skip
    assert no_session.error_code == 122  # SHARE_SESSION_NOT_FOUND
    opened = _send(
        enabled,
        ApiKey.SHARE_FETCH,
        1,
        {
            **fetch,
            "share_session_epoch": 0,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": []}],
                }
            ],
        },
    )
    assert opened.error_code == 0
    acquired = opened.responses[0].partitions[0].acquired_records
    assert acquired
    assert acquired[0].first_offset == 0
    stale = _send(enabled, ApiKey.SHARE_FETCH, 1, {**fetch, "share_session_epoch": 7,
                                                   "topics": []})  # fmt: skip
    assert stale.error_code == 123  # INVALID_SHARE_SESSION_EPOCH (the session is gone)
    reopened = _send(
        enabled,
        ApiKey.SHARE_FETCH,
        1,
        {**fetch, "share_session_epoch": 0, "topics": opened_topics(tid)},
    )
    assert reopened.error_code == 0
    # acknowledging a record this member does not hold
    ack = _acknowledge(enabled, "bad-group", member, tid, 4000, 4000, 1)  # ACCEPT
    assert ack.error_code == 0
    part = ack.responses[0].partitions[0]
    assert part.error_code == 121, part  # INVALID_RECORD_STATE
    assert "4000" in (part.error_message or "")


def _acknowledge(n: Node, group: str, member: str, tid: uuid.UUID, first: int, last: int,
                 kind: int) -> Any:  # fmt: skip
    """ShareAcknowledge of partition 0's offsets ``first``..``last`` (in session epoch 1)."""
    return _send(n, ApiKey.SHARE_ACKNOWLEDGE, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": 1,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                    "acknowledgement_batches": [{"first_offset": first, "last_offset": last,
                                                 "acknowledge_types": [kind]}]}]}],
    })  # fmt: skip


def opened_topics(tid: uuid.UUID) -> list[dict[str, Any]]:
    return [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                              "acknowledgement_batches": []}]}]  # fmt: skip


def test_share_consumers_across_brokers_on_a_cluster_formatted_at_4_2(tmp_path: Path) -> None:
    """A cluster formatted at --release-version 4.2 has share groups on (share.version 1
    bootstrapped); a topic's partitions led by two brokers, each consumer with a share
    session on each: every record delivered once."""
    from tests.integration.cluster import Cluster

    c = Cluster(tmp_path, release="4.2")
    c.start()
    try:
        servers = [("127.0.0.1", int(b.split(":")[1])) for b in c.bootstrap.split(",")]
        resp = call(servers, ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                      "client_software_version": "1"})  # fmt: skip
        assert set(SHARE_APIS) <= {int(k.api_key) for k in resp.api_keys}
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic("spread", 4, 2)])["spread"].result(30)
        _ok("configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type",
            "groups", "--entity-name", "spread-g", "--add-config",
            "share.auto.offset.reset=earliest")  # fmt: skip
        md = admin.list_topics("spread", timeout=10).topics["spread"].partitions
        assert len({p.leader for p in md.values()}) == 2  # led by both brokers
        p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 5})
        values = [f"s-{i}".encode() for i in range(400)]
        for i, v in enumerate(values):
            p.produce("spread", value=v, partition=i % 4)
        assert p.flush(30) == 0
        consumers = [ShareConsumer({"bootstrap.servers": c.bootstrap, "group.id": "spread-g",
                                    "max.poll.records": 25}) for _ in range(2)]  # fmt: skip
        for sc in consumers:
            sc.subscribe(["spread"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            for sc in consumers:
                got += [m.value() for m in _poll(sc, 0.2)]
        assert sorted(got) == sorted(values)
        for sc in consumers:
            sc.commit_sync()
            sc.close()
    finally:
        c.stop()


def test_share_state_moves_with_the_partitions_leader(tmp_path: Path) -> None:
    """A partition's leader killed -9: the new leader reads the share-partition's state
    from the share coordinator (on another broker, or itself taking over
    __share_group_state) and goes on where the old one left off."""
    from tests.integration.cluster import Cluster

    c = Cluster(tmp_path, release="4.2", extra={  # the group's coordinator moves too
        "share.coordinator.state.topic.replication.factor": "2",
        "offsets.topic.replication.factor": "2",
    })  # fmt: skip
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic("moving", 1, 2)])["moving"].result(30)
        _ok("configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type",
            "groups", "--entity-name", "movers", "--add-config",
            "share.auto.offset.reset=earliest")  # fmt: skip
        p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "acks": "all"})
        values = [f"m-{i}".encode() for i in range(40)]
        for v in values:
            p.produce("moving", value=v)
        assert p.flush(30) == 0
        conf = {"bootstrap.servers": c.bootstrap, "group.id": "movers",
                "share.acknowledgement.mode": "explicit"}  # fmt: skip
        sc = ShareConsumer(conf)
        sc.subscribe(["moving"])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < len(values) and time.monotonic() < deadline:
            got = _poll(sc)
            for m in got:
                seen.add(m.value())
                i = int(m.value().split(b"-")[1])
                sc.acknowledge(m, AcknowledgeType.ACCEPT if i < 20 else AcknowledgeType.RELEASE)
            if got:
                sc.commit_sync()
        assert seen == set(values)
        sc.close()
        md = admin.list_topics("moving", timeout=10).topics["moving"].partitions[0]
        old = md.leader
        c.brokers[old].kill9()

        def moved() -> bool:
            try:
                part = admin.list_topics("moving", timeout=5).topics["moving"].partitions[0]
            except Exception:  # the killed broker may be asked first
                return False
            return part.leader not in (-1, old)

        wait_until(moved, 60, what="a new leader of moving-0")
        sc = ShareConsumer(conf)
        sc.subscribe(["moving"])
        again = _accept(sc, 20)
        assert sorted(again) == sorted(values[20:])  # the accepted ones stay done
        assert set(again.values()) == {2}
        sc.close()
    finally:
        c.stop()


def test_a_share_state_topic_that_cannot_be_made_is_named_in_the_log(tmp_path: Path) -> None:
    """One broker and Kafka's default replication factor of 3 for __share_group_state:
    share consumers get nothing, and the node's log says which key to change."""
    n = Node(tmp_path, extra={"share.coordinator.state.topic.replication.factor": "3"})
    n.format(release="4.2")
    n.start()
    try:
        _topic(n, "stuck", 3, "stuck-g")
        c = _share(n, "stuck-g", "stuck")
        deadline = time.monotonic() + 15
        got: list[Any] = []
        while time.monotonic() < deadline and "share.coordinator.state.topic.replication" not in (
            n.logs()
        ):
            got += _poll(c)
        assert got == []  # no state, no delivery
        assert "share.coordinator.state.topic.replication.factor" in n.logs()
        c.close()
    finally:
        n.stop()


def test_the_share_coordinator_runtime_reports_its_metrics(enabled: Node) -> None:
    """Kafka's coordinator runtime metrics (share-coordinator-metrics) on the node's
    Prometheus page, once share groups have written state."""
    _topic(enabled, "metered", 3, "meter")
    c = _share(enabled, "meter", "metered", **{"share.acknowledgement.mode": "explicit"})
    assert len(_accept(c, 3)) == 3
    c.close()
    page = enabled.scrape()
    prefix = "kafka_server_share_coordinator_metrics_"

    def value(name: str) -> float:
        found = [ln.split()[-1] for ln in page.splitlines() if ln.startswith(prefix + name)]
        assert found, f"{prefix}{name} not on the page"
        return float(found[0])

    assert value('num_partitions{state="active"}') >= 1
    assert value("event_processing_time_ms_count") >= 1  # the acknowledgements' writes
    assert value("partition_load_time_max") >= 0
    assert value("failed_writes_total") == 0


def test_a_reset_is_served_though_a_departed_members_share_session_lingers(
    enabled: Node,
) -> None:
    """Found by a fresh-eyes trial: a member that left the group (its heartbeat stopped,
    as a consumer killed -9) keeps its share session on the leader until it idles out.
    The offsets reset meanwhile were then served from the leader's stale state (the
    records again with their old delivery counts), and once more, from the reset state,
    when the next write was fenced: each record delivered twice. A new share session
    reads the state again whenever nothing is acquired, whoever else has one."""
    _topic(enabled, "lingering", 5, "lingerers")
    member = str(uuid.uuid4())
    beat: Any = None

    def assigned() -> bool:
        nonlocal beat
        epoch = beat.member_epoch if beat is not None and beat.error_code == 0 else 0
        if not epoch:  # (as a client: the coordinator's topic is made when it is looked up)
            _send(enabled, ApiKey.FIND_COORDINATOR, 4,
                  {"key_type": 0, "coordinator_keys": ["lingerers"]})  # fmt: skip
        beat = _heartbeat(enabled, "lingerers", member, epoch, None if epoch else ["lingering"])
        return beat.error_code == 0 and bool(beat.assignment and beat.assignment.topic_partitions)

    wait_until(assigned, 30, interval=0.2, what="the partition assigned")
    topic_id = beat.assignment.topic_partitions[0].topic_id
    fetch = {"group_id": "lingerers", "member_id": member, "max_wait": 0, "min_bytes": 1,
             "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
             "forgotten_topics_data": []}  # fmt: skip
    opened = _send(
        enabled,
        ApiKey.SHARE_FETCH,
        1,
        {**fetch, "share_session_epoch": 0, "topics": opened_topics(topic_id)},
    )
    got = opened.responses[0].partitions[0].acquired_records
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(0, 4, 1)]
    released = _acknowledge(enabled, "lingerers", member, topic_id, 0, 4, 2)  # RELEASE
    assert released.responses[0].partitions[0].error_code == 0
    # the member leaves the group; its share session stays open on the leader
    assert _heartbeat(enabled, "lingerers", member, -1, None).error_code == 0
    _ok("share-groups", "--bootstrap-server", enabled.bootstrap, "--reset-offsets",
        "--group", "lingerers", "--topic", "lingering", "--to-earliest", "--execute")  # fmt: skip
    c = ShareConsumer({"bootstrap.servers": enabled.bootstrap, "group.id": "lingerers"})
    c.subscribe(["lingering"])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        seen += [(m.offset(), m.delivery_count()) for m in _poll(c)]
    c.close()
    assert sorted(seen) == [(i, 1) for i in range(5)], seen  # once each, counted anew
