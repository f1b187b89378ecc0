"""JBOD (KIP-858): brokers with two log.dirs. New partitions are spread over both; a
replica moves between them under acks=all load (kafka-reassign-partitions.sh with
log_dirs, kafka-python's alter_replica_log_dirs) losing nothing; a failed directory
takes only its own replicas offline - their leaderships move, the broker serves on from
the other directory, OfflineLogDirectoryCount and kafka-log-dirs.sh say so - and after
the disk is back the broker's replicas rejoin."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Cluster, keeperless, wait_until
from tests.integration.test_reassignment import _Load, _read_all, _replicas


@pytest.fixture(scope="module")
def jbod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One controller and three brokers (2-4), each with log.dirs a,b (the metadata log
    in a)."""
    c = Cluster(tmp_path_factory.mktemp("jbod"), controllers=1, brokers=3, metrics=True,
                extra={"offsets.topic.replication.factor": "3"})  # fmt: skip
    for n in c.brokers.values():
        text = n.config.read_text()
        dirs = f"{n.data}/a,{n.data}/b"
        text = re.sub(r"^log\.dirs=.*$", f"log.dirs={dirs}", text, flags=re.M)
        n.config.write_text(text + "replica.high.watermark.checkpoint.interval.ms=300\n")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _dirs(c: Cluster, broker: int) -> tuple[Path, Path]:
    d = c.brokers[broker].data
    return d / "a", d / "b"


def _log_dirs(c: Cluster, broker: int) -> dict[str, Any]:
    """kafka-log-dirs.sh --describe of one broker: {path: {"error", "partitions"}}."""
    out = keeperless("log-dirs", "--bootstrap-server", c.bootstrap, "--describe",
                     "--broker-list", str(broker), check=True).stdout  # fmt: skip
    data = json.loads(out.strip().splitlines()[-1])
    return {
        d["logDir"]: {
            "error": d["error"],
            "partitions": {p["partition"]: p for p in d["partitions"]},
        }
        for d in data["brokers"][0]["logDirs"]
    }


def _where(c: Cluster, broker: int, tp: str) -> str | None:
    for path, d in _log_dirs(c, broker).items():
        if tp in d["partitions"] and not d["partitions"][tp]["isFuture"]:
            return path
    return None


def _create(c: Cluster, partitions: int, replicas: list[int] | None = None) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"jbod-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30_000)
    try:
        if replicas is None:
            admin.create_topics([NewTopic(name, partitions, 3)])
        else:
            admin.create_topics([NewTopic(name, replica_assignments={
                p: replicas for p in range(partitions)})])  # fmt: skip
    finally:
        admin.close()
    wait_until(lambda: _replicas(c, name)[2] >= 0, what="the topic's leader")
    return name


def test_new_partitions_are_spread_over_both_directories(jbod: Cluster) -> None:
    topic = _create(jbod, 6)
    a, b = _dirs(jbod, 2)

    def spread() -> bool:
        dirs = _log_dirs(jbod, 2)
        mine = {p for d in dirs.values() for p in d["partitions"] if p.startswith(topic)}
        per = {path: sum(1 for p in d["partitions"] if p.startswith(topic))
               for path, d in dirs.items()}  # fmt: skip
        return len(mine) == 6 and sorted(per.values()) == [3, 3]

    wait_until(spread, what="six partitions, three in each log directory")
    assert set(_log_dirs(jbod, 2)) == {str(a.resolve()), str(b.resolve())}


def _reassign(c: Cluster, tmp: Path, *args: str) -> str:
    return keeperless("reassign-partitions", "--bootstrap-server", c.bootstrap, *args,
                      check=True).stdout  # fmt: skip


def test_a_replica_moves_between_directories_under_load(jbod: Cluster, tmp_path: Path) -> None:
    topic = _create(jbod, 1, [2, 3, 4])
    tp = f"{topic}-0"
    load = _Load(jbod, topic)
    try:
        wait_until(lambda: len(load.acked) > 2000, what="records acknowledged")
        start = _where(jbod, 2, tp)
        assert start is not None
        target = next(str(d.resolve()) for d in _dirs(jbod, 2) if str(d.resolve()) != start)
        plan = tmp_path / "move.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [2, 3, 4],
             "log_dirs": [target, "any", "any"]}]}))  # fmt: skip
        out = _reassign(jbod, tmp_path, "--execute", "--reassignment-json-file", str(plan))
        assert f"Successfully started moving log directory to {target} for replica {tp} " \
               "with broker 2" in out  # fmt: skip
        wait_until(lambda: "completed successfully" in _reassign(
            jbod, tmp_path, "--verify", "--reassignment-json-file", str(plan)),
            timeout=60, what="the move to finish")  # fmt: skip
        assert _where(jbod, 2, tp) == target
        wait_until(lambda: not (Path(start) / tp).exists(), what="the old copy deleted")
        # and back with kafka-python's admin client, still under load
        from kafka.admin import KafkaAdminClient
        from kafka.structs import TopicPartitionReplica

        admin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap, request_timeout_ms=30_000)
        try:
            admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 2): start})
        finally:
            admin.close()
        wait_until(lambda: _where(jbod, 2, tp) == start, timeout=60, what="the move back")
        n = len(load.acked)
        wait_until(lambda: len(load.acked) > n + 500, what="writes after the moves")
    finally:
        load.finish()
    assert not load.errors[:5]
    got = _read_all(jbod, topic)
    assert set(load.acked) <= got, f"{len(set(load.acked) - got)} acknowledged records lost"


def test_a_move_cut_short_by_a_crash_resumes_from_its_copy(jbod: Cluster, tmp_path: Path) -> None:
    """As Kafka loads future logs at start: a broker killed in the middle of a throttled
    move between its directories resumes the move from what it had copied."""
    from confluent_kafka import Producer

    topic = _create(jbod, 1, [3, 2, 4])
    tp = f"{topic}-0"
    p = Producer({"bootstrap.servers": jbod.bootstrap, "acks": "all", "linger.ms": 20})
    sent = [f"{i:06d}".encode() * 80 for i in range(8000)]  # about 4 MB
    for value in sent:
        p.produce(topic, value, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    start = _where(jbod, 3, tp)
    assert start is not None
    target = next(d for d in _dirs(jbod, 3) if str(d.resolve()) != start)
    plan = tmp_path / "move.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [3, 2, 4],
         "log_dirs": [str(target.resolve()), "any", "any"]}]}))  # fmt: skip
    _reassign(jbod, tmp_path, "--execute", "--reassignment-json-file", str(plan),
              "--replica-alter-log-dirs-throttle", "400000")  # fmt: skip

    def copied() -> int:
        futures = list(target.glob(f"{tp}.*-future"))
        return sum(f.stat().st_size for d in futures for f in d.glob("*.log"))

    wait_until(lambda: copied() > 800_000, timeout=30, what="part of the replica copied")
    broker = jbod.brokers[3]
    broker.kill9()
    broker.start()
    resumed = re.compile(rf"Resuming the move of {re.escape(tp)} to \S+ from offset (\d+)")
    wait_until(lambda: resumed.search(broker.logs()) is not None, what="the move resumed")
    m = resumed.search(broker.logs())
    assert m is not None
    assert int(m[1]) > 0, "the copy started over"
    wait_until(lambda: "completed successfully" in _reassign(
        jbod, tmp_path, "--verify", "--reassignment-json-file", str(plan)),
        timeout=90, what="the resumed move to finish")  # fmt: skip
    assert _where(jbod, 3, tp) == str(target.resolve())
    assert not list(target.glob("*-future"))
    wait_until(lambda: not (Path(start) / tp).exists(), what="the old copy deleted")
    # every record is on the moved replica: it leads and is read back whole
    keeperless("leader-election", "--bootstrap-server", jbod.bootstrap, "--election-type",
               "PREFERRED", "--topic", topic, "--partition", "0")  # fmt: skip
    wait_until(lambda: _replicas(jbod, topic)[2] == 3, what="the moved replica leading")
    assert _read_all(jbod, topic) >= {v.decode() for v in sent}


def _offline_count(c: Cluster, broker: int) -> float:
    for line in c.brokers[broker].scrape().splitlines():
        if line.startswith("kafka_log_logmanager_offlinelogdirectorycount"):
            return float(line.split()[-1])
    raise AssertionError("no OfflineLogDirectoryCount metric")


def test_a_failed_directory_takes_only_its_replicas_offline(jbod: Cluster, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    a, b = _dirs(jbod, 2)
    topic = _create(jbod, 1, [2, 3, 4])
    other = _create(jbod, 1, [2, 3, 4])
    tp, other_tp = f"{topic}-0", f"{other}-0"
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartitionReplica

    admin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap, request_timeout_ms=30_000)
    try:
        admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 2): str(b),
                                      TopicPartitionReplica(other, 0, 2): str(a)})  # fmt: skip
    finally:
        admin.close()
    wait_until(lambda: _where(jbod, 2, tp) == str(b.resolve())
               and _where(jbod, 2, other_tp) == str(a.resolve()), what="the placement")  # fmt: skip
    assert _replicas(jbod, topic)[2] == 2
    assert _replicas(jbod, other)[2] == 2
    assert _offline_count(jbod, 2) == 0
    load = _Load(jbod, topic)
    try:
        wait_until(lambda: len(load.acked) > 2000, what="records acknowledged")
        # the disk fails: the directory is gone and a file stands where it was (writes
        # in it fail from now on), as Kafka's own tests fail a log directory
        os.rename(b, b.with_name("b.failed"))
        b.write_text("a failed disk\n")
        wait_until(lambda: _offline_count(jbod, 2) == 1, what="the directory offline")
        wait_until(lambda: _replicas(jbod, topic)[2] in (3, 4), what="its leadership moved")
        assert 2 not in _replicas(jbod, topic)[1]
        # the other directory is served on: broker 2 still leads and takes writes there
        assert _replicas(jbod, other)[2] == 2
        p = Producer({"bootstrap.servers": jbod.bootstrap, "acks": "all"})
        p.produce(other, b"still-here", partition=0)
        assert p.flush(20) == 0
        dirs = _log_dirs(jbod, 2)
        assert dirs[str(b)]["error"] == "org.apache.kafka.common.errors.KafkaStorageException"
        assert dirs[str(a.resolve())]["error"] is None
        assert "is offline after an I/O error" in jbod.brokers[2].logs()
        n = len(load.acked)
        wait_until(lambda: len(load.acked) > n + 500, what="writes after the failure")
    finally:
        load.finish()
    assert not load.errors[:5]
    got = _read_all(jbod, topic)
    assert set(load.acked) <= got, f"{len(set(load.acked) - got)} acknowledged records lost"
    # restarted with the disk still dead: the broker starts with that directory offline
    broker = jbod.brokers[2]
    broker.stop()
    broker.start()
    wait_until(lambda: _offline_count(jbod, 2) == 1, what="offline again after the restart")
    wait_until(lambda: 2 in _replicas(jbod, other)[1], timeout=60, what="a's replica back")
    assert 2 not in _replicas(jbod, topic)[1]
    assert "cannot be read" in broker.logs()
    # the disk replaced: a new, empty one, formatted; its replica is fetched again
    broker.stop()
    b.unlink()
    b.mkdir()
    cid = re.search(r"cluster\.id=(\S+)", (a / "meta.properties").read_text())
    assert cid is not None
    keeperless("storage", "format", "--ignore-formatted", "-t", cid[1], "-c",
               str(broker.config), check=True)  # fmt: skip
    broker.start()
    wait_until(lambda: 2 in _replicas(jbod, topic)[1], timeout=60, what="back in the ISR")
    assert _offline_count(jbod, 2) == 0
    assert _where(jbod, 2, tp) is not None


def test_a_log_directory_the_broker_does_not_have_is_refused(jbod: Cluster, tmp_path: Path) -> None:
    topic = _create(jbod, 1, [2, 3, 4])
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [4, 3, 2],
         "log_dirs": ["/no/such/dir", "any", "any"]}]}))  # fmt: skip
    res = keeperless("reassign-partitions", "--bootstrap-server", jbod.bootstrap, "--execute",
                     "--reassignment-json-file", str(plan))  # fmt: skip
    assert res.returncode != 0
    assert f"Failed to alter dir for {topic}-0-4: LOG_DIR_NOT_FOUND (/no/such/dir)" in (
        res.stdout + res.stderr
    )
    # found by a new user: the replica order had been changed before the refusal (what
    # the controller has committed, read from it directly)
    assert _committed_replicas(jbod, topic) == [2, 3, 4], "half-applied"
    # a file of another version is refused, as Kafka's tool does
    plan.write_text(json.dumps({"version": 2, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [4, 3, 2]}]}))  # fmt: skip
    res = keeperless("reassign-partitions", "--bootstrap-server", jbod.bootstrap, "--execute",
                     "--reassignment-json-file", str(plan))  # fmt: skip
    assert "Not supported version field value 2" in res.stdout + res.stderr
    assert _committed_replicas(jbod, topic) == [2, 3, 4]

    short = {"topic": topic, "partition": 0, "replicas": [2, 3, 4], "log_dirs": ["any"]}
    plan.write_text(json.dumps({"version": 1, "partitions": [short]}))
    res = keeperless("reassign-partitions", "--bootstrap-server", jbod.bootstrap, "--execute",
                     "--reassignment-json-file", str(plan))  # fmt: skip
    assert "is different from size of log dirs list" in res.stdout + res.stderr


def _committed_replicas(c: Cluster, topic: str) -> list[int]:
    """Partition 0's replicas in the active controller's committed metadata."""
    controllers = ",".join(f"127.0.0.1:{n.port}" for n in c.controllers.values())
    out = keeperless("metadata-shell", "--bootstrap-controller", controllers, "--", "cat",
                     f"/topics/{topic}/0/data", check=True).stdout  # fmt: skip
    return list(json.loads(out)["replicas"])
