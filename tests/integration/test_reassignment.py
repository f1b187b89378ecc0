"""Partition reassignment (KIP-455) with a real client's admin API (kafka-python's
alter_partition_reassignments / list_partition_reassignments): a live RF 3 partition
moved to three other brokers under acks=all load loses nothing, the removed replicas'
brokers delete their copies, a cancellation restores the original replicas, and bad
targets are refused with Kafka's errors."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Cluster, wait_until


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One controller and six brokers (ids 2-7)."""
    c = Cluster(tmp_path_factory.mktemp("reassign"), controllers=1, brokers=6,
                extra={"offsets.topic.replication.factor": "3"})  # fmt: skip
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _admin(c: Cluster) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30_000)


def _replicas(c: Cluster, topic: str, p: int = 0) -> tuple[list[int], list[int], int]:
    """(replicas, ISR, leader) from a broker's Metadata."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(topic, timeout=10)
    part = md.topics[topic].partitions[p]
    return list(part.replicas), list(part.isrs), part.leader


def _create(c: Cluster, replicas: list[int]) -> str:
    from kafka.admin import NewTopic

    name = f"move-{uuid.uuid4().hex[:6]}"
    admin = _admin(c)
    try:
        admin.create_topics([NewTopic(name, replica_assignments={0: replicas})])
    finally:
        admin.close()
    wait_until(lambda: _replicas(c, name)[2] in replicas, what="the topic's leader")
    return name


class _Load:
    """acks=all writes of numbered values until stopped; what was acknowledged."""

    def __init__(self, c: Cluster, topic: str) -> None:
        from confluent_kafka import Producer

        self.acked: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                           "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
        self.topic = topic
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _done(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value().decode().split(":")[0])
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set() and i < 200_000:
            try:
                self.p.produce(self.topic, f"v-{i}:".encode() + b"x" * 200, partition=0,
                               on_delivery=self._done)  # fmt: skip
                i += 1
                if i % 10 == 0:
                    time.sleep(0.005)  # at most ~2000 a second: the bound lasts the test
            except BufferError:
                self.p.poll(0.05)
            self.p.poll(0)
        self.p.flush(30)

    def finish(self) -> None:
        self.stop.set()
        self.t.join(60)


def _read_all(c: Cluster, topic: str) -> set[str]:
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                     "enable.auto.commit": False})  # fmt: skip
    cons.assign([TopicPartition(topic, 0, 0)])
    got: set[str] = set()
    idle = time.monotonic()
    try:
        while time.monotonic() - idle < 5:
            for m in cons.consume(1000, 0.5):
                if m.error() is None:
                    got.add(m.value().decode().split(":")[0])
                    idle = time.monotonic()
    finally:
        cons.close()
    return got


def _restart_broker(c: Cluster, broker: int) -> None:
    """Start a stopped broker and wait until clients see it (registered and unfenced):
    the next test may place replicas on it."""
    from confluent_kafka.admin import AdminClient

    c.brokers[broker].start()
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    wait_until(lambda: broker in admin.list_topics(timeout=5).brokers, timeout=30,
               what=f"broker {broker} back")  # fmt: skip


def _wait_gone(c: Cluster, broker: int) -> None:
    """Until clients no longer see a stopped broker (else a client may still try it)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    wait_until(lambda: broker not in admin.list_topics(timeout=5).brokers, timeout=30,
               what=f"broker {broker} gone from the metadata")  # fmt: skip


def _fill(c: Cluster, topic: str, megabytes: int) -> None:
    """About ``megabytes`` MB into partition 0, acknowledged by every replica."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(megabytes * 1000):
        while True:
            try:
                p.produce(topic, b"%08d" % i + b"x" * 1000, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0


def _partition_dir(c: Cluster, broker: int, topic: str) -> Path:
    return c.brokers[broker].data / f"{topic}-0"


def test_move_a_live_partition_to_three_other_brokers(six: Cluster) -> None:
    from kafka.structs import TopicPartition as KTP

    c = six
    topic = _create(c, [2, 3, 4])
    load = _Load(c, topic)
    wait_until(lambda: len(load.acked) > 2000, timeout=30, what="acknowledged writes")
    admin = _admin(c)
    try:
        result = admin.alter_partition_reassignments({KTP(topic, 0): [5, 6, 7]})
        assert result == {KTP(topic, 0): None}, result
        listed = admin.list_partition_reassignments([KTP(topic, 0)])
        assert listed  # in progress (the new replicas are catching up) or already done
        wait_until(lambda: sorted(_replicas(c, topic)[0]) == [5, 6, 7], timeout=60,
                   what="the reassignment to complete")  # fmt: skip
        acked_at_move = len(load.acked)
        assert not admin.list_partition_reassignments([KTP(topic, 0)])
    finally:
        admin.close()
    wait_until(lambda: len(load.acked) > acked_at_move + 500, timeout=30,
               what="writes acknowledged by the new replicas")  # fmt: skip
    load.finish()
    _, isr, leader = _replicas(c, topic)
    assert sorted(isr) == [5, 6, 7]
    assert leader in (5, 6, 7)
    got = _read_all(c, topic)
    lost = set(load.acked) - got
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:3]}"
    for b in (2, 3, 4):  # the removed replicas' copies are deleted
        wait_until(lambda b=b: not _partition_dir(c, b, topic).exists(), timeout=20,
                   what=f"broker {b} to delete its copy")  # fmt: skip
    for b in (5, 6, 7):
        assert _partition_dir(c, b, topic).exists()


def test_cancel_restores_the_original_replicas(six: Cluster) -> None:
    from kafka.structs import TopicPartition as KTP

    c = six
    topic = _create(c, [2, 3, 4])
    # a replica on a stopped broker never catches up: the reassignment stays in progress
    c.brokers[7].stop()
    _wait_gone(c, 7)
    admin = _admin(c)
    try:
        admin.alter_partition_reassignments({KTP(topic, 0): [2, 3, 7]})
        wait_until(lambda: 7 in _replicas(c, topic)[0], what="broker 7 added")
        listed = admin.list_partition_reassignments([KTP(topic, 0)])
        assert listed, listed
        admin.alter_partition_reassignments({KTP(topic, 0): None})  # cancel
        wait_until(lambda: sorted(_replicas(c, topic)[0]) == [2, 3, 4],
                   what="the original replicas back")  # fmt: skip
        assert not admin.list_partition_reassignments([KTP(topic, 0)])
    finally:
        admin.close()
        _restart_broker(c, 7)


def test_bad_targets_are_refused(six: Cluster) -> None:
    from kafka.structs import TopicPartition as KTP

    c = six
    topic = _create(c, [2, 3, 4])
    tp = KTP(topic, 0)
    admin = _admin(c)
    try:
        for target, name in (([2, 2, 3], "InvalidReplicationAssignment"),
                             ([2, 3, 99], "InvalidReplicationAssignment"),
                             (None, "NoReassignmentInProgress")):  # fmt: skip
            result = admin.alter_partition_reassignments({tp: target})
            assert name in result[tp].__name__, result
    finally:
        admin.close()
    assert sorted(_replicas(c, topic)[0]) == [2, 3, 4]


def test_the_kafka_named_tool(six: Cluster, tmp_path: Path) -> None:
    """kafka-reassign-partitions.sh: --generate a proposal, --execute it, --list and
    kafka-topics.sh --describe while it runs, --verify, --cancel; refusals in Kafka's
    words."""
    import json
    import subprocess

    from tests.integration.cluster import ROOT, keeperless

    c = six
    script = str(ROOT / "bin" / "kafka-reassign-partitions.sh")

    def tool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, "--bootstrap-server", c.bootstrap, *args],
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    topic = _create(c, [2, 3, 4])
    _fill(c, topic, 3)  # more than two fetches' worth: a slow throttle holds the move
    move = tmp_path / "move.json"
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    gen = tool("--generate", "--topics-to-move-json-file", str(move), "--broker-list", "5,6,7")
    assert gen.returncode == 0, gen.stderr
    current, proposed = gen.stdout.split("Proposed partition reassignment configuration\n")
    assert current.startswith("Current partition replica assignment\n")
    plan = json.loads(proposed)
    assert sorted(plan["partitions"][0]["replicas"]) == [5, 6, 7]
    target = tmp_path / "target.json"
    target.write_text(proposed)
    # a throttle of 1000 B/s: the reassignment stays in progress while we look at it
    run = tool("--execute", "--reassignment-json-file", str(target), "--throttle", "1000")
    assert run.returncode == 0, run.stderr
    assert "Save this to use as the --reassignment-json-file option during rollback" in run.stdout
    assert f"Successfully started partition reassignment for {topic}-0" in run.stdout
    assert "The inter-broker throttle limit was set to 1000 B/s" in run.stdout
    assert _topic_throttles(c, topic) == ("0:2,0:3,0:4", "0:5,0:6,0:7")
    listed = tool("--list").stdout
    assert listed.startswith("Current partition reassignments:\n")
    assert f"{topic}-0: replicas: " in listed
    assert " adding: " in listed
    assert " removing: 2,3,4." in listed
    described = keeperless("topics", "--bootstrap-server", c.bootstrap, "--describe",
                           "--topic", topic, check=True).stdout  # fmt: skip
    assert "\tAdding Replicas: " in described
    assert "\tRemoving Replicas: 2,3,4" in described
    verify = tool("--verify", "--reassignment-json-file", str(target))
    assert f"Reassignment of partition {topic}-0 is still in progress." in verify.stdout
    assert "Clearing" not in verify.stdout  # the throttles stay while it runs
    again = tool("--execute", "--reassignment-json-file", str(target))
    assert again.returncode == 1
    assert "Cannot execute because there is an existing partition assignment." in (
        again.stdout + again.stderr
    )
    # --additional changes the throttle of what runs
    throttled = tool("--execute", "--reassignment-json-file", str(target), "--additional",
                     "--throttle", "2000")  # fmt: skip
    assert throttled.returncode == 0, throttled.stderr
    assert "The inter-broker throttle limit was set to 2000 B/s" in throttled.stdout
    assert _broker_throttle(c, 6) == "2000"
    notanumber = tool("--execute", "--reassignment-json-file", str(target), "--additional",
                      "--throttle", "fast")  # fmt: skip
    assert notanumber.returncode != 0
    assert "--throttle" in notanumber.stderr
    assert "'fast'" in notanumber.stderr
    cancel = tool("--cancel", "--reassignment-json-file", str(target))
    assert f"Successfully cancelled partition reassignment for: {topic}-0" in cancel.stdout
    _assert_cleared(c, cancel.stdout, topic, 6)
    wait_until(lambda: sorted(_replicas(c, topic)[0]) == [2, 3, 4], what="rollback")
    assert tool("--list").stdout.strip() == "No partition reassignments found."
    verify = tool("--verify", "--reassignment-json-file", str(target)).stdout
    assert f"There is no active reassignment of partition {topic}-0, but replica set is " in (
        verify
    )
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 2, 3]}]}))  # fmt: skip
    refused = tool("--execute", "--reassignment-json-file", str(bad))
    assert refused.returncode == 1
    assert "Partition replica lists may not contain duplicate entries" in refused.stderr
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 3, 99]}]}))  # fmt: skip
    assert "Unknown broker id 99" in tool("--execute", "--reassignment-json-file",
                                          str(unknown)).stderr  # fmt: skip


def _topic_throttles(c: Cluster, topic: str) -> tuple[str, str]:
    """(leader.replication.throttled.replicas, follower.replication.throttled.replicas)."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    res = ConfigResource("topic", topic)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})  # kept until the answer
    got = admin.describe_configs([res])[res].result(10)
    return (got["leader.replication.throttled.replicas"].value or "",
            got["follower.replication.throttled.replicas"].value or "")  # fmt: skip


def _broker_throttle(c: Cluster, broker: int) -> str | None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    res = ConfigResource("broker", str(broker))
    admin = AdminClient({"bootstrap.servers": c.bootstrap})  # kept until the answer
    got = admin.describe_configs([res])[res].result(10)
    entry = got["follower.replication.throttled.rate"]
    return None if entry.is_default else entry.value


def _assert_cleared(c: Cluster, out: str, topic: str, broker: int) -> None:
    """The tool said it cleared the throttles (Kafka's lines) and they are gone."""
    assert "Clearing broker-level throttles on brokers 2,3,4,5,6,7" in out
    assert f"Clearing topic-level throttles on topic {topic}" in out
    assert _topic_throttles(c, topic) == ("", "")
    assert _broker_throttle(c, broker) is None


def _log_bytes(c: Cluster, broker: int, topic: str) -> int:
    d = _partition_dir(c, broker, topic)
    try:
        return sum(f.stat().st_size for f in d.glob("*.log"))
    except OSError:  # not there yet, or a segment rolled while we looked
        return 0


def test_a_throttled_move_catches_up_at_the_throttle(six: Cluster, tmp_path: Path) -> None:
    """kafka-reassign-partitions.sh --throttle: the new replica catches up at the rate
    set (within 20 %), the tool sets the topic and broker throttles as Kafka's does, and
    --verify clears them once the move is done."""
    import json
    import subprocess

    from tests.integration.cluster import ROOT

    c = six
    topic = _create(c, [2, 3, 4])
    _fill(c, topic, 16)
    size = _log_bytes(c, 2, topic)
    assert size > 16_000_000
    rate = 2_000_000
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 3, 5]}]}))  # fmt: skip
    script = str(ROOT / "bin" / "kafka-reassign-partitions.sh")

    def tool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, "--bootstrap-server", c.bootstrap, *args],
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    run = tool("--execute", "--reassignment-json-file", str(target), "--throttle", str(rate))
    assert run.returncode == 0, run.stderr
    started = time.monotonic()  # the reassignment is in the metadata
    assert "Warning: You must run --verify periodically" in run.stdout
    assert f"The inter-broker throttle limit was set to {rate} B/s" in run.stdout
    # as Kafka's tool: the leader throttle on the source replicas, the follower
    # throttle on the new one, the rate on every broker of the move
    assert _topic_throttles(c, topic) == ("0:2,0:3,0:4", "0:5")
    assert _broker_throttle(c, 5) == str(rate)
    assert _broker_throttle(c, 6) is None
    wait_until(lambda: _log_bytes(c, 5, topic) >= size, timeout=60,
               what="the new replica to catch up")  # fmt: skip
    took = time.monotonic() - started
    observed = size / took
    assert 0.8 * rate <= observed <= 1.2 * rate, f"{observed:.0f} B/s against {rate} B/s"
    wait_until(lambda: sorted(_replicas(c, topic)[0]) == [2, 3, 5], timeout=30,
               what="the reassignment to complete")  # fmt: skip
    verify = tool("--verify", "--reassignment-json-file", str(target))
    assert f"Reassignment of partition {topic}-0 is completed." in verify.stdout
    _assert_cleared(c, verify.stdout, topic, 5)


def test_drain_unregister_and_reuse_a_broker_id(six: Cluster) -> None:
    """A stopped broker unregistered while it still holds a replica: Kafka's tool line
    and a warning naming the partition, which stays readable (under-replicated, not
    lost) until a reassignment repairs it; the id then re-used by a broker started on
    the old disk starts clean (its stray copy set aside, renamed -stray) and takes new
    replicas."""
    from kafka.structs import TopicPartition as KTP

    from tests.integration.cluster import keeperless

    c = six
    topic = _create(c, [5, 6, 7])
    _fill(c, topic, 1)
    c.brokers[6].stop()
    _wait_gone(c, 6)
    try:
        out = keeperless("cluster", "unregister", "--bootstrap-server", c.bootstrap,
                         "--id", "6", check=True).stdout  # fmt: skip
        assert "Broker 6 is no longer registered." in out
        assert "WARNING: broker 6 still holds replicas of " in out
        assert f"{topic}-0" in out
        replicas, isr, _ = _replicas(c, topic)
        assert 6 in replicas
        assert 6 not in isr
        assert len(_read_all(c, topic)) == 1000  # under-replicated, not lost
        admin = _admin(c)
        try:
            admin.alter_partition_reassignments({KTP(topic, 0): [5, 7, 2]})
        finally:
            admin.close()
        wait_until(lambda: sorted(_replicas(c, topic)[0]) == [2, 5, 7], timeout=60,
                   what="the repair to complete")  # fmt: skip
        assert _partition_dir(c, 6, topic).exists()  # the stopped broker's old copy
    finally:
        _restart_broker(c, 6)
    wait_until(lambda: not _partition_dir(c, 6, topic).exists(), timeout=30,
               what="the re-registered broker to set its stray copy aside")  # fmt: skip
    fresh = _create(c, [6, 2, 3])
    _fill(c, fresh, 1)
    assert len(_read_all(c, fresh)) == 1000
    assert len(_read_all(c, topic)) == 1000


def test_create_with_a_replica_assignment(six: Cluster) -> None:
    """kafka-topics.sh --create --replica-assignment: each partition's replicas as given;
    Kafka's refusals for a malformed one."""
    from tests.integration.cluster import keeperless

    c = six
    topic = f"placed-{uuid.uuid4().hex[:6]}"
    made = keeperless("topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
                      "--replica-assignment", "5:6:7,6:7:2")  # fmt: skip
    assert made.returncode == 0, made.stderr
    wait_until(lambda: _replicas(c, topic, 1)[0] == [6, 7, 2], what="partition 1's replicas")
    assert _replicas(c, topic, 0)[0] == [5, 6, 7]
    for bad, words in (("5:5:6", "may not contain duplicate entries: 5"),
                       ("5:6,6:7:2", "Partition 1 has different replication factor"),
                       ("5:x", "expected broker ids")):  # fmt: skip
        r = keeperless("topics", "--bootstrap-server", c.bootstrap, "--create", "--topic",
                       f"bad-{uuid.uuid4().hex[:6]}", "--replica-assignment", bad)  # fmt: skip
        assert r.returncode == 1
        assert words in r.stderr, r.stderr
    both = keeperless("topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", "x",
                      "--replica-assignment", "5", "--partitions", "2")  # fmt: skip
    assert 'can\'t be used with option "[partitions]"' in both.stderr
