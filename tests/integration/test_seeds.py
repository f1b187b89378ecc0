"""The seeds' commands (../shared/seed-commands.md), typed as the documents keeperless was
designed from type them: Kafka's script names from a `bin/` directory, Kafka's flags, a
shell glob. Only host names, ports and paths differ (ports are chosen at run time)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ROOT, api_versions_ok, free_port, wait_until


class KafkaHome:
    """A directory laid out as a Kafka installation: bin/ (keeperless's), config/kraft/
    and the data directory, with the node listening on free ports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "bin").symlink_to(ROOT / "bin")
        kraft = root / "config" / "kraft"
        kraft.mkdir(parents=True)
        self.port, self.cport = free_port(), free_port()
        text = (ROOT / "config" / "server.properties").read_text()
        text = text.replace(":9092", f":{self.port}").replace(":9093", f":{self.cport}")
        # the shipped, absolute /tmp/keeperless-combined-logs, moved into this home
        assert re.search(r"^log\.dirs=/tmp/keeperless-combined-logs$", text, flags=re.M)
        text = re.sub(r"^log\.dirs=.*$", f"log.dirs={root / 'data'}", text, flags=re.M)
        (kraft / "server.properties").write_text(text)
        ctl = (ROOT / "config" / "controller.properties").read_text()
        ctl = re.sub(r"^log\.dirs=.*$", "log.dirs=./controller-data", ctl, flags=re.M)
        (kraft / "controller.properties").write_text(ctl)
        self.proc: subprocess.Popen[bytes] | None = None

    def sh(self, command: str, check: bool = True, stdin: str | None = None) -> str:
        res = subprocess.run(
            ["bash", "-c", command],
            cwd=self.root,
            # kafka-server-stop.sh stops every node on the machine, as Kafka's does: only
            # this test's here (not a developer's `make run`, nor a fault-harness batch)
            env={**os.environ, "KEEPERLESS_STOP_ONLY_UNDER": str(self.root)},
            capture_output=True,
            text=True,
            timeout=60,
            input=stdin,
        )
        if check:
            assert res.returncode == 0, f"{command}\n{res.stdout}\n{res.stderr}"
        return res.stdout + (res.stderr if not check else "")

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaHome]:
    h = KafkaHome(tmp_path_factory.mktemp("kafka-home"))
    try:
        yield h
    finally:
        if h.proc is not None and h.proc.poll() is None:
            h.proc.terminate()
            h.proc.wait(30)


def test_the_seeds_commands_as_written(home: KafkaHome) -> None:
    cid = home.sh("bin/kafka-storage.sh random-uuid").strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid)
    home.sh(f"bin/kafka-storage.sh format -t {cid} -c config/kraft/server.properties")
    home.sh(f"kafka-storage.sh format -c ./config/kraft/controller.properties --cluster-id {cid}"
            .replace("kafka-storage.sh", "bin/kafka-storage.sh"))  # fmt: skip
    log = open(home.root / "server.log", "wb")  # noqa: SIM115 - owned by the process
    home.proc = subprocess.Popen(
        ["bash", "-c", "bin/kafka-server-start.sh config/kraft/server.properties"],
        cwd=home.root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_until(lambda: api_versions_ok(home.port), 30, what="the server")
    h = home.host
    t = "dbserver1.inventory.customers"
    home.sh(f"bin/kafka-topics.sh --bootstrap-server {h} --create --topic {t}")
    listed = home.sh(f"bin/kafka-topics.sh --bootstrap-server {h} --list").split()
    assert t in listed
    assert "__cluster_metadata" not in listed
    described = home.sh(f"bin/kafka-topics.sh --bootstrap-server {h} --describe --topic {t}")
    assert re.search(r"Topic: \S+\s+Partition: 0\s+Leader: 1\s+Replicas: 1\s+Isr: 1", described)

    # the metadata log, decoded
    registered = home.sh(
        "bin/kafka-dump-log.sh --cluster-metadata-decoder --skip-record-metadata "
        "--files data/__cluster_metadata-0/*.log | grep REGISTER_BROKER"
    )
    payload = json.loads(registered.strip().splitlines()[0].split("payload: ", 1)[1])
    assert payload["type"] == "REGISTER_BROKER_RECORD"
    assert payload["data"]["brokerId"] == 1
    dumped = home.sh(
        "bin/kafka-dump-log.sh --cluster-metadata-decoder "
        "--files data/__cluster_metadata-0/00000000000000000000.log"
    )
    assert dumped.startswith("Dumping data/__cluster_metadata-0/00000000000000000000.log")
    assert "Log starting offset: 0" in dumped
    assert re.search(r"baseOffset: 0 lastOffset: \d+ count: \d+", dumped)
    assert "LEADER_CHANGE" in dumped

    # the metadata shell over the log segment
    out = home.sh(
        "bin/kafka-metadata-shell.sh --snapshot data/__cluster_metadata-0/00000000000000000000.log",
        stdin=f"ls\nls brokers\ncd brokers/1 ; cat registration\ncat /topics/{t}/0/data\nexit\n",
    )
    for name in ("brokers", "configs", "local", "metadataQuorum", "topicIds", "topics"):
        assert name in out.split()
    assert '"brokerId": 1' in out
    assert '"partitionId": 0' in out
    assert '"leader": 1' in out

    # the cluster, the quorum, the features
    assert home.sh(f"bin/kafka-cluster.sh cluster-id --bootstrap-server {h}").strip() == (
        f"Cluster ID: {cid}"
    )
    unknown = home.sh(f"bin/kafka-cluster.sh unregister --bootstrap-server {h} --id 3", False)
    assert "NotController" not in unknown
    assert "not registered" in unknown.lower() or "BROKER_ID_NOT_REGISTERED" in unknown
    status = home.sh(f"bin/kafka-metadata-quorum.sh --bootstrap-server {h} describe --status")
    assert re.search(r"LeaderId:\s+1", status)
    replication = home.sh(
        f"bin/kafka-metadata-quorum.sh --bootstrap-server {h} describe --replication"
    )
    # Kafka 3.9+'s columns: NodeId DirectoryId LogEndOffset Lag ...
    assert replication.split()[:3] == ["NodeId", "DirectoryId", "LogEndOffset"]
    assert re.search(r"^1\s+[A-Za-z0-9_-]{22}\s+\d+\s+\d+", replication.splitlines()[1])
    features = home.sh(f"bin/kafka-features.sh --bootstrap-server {h} describe")
    assert "Feature: metadata.version" in features
    # formatted as written, the cluster is at metadata.version 4.2-IV0 (with
    # eligible leader replicas): 3.9 is below it, and Kafka 4.1 refuses to "upgrade" to it
    up = home.sh(f"bin/kafka-features.sh --bootstrap-server {h} upgrade --metadata 3.9", False)
    assert "Could not upgrade metadata.version to 21." in up
    assert "Can't downgrade the version of this feature without setting the upgrade type" in up
    # and a downgrade to 3.7 would cross 4.0-IV1, which changed the metadata format
    down = home.sh(f"bin/kafka-features.sh --bootstrap-server {h} downgrade --metadata 3.7", False)
    assert "Could not downgrade metadata.version to 19." in down
    assert "might delete metadata information" in down
    # and the node stops as Kafka's does
    home.sh("bin/kafka-server-stop.sh")
    assert home.proc is not None
    assert home.proc.wait(30) == 0
    assert "Stopped" in (home.root / "server.log").read_text()


def test_every_kafka_script_is_in_bin_and_installed() -> None:
    import tomllib

    from keeperless.cli.kafka import COMMANDS

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in COMMANDS:
        assert (ROOT / "bin" / name).exists(), name
        assert name in scripts, name
    wrong = subprocess.run(
        [str(ROOT / "bin" / "kafka-topics.sh"), "--zookeeper", "localhost:2181", "--list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 1
    assert "--zookeeper is not supported" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
