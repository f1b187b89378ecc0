"""Operator tools against a real 3-controller, 2-broker cluster (issue 6, first part)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, keeperless, wait_until


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-controller, 2-broker cluster for the module (the shell test, last, stops a
    broker)."""
    c = Cluster(tmp_path_factory.mktemp("tools"))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _ok(*args: str) -> str:
    res = keeperless(*args)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_topics_tool(cluster3: Cluster) -> None:
    bs = ["--bootstrap-server", cluster3.bootstrap]
    out = _ok(
        "topics",
        *bs,
        "--create",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=60000",
    )
    assert out.strip() == "Created topic orders."
    assert "orders" in _ok("topics", *bs, "--list").split()
    desc = _ok("topics", *bs, "--describe", "--topic", "orders").splitlines()
    assert desc[0].startswith("Topic: orders\tTopicId: ")
    # with ELR (on in new clusters) min.insync.replicas is a cluster-level config too
    assert ("PartitionCount: 3\tReplicationFactor: 1\t"
            "Configs: min.insync.replicas=1,retention.ms=60000") in desc[0]  # fmt: skip
    assert len(desc) == 4
    assert desc[1].startswith("\tTopic: orders\tPartition: 0\tLeader: ")
    _ok("topics", *bs, "--alter", "--topic", "orders", "--partitions", "5")
    wait_until(
        lambda: len(_ok("topics", *bs, "--describe", "--topic", "orders").splitlines()) == 6,
        10,
        what="5 partitions",
    )
    assert _ok("topics", *bs, "--describe", "--under-replicated-partitions") == ""
    dup = keeperless("topics", *bs, "--create", "--topic", "orders")
    assert dup.returncode != 0
    assert "already exists" in dup.stderr
    missing = keeperless("topics", *bs, "--describe", "--topic", "nope")
    assert missing.returncode != 0
    assert "does not exist" in missing.stderr
    _ok("topics", *bs, "--delete", "--topic", "orders")
    wait_until(
        lambda: "orders" not in _ok("topics", *bs, "--list").split(), 10, what="the topic to go"
    )


def test_metadata_quorum_and_cluster_id(cluster3: Cluster) -> None:
    leader = cluster3.leader()
    via_broker = _ok(
        "metadata-quorum", "--bootstrap-server", cluster3.bootstrap, "describe", "--status"
    )
    controllers = ",".join(f"127.0.0.1:{n.port}" for n in cluster3.controllers.values())
    via_ctl = _ok("metadata-quorum", "--bootstrap-controller", controllers, "describe", "--status")
    for out in (via_broker, via_ctl):
        lines = dict(line.split(":", 1) for line in out.splitlines())
        assert lines["LeaderId"].strip() == str(leader)
        # Kafka 3.9+'s form: [{"id": 1, "directoryId": ..., "endpoints": [...]}, ...]
        voters = json.loads(lines["CurrentVoters"])
        assert [v["id"] for v in voters] == [1, 2, 3]
        assert voters[0]["endpoints"] == [f"CONTROLLER://127.0.0.1:{cluster3.controllers[1].port}"]
        assert [o["id"] for o in json.loads(lines["CurrentObservers"])] == [4, 5]
        assert int(lines["HighWatermark"]) > 0
    rep = _ok(
        "metadata-quorum", "--bootstrap-controller", controllers, "describe", "--replication"
    ).splitlines()
    assert rep[0].split() == [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    statuses = {int(r.split()[0]): r.split()[-1] for r in rep[1:]}
    assert statuses[leader] == "Leader"
    assert sorted(k for k, v in statuses.items() if v == "Observer") == [4, 5]
    cid = _ok("cluster", "cluster-id", "--bootstrap-server", cluster3.bootstrap).strip()
    assert cid.startswith("Cluster ID: ")
    meta = (cluster3.brokers[4].data / "meta.properties").read_text()
    assert f"cluster.id={cid.split(': ')[1]}" in meta
    down = keeperless(
        "metadata-quorum", "--bootstrap-controller", "127.0.0.1:1", "describe", "--status"
    )
    assert down.returncode != 0
    assert "could not reach 127.0.0.1:1" in down.stderr


def test_dump_log(cluster3: Cluster, tmp_path: Path) -> None:
    leader = cluster3.leader()
    _ok("topics", "--bootstrap-server", cluster3.bootstrap, "--create", "--topic", "dumped")
    seg = sorted((cluster3.controllers[leader].data / "__cluster_metadata-0").glob("*.log"))[0]
    out = _ok("dump-log", "--files", str(seg), "--cluster-metadata-decoder")
    assert '"type":"REGISTER_BROKER_RECORD"' in out
    assert '"type":"TOPIC_RECORD","version":0,"data":{"name":"dumped"' in out
    assert "LEADER_CHANGE:" in out
    assert out.splitlines()[0] == f"Dumping {seg}"
    corrupt = tmp_path / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[100] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    bad = keeperless("dump-log", "--files", str(corrupt))
    assert bad.returncode != 0
    # A batch failing its CRC is shown with isvalid: false and the dump goes on.
    assert "isvalid: false" in bad.stdout
    assert "Found 1 batch(es) failing their CRC" in bad.stdout
    clean = tmp_path / "clean" / "00000000000000000000.log"
    clean.parent.mkdir()
    data[100] ^= 0xFF
    clean.write_bytes(bytes(data))
    assert bad.stdout.count("baseOffset:") == _ok("dump-log", "--files", str(clean)).count(
        "baseOffset:"
    )
    assert "Traceback" not in bad.stdout + bad.stderr
    # A file that ends inside a batch ends the dump, naming where.
    torn = tmp_path / "torn" / "00000000000000000000.log"
    torn.parent.mkdir()
    torn.write_bytes(bytes(data)[:-7])
    cut = keeperless("dump-log", "--files", str(torn))
    assert cut.returncode != 0
    assert "Found a corrupt or truncated batch" in cut.stdout
    assert "at position" in cut.stdout
    assert "Traceback" not in cut.stdout + cut.stderr


def test_console_tools_and_consumer_groups(cluster3: Cluster) -> None:
    import subprocess
    import sys

    from tests.integration.cluster import ROOT

    bs = ["--bootstrap-server", cluster3.bootstrap]

    def tool(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "keeperless", *args],
            input=stdin,
            text=True,
            capture_output=True,
            cwd=ROOT,
            timeout=60,
        )

    _ok("topics", *bs, "--create", "--topic", "console", "--partitions", "1")
    res = tool(
        "console-producer",
        *bs,
        "--topic",
        "console",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--property",
        "parse.headers=true",
        stdin="h:1\tk1:one\n\tk2:two\n",
    )
    assert res.returncode == 0, res.stderr
    res = tool(
        "console-consumer",
        *bs,
        "--topic",
        "console",
        "--from-beginning",
        "--group",
        "cg",
        "--max-messages",
        "2",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
        "--property",
        "key.separator=|",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["h:1|k1|one", "NO_HEADERS|k2|two"]
    assert "Processed a total of 2 messages" in res.stderr
    assert "cg" in _ok("consumer-groups", *bs, "--list").split()
    desc = _ok("consumer-groups", *bs, "--describe", "--group", "cg").splitlines()
    assert desc[1].split()[:6] == ["cg", "console", "0", "2", "2", "0"]
    _ok(
        "consumer-groups",
        *bs,
        "--reset-offsets",
        "--group",
        "cg",
        "--topic",
        "console",
        "--to-earliest",
        "--execute",
    )
    desc = _ok("consumer-groups", *bs, "--describe", "--group", "cg").splitlines()
    assert desc[1].split()[3:6] == ["0", "2", "2"]
    _ok("consumer-groups", *bs, "--delete", "--group", "cg")
    assert "cg" not in _ok("consumer-groups", *bs, "--list").split()
    bad = tool("console-consumer", "--bootstrap-server", cluster3.bootstrap)
    assert bad.returncode != 0
    assert "--topic" in bad.stderr


def test_configs_tool(cluster3: Cluster) -> None:
    bs = ["--bootstrap-server", cluster3.bootstrap]
    _ok("topics", *bs, "--create", "--topic", "cfg")
    topic = ["--entity-type", "topics", "--entity-name", "cfg"]
    out = _ok(
        "configs",
        *bs,
        *topic,
        "--alter",
        "--add-config",
        "retention.ms=5000,cleanup.policy=compact",
    )
    assert out.strip() == "Completed updating config for topic cfg."
    desc = _ok("configs", *bs, *topic, "--describe").splitlines()
    assert desc[0] == "Dynamic configs for topic cfg are:"
    assert (
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000}"
        in desc
    )
    _ok("configs", *bs, *topic, "--alter", "--delete-config", "cleanup.policy")
    assert "cleanup.policy" not in _ok("configs", *bs, *topic, "--describe")
    _ok(
        "configs",
        *bs,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "log.retention.ms=86400000",
    )
    b4 = _ok("configs", *bs, "--entity-type", "brokers", "--entity-name", "4", "--describe")
    assert "log.retention.ms=86400000" in b4
    assert "DYNAMIC_DEFAULT_BROKER_CONFIG" in b4
    bad = keeperless("configs", *bs, *topic, "--alter", "--add-config", "nope=1")
    assert bad.returncode != 0
    assert "Unknown topic config name: nope" in bad.stderr
    static = keeperless(
        "configs",
        *bs,
        "--entity-type",
        "brokers",
        "--entity-name",
        "4",
        "--alter",
        "--add-config",
        "node.id=9",
    )
    assert static.returncode != 0
    assert "Cannot update these configs dynamically" in static.stderr
    # a broker's own configs through any bootstrap broker: the tool asks that broker, as
    # Kafka's admin client does
    via4 = ["--bootstrap-server", cluster3.brokers[4].bootstrap]
    five = ["--entity-type", "brokers", "--entity-name", "5"]
    _ok("configs", *via4, *five, "--alter", "--add-config", "log.cleaner.threads=2")
    b5 = _ok("configs", *via4, *five, "--describe")
    assert "log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" in b5
    assert "log.cleaner.threads" not in _ok(
        "configs", *via4, "--entity-type", "brokers", "--entity-name", "4", "--describe"
    )
    gone = keeperless("configs", *via4, "--entity-type", "brokers", "--entity-name", "9",
                      "--describe")  # fmt: skip
    assert gone.returncode != 0
    assert "Broker 9 is not a registered broker of this cluster (brokers: 4, 5)" in gone.stderr
    # a broker's log levels at run time (BROKER_LOGGER), asked of that broker
    loggers = ["--entity-type", "broker-loggers", "--entity-name", "5"]
    _ok("configs", *via4, *loggers, "--alter", "--add-config", "keeperless.broker=DEBUG")
    levels = _ok("configs", *via4, *loggers, "--describe")
    assert levels.splitlines()[0] == "Dynamic configs for broker-logger 5 are:"
    assert "  keeperless.broker=DEBUG sensitive=false" in levels
    assert "keeperless.broker=DEBUG" not in _ok(
        "configs", *via4, "--entity-type", "broker-loggers", "--entity-name", "4", "--describe"
    )
    _ok("configs", *via4, *loggers, "--alter", "--delete-config", "keeperless.broker")
    assert "keeperless.broker=DEBUG" not in _ok("configs", *via4, *loggers, "--describe")
    loud = keeperless("configs", *via4, *loggers, "--alter", "--add-config",
                      "keeperless.broker=LOUD")  # fmt: skip
    assert loud.returncode != 0
    assert "not a supported log level" in loud.stderr


def test_features_and_log_dirs(cluster3: Cluster) -> None:
    bs = ["--bootstrap-server", cluster3.bootstrap]
    feats = _ok("features", "describe", *bs)
    lines = feats.splitlines()
    # sorted by name, as Kafka's tool; a cluster formatted at the default metadata.version
    # (4.2-IV0) has eligible leader replicas (KIP-966), the consumer group protocol
    # (KIP-848) and share groups (KIP-932) on
    assert [ln.split("\t")[0] for ln in lines] == [
        f"Feature: {f}"
        for f in ("eligible.leader.replicas.version", "group.version", "kraft.version",
                  "metadata.version", "share.version", "streams.version", "transaction.version")
    ]  # fmt: skip
    by_name = {ln.split("\t")[0].split(": ")[1]: ln for ln in lines}
    assert by_name["eligible.leader.replicas.version"].startswith(
        "Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0"
        "\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1\t"
    )
    assert "\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1\t" in by_name["group.version"]
    # KIP-853's kraft.version: 0 for a static quorum (Kafka prints 0 when not finalized)
    assert by_name["kraft.version"].startswith(
        "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
        "FinalizedVersionLevel: 0\t"
    )
    assert by_name["metadata.version"].startswith(
        "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.2-IV1\t"
    )
    assert "FinalizedVersionLevel: 4.2-IV0" in by_name["metadata.version"]
    # share groups (KIP-932): on in a new cluster, as in Kafka 4.2
    assert "\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1\t" in by_name["share.version"]
    _ok("topics", *bs, "--create", "--topic", "sized", "--partitions", "2")
    res = keeperless("console-producer", *bs, "--topic", "sized")
    assert res.returncode == 0  # no input: nothing produced, still a clean exit
    out = _ok("log-dirs", *bs, "--describe", "--topic-list", "sized").splitlines()
    assert out[0] == "Querying brokers for log directories information"
    assert out[1] == "Received log directory information from brokers 4,5"
    import json

    data = json.loads(out[2])
    parts = sorted(
        p["partition"] for b in data["brokers"] for d in b["logDirs"] for p in d["partitions"]
    )
    assert parts == ["sized-0", "sized-1"]
    bad = keeperless("log-dirs", *bs, "--describe", "--broker-list", "42")
    assert bad.returncode != 0
    assert "42" in bad.stderr


@pytest.fixture
def cluster39(tmp_path: Path) -> Iterator[Cluster]:
    """3 controllers + 2 brokers formatted at 3.9 (before eligible leader replicas)."""
    c = Cluster(tmp_path, release="3.9")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_features_upgrade_and_downgrade(cluster39: Cluster) -> None:
    cluster3 = cluster39
    bs = ["--bootstrap-server", cluster3.bootstrap]
    controllers = ",".join(f"127.0.0.1:{n.port}" for n in cluster3.controllers.values())
    bc = ["--bootstrap-controller", controllers]

    def finalized(*flags: str) -> str:
        out = _ok("features", "describe", *flags)
        line = next(x for x in out.splitlines() if x.startswith("Feature: metadata.version\t"))
        return line.split("FinalizedVersionLevel: ")[1].split("\t")[0]

    assert finalized(*bc) == "3.9-IV0"
    # 3.9 -> 3.7-IV2: no level in between changed the metadata format
    assert _ok("features", "downgrade", *bs, "--metadata", "3.7-IV2") == (
        "metadata.version was downgraded to 17.\n"
    )
    assert finalized(*bs) == "3.7-IV2"  # what the broker's image says
    wait_until(lambda: finalized(*bc) == "3.7-IV2", what="controllers see 3.7-IV2")
    refused = keeperless("features", "downgrade", *bs, "--metadata", "3.7-IV1")
    assert refused.returncode == 1
    assert refused.stdout == (
        "Could not downgrade metadata.version to 16. Unsupported metadata.version downgrade "
        "from 17 to 16. Refusing to perform the requested downgrade because it might delete "
        "metadata information.\n"
    )
    assert "1 out of 1 operation(s) failed." in refused.stderr
    unsafe = keeperless("features", "downgrade", *bs, "--unsafe", "--release-version", "3.7-IV1")
    assert unsafe.returncode == 1
    assert "Unsafe metadata downgrade is not supported in this version." in unsafe.stdout
    too_new = keeperless("features", "upgrade", *bc, "--feature", "metadata.version=30")
    assert too_new.returncode == 1
    assert "Invalid update version 30 for feature metadata.version." in too_new.stdout
    assert "only supports versions 7-29" in too_new.stdout
    elr = keeperless("features", "upgrade", *bs, "--feature", "eligible.leader.replicas.version=1")
    assert elr.returncode == 1
    assert "depends on metadata.version level 23 (4.0-IV1)" in elr.stdout
    bad = keeperless("features", "upgrade", *bs, "--metadata", "9.9")
    assert bad.returncode == 1
    assert "Unknown release version '9.9'" in bad.stderr
    assert _ok("features", "upgrade", *bs, "--metadata", "3.9", "--dry-run") == (
        "metadata.version can be upgraded to 21.\n"
    )
    assert finalized(*bs) == "3.7-IV2"
    # all or nothing, as Kafka's: one refused feature refuses the request, and the tool
    # says so for each (a dynamic quorum needs 3.9-IV0, not the 3.8 this request sets)
    partial = keeperless("features", "upgrade", *bc, "--metadata", "3.8-IV0",
                         "--feature", "kraft.version=1",
                         "--feature", "group.version=1")  # fmt: skip
    assert partial.returncode == 1
    lines = partial.stdout.splitlines()
    assert [ln.split(".")[0] for ln in lines] == [
        "Could not upgrade group",
        "Could not upgrade kraft",
        "Could not upgrade metadata",
    ], partial.stdout
    assert all("depends on metadata.version level 21 (3.9-IV0), and metadata.version would "
               "be 20 (3.8-IV0)" in ln for ln in lines), partial.stdout  # fmt: skip
    assert finalized(*bs) == "3.7-IV2"
    desc = _ok("features", "describe", *bc)
    assert re.search(r"Feature: group.version\t.*FinalizedVersionLevel: 0\t", desc), desc
    # back up, through the controllers directly
    assert _ok("features", "upgrade", *bc, "--release-version", "3.9") == (
        "metadata.version was upgraded to 21.\n"
    )
    wait_until(lambda: finalized(*bs) == "3.9-IV0", what="brokers see 3.9-IV0")
    # a release brings every feature's default for it (KIP-1022): 4.1 turns ELR, the
    # consumer group protocol and transaction version 2 on
    both = keeperless("features", "upgrade", *bs, "--release-version", "4.1", "--feature", "x=1")
    assert both.returncode == 1
    assert "Can not specify `release-version` with other feature flags." in both.stderr
    assert _ok("features", "upgrade", *bs, "--release-version", "4.1") == (
        "eligible.leader.replicas.version was upgraded to 1.\n"
        "group.version was upgraded to 1.\n"
        "metadata.version was upgraded to 27.\n"
        "transaction.version was upgraded to 2.\n"
    )
    wait_until(lambda: finalized(*bs) == "4.1-IV1", what="brokers see 4.1-IV1")


def _layout(bs: list[str], topic: str) -> dict[int, tuple[int, str, str]]:
    """partition -> (leader, replicas, isr) from `topics --describe` (-1 for none)."""
    out = {}
    for line in _ok("topics", *bs, "--describe", "--topic", topic).splitlines():
        if "Partition: " not in line:
            continue
        fields = dict(f.split(": ", 1) for f in line.strip("\t").split("\t") if ": " in f)
        leader = fields["Leader"]
        out[int(fields["Partition"])] = (
            -1 if leader == "none" else int(leader),
            fields["Replicas"],
            fields["Isr"],
        )
    return out


def test_leader_election_tool(cluster3: Cluster) -> None:
    bs = ["--bootstrap-server", cluster3.bootstrap]
    brokers = cluster3.brokers

    def layout() -> dict[int, tuple[int, str, str]]:
        return _layout(bs, "elect")

    def live(ids: str) -> bool:
        return f"from brokers {ids}" in _ok("log-dirs", *bs, "--describe")

    def elect(*args: str) -> subprocess.CompletedProcess[str]:
        return keeperless("leader-election", *bs, *args)

    _ok(
        "topics",
        *bs,
        "--create",
        "--topic",
        "elect",
        "--partitions",
        "2",
        "--replication-factor",
        "2",
    )
    wait_until(lambda: all(len(isr.split(",")) == 2 for *_, isr in layout().values()))
    ok = elect("--election-type", "PREFERRED", "--topic", "elect")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "Valid replica already elected for partitions elect-0, elect-1\n"
    prefers_5 = next(p for p, (_, reps, _) in layout().items() if reps.startswith("5"))
    prefers_4 = 1 - prefers_5
    try:
        # broker 5 stops: broker 4 leads both partitions, alone in their ISR
        brokers[5].stop()
        wait_until(lambda: all(v[0] == 4 and v[2] == "4" for v in layout().values()))
        refused = elect(
            "--election-type", "PREFERRED", "--topic", "elect", "--partition", str(prefers_5)
        )
        assert refused.returncode == 1
        assert refused.stdout == (
            f"Error completing leader election (PREFERRED) for partition: elect-{prefers_5}: "
            f"Failed to elect the preferred leader 5 for elect-{prefers_5}: it is not in the "
            "ISR [4]\n"
        )
        assert "1 replica(s) could not be elected" in refused.stderr
        # broker 4 stops too: both partitions are offline; broker 5 comes back, outside
        # the ISR, so only an unclean election gives them a leader
        brokers[4].stop()
        brokers[5].start()
        bs5 = ["--bootstrap-server", brokers[5].bootstrap]
        wait_until(lambda: all(v[0] == -1 for v in _layout(bs5, "elect").values()))
        unclean = keeperless(
            "leader-election", *bs5, "--election-type", "unclean", "--topic", "elect"
        )
        assert unclean.returncode == 0, unclean.stderr
        assert unclean.stdout == (
            "Successfully completed leader election (UNCLEAN) for partitions elect-0, elect-1\n"
        )
        assert all(v[0] == 5 for v in _layout(bs5, "elect").values())
        # broker 4 returns, catches up from 5 and rejoins; a preferred election gives its
        # partition back to it
        brokers[4].start()
        wait_until(lambda: all(len(v[2].split(",")) == 2 for v in layout().values()), timeout=40)
        back = elect("--election-type", "PREFERRED", "--all-topic-partitions")
        assert back.returncode == 0, back.stderr
        assert f"elect-{prefers_4}" in back.stdout.split("\n")[0]
        assert back.stdout.startswith("Successfully completed leader election (PREFERRED)")
        assert layout()[prefers_4][0] == 4
        missing = elect("--election-type", "PREFERRED", "--topic", "nope")
        assert missing.returncode == 1
        assert "Topic 'nope' does not exist" in missing.stderr
        usage = elect("--election-type", "PREFERRED")
        assert usage.returncode == 1
        assert "exactly one of --topic, --all-topic-partitions or --path-to-json-file" in (
            usage.stderr
        )
    finally:
        for b in (4, 5):
            if brokers[b].proc is None or brokers[b].proc.poll() is not None:
                brokers[b].start()
        wait_until(lambda: live("4,5"), what="brokers 4 and 5 registered and unfenced")


def test_metadata_shell_tree(cluster3_authorized: Cluster) -> None:
    cluster3 = cluster3_authorized
    _ok(
        "topics",
        "--bootstrap-server",
        cluster3.bootstrap,
        "--create",
        "--topic",
        "shell",
        "--partitions",
        "2",
        "--config",
        "retention.ms=1234",
    )
    cluster3.brokers[5].stop()  # cleanly: the controller fences it
    controllers = ",".join(f"127.0.0.1:{n.port}" for n in cluster3.controllers.values())
    leader = cluster3.leader()

    def shell(*cmd: str, source: tuple[str, str] = ("--bootstrap-controller", controllers)) -> str:
        return _ok("metadata-shell", *source, "--", *cmd)

    wait_until(
        lambda: shell("cat", "/brokers/5/isFenced").strip() == "true",
        20,
        what="broker 5 fenced in the image",
    )
    assert shell("ls", "/brokers").split() == ["4", "5"]
    assert shell("cat", "/brokers/4/isFenced").strip() == "false"
    assert "shell" in shell("ls", "/topics").split()
    part = shell("cat", "/topics/shell/1/data")
    assert '"partitionId": 1' in part
    assert shell("cat", "/configs/topic/shell/retention.ms").strip() == "1234"
    _ok(
        "configs",
        "--bootstrap-server",
        cluster3.bootstrap,
        "--entity-type",
        "topics",
        "--entity-name",
        "shell",
        "--alter",
        "--add-config",
        "retention.ms=4321",
    )
    assert shell("cat", "/configs/topic/shell/retention.ms").strip() == "4321"
    assert shell("cat", "/features/metadata.version").strip() == "28"  # 4.2-IV0
    # an ACL created through a broker shows under /acls/byId as Kafka's shell shows it
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(
        ResourceType.TOPIC,
        "shell",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    admin = AdminClient({"bootstrap.servers": cluster3.brokers[4].bootstrap})
    admin.create_acls([binding])[binding].result(timeout=20)
    [acl_path] = [p for p in shell("find", "/acls").split() if p.count("/") == 3]
    acl = json.loads(shell("cat", acl_path))
    assert (acl["resourceName"], acl["principal"], acl["operation"]) == ("shell", "User:alice", 3)
    # a client quota shows under /clientQuotas/<type>/<name>/<key>
    from keeperless.tools.client import call

    quota = {
        "entity": [{"entity_type": "user", "entity_name": "alice"}],
        "ops": [{"key": "consumer_byte_rate", "value": 4096.0, "remove": False}],
    }
    resp = call(
        [("127.0.0.1", cluster3.brokers[4].port)],
        49,
        1,
        {"entries": [quota], "validate_only": False},
    )
    assert int(resp.entries[0].error_code) == 0
    assert shell("cat", "/clientQuotas/user/alice/consumer_byte_rate").strip() == "4096.0"
    assert shell("cat", "/metadataQuorum/leader").startswith(f"LeaderAndEpoch(leaderId={leader}")
    tid = shell("cat", "/topics/shell/id").strip()
    assert shell("cat", f"/topicIds/{tid}/name").strip() == "shell"
    assert "/topics/shell/0/data" in shell("find", "/topics")
    # from a controller's log directory: the same tree, but no quorum-backed leader
    ctl_dir = ("--directory", str(cluster3.controllers[leader].data))
    assert "shell" in shell("ls", "/topics", source=ctl_dir).split()
    assert "not from a live quorum" in shell("cat", "/metadataQuorum/leader", source=ctl_dir)
    # from the bootstrap snapshot
    boot = ("--snapshot", str(cluster3.controllers[leader].data / "bootstrap.checkpoint"))
    assert shell("ls", "/features", source=boot).split() == [
        "eligible.leader.replicas.version",
        "group.version",
        "metadata.version",
        "share.version",
        "transaction.version",
    ]
    # interactive: commands from standard input
    import subprocess
    import sys

    from tests.integration.cluster import ROOT

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "keeperless",
            "metadata-shell",
            "--bootstrap-controller",
            controllers,
        ],
        input="cd /topics/shell\npwd\nls\nhistory\nexit\n",
        text=True,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    assert "/topics/shell" in res.stdout
    assert "cd /topics/shell" in res.stdout  # history
    assert "id" in res.stdout.split()
    # a stopped broker can be unregistered through any broker, forwarded to the controller
    live = keeperless(
        "cluster", "unregister", "--bootstrap-server", cluster3.brokers[4].bootstrap, "--id", "4"
    )
    assert live.returncode != 0
    assert "still active" in live.stderr
    _ok("cluster", "unregister", "--bootstrap-server", cluster3.brokers[4].bootstrap, "--id", "5")
    assert shell("ls", "/brokers").split() == ["4"]
