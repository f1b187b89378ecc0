"""What the operator tools say when something is wrong: an unreachable cluster, a wrong
security protocol, a flag Kafka refuses; one line and exit 1, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ROOT, Cluster, Node, free_port
from tests.integration.conftest import running


@pytest.fixture(scope="module")
def node1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("tool-errors"))
    # 4.0: before ELR's cluster-level min.insync.replicas, which Kafka's tool counts as
    # an override on every topic (--topics-with-overrides would list them all)
    yield from running(n, release="4.0")


def tool(*args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keeperless", *args],
        input=stdin,
        text=True,
        capture_output=True,
        cwd=ROOT,
        timeout=timeout,
    )


def _one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("ERROR: "), res.stderr
    return lines[0]


def _clean(res: subprocess.CompletedProcess[str]) -> None:
    """Exit 0 and nothing on stderr."""
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr


def test_unreachable_bootstrap_fails_fast_with_one_line() -> None:
    dead = f"127.0.0.1:{free_port()}"
    bs = ["--bootstrap-server", dead]
    wanted = f"ERROR: could not reach {dead} (Connection refused)"
    for args, stdin in [
        (("topics", *bs, "--list"), ""),
        (("consumer-groups", *bs, "--list"), ""),
        (("console-consumer", *bs, "--topic", "orders", "--timeout-ms", "3000"), ""),
        (("console-producer", *bs, "--topic", "orders"), "x\n"),
    ]:
        started = time.monotonic()
        res = tool(*args, stdin=stdin)
        assert _one_error_line(res) == wanted, args
        assert time.monotonic() - started < 10, args
    line = _one_error_line(tool("topics", "--bootstrap-server", "nohost.invalid:9092", "--list"))
    assert line.startswith("ERROR: could not reach nohost.invalid:9092 ("), line


def test_tls_against_a_plaintext_listener_is_named(node1: Node, tmp_path: Path) -> None:
    props = tmp_path / "ssl.properties"
    props.write_text("security.protocol=SSL\n")
    started = time.monotonic()
    res = tool(
        "topics", "--bootstrap-server", node1.bootstrap, "--command-config", str(props), "--list"
    )
    line = _one_error_line(res)
    assert line.startswith(f"ERROR: could not reach {node1.bootstrap} ("), line
    assert "SSL" in line, line
    assert time.monotonic() - started < 10


def test_dead_bootstrap_servers_are_not_the_tools_error(node1: Node) -> None:
    """Four of five bootstrap servers down: the tools work and say nothing about them
    (librdkafka picks bootstrap servers at random, so every run meets a dead one)."""
    dead = ",".join(f"127.0.0.1:{free_port()}" for _ in range(4))
    bs = ["--bootstrap-server", f"{dead},{node1.bootstrap}"]
    res = tool("topics", *bs, "--create", "--topic", "halfway", "--partitions", "1")
    _clean(res)
    for _ in range(2):
        res = tool("console-producer", *bs, "--topic", "halfway", stdin="a\n")
        _clean(res)
        res = tool("topics", *bs, "--list")
        _clean(res)
    res = tool(
        "console-consumer", *bs, "--topic", "halfway", "--from-beginning", "--max-messages", "2"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["a", "a"]
    assert res.stderr.strip() == "Processed a total of 2 messages"


def test_quorum_tools_wait_for_a_new_active_controller(tmp_path: Path) -> None:
    """Right after the active controller dies the others answer 'not the leader' or 'no
    leader' until they elect one: the tools ask again (as Kafka's admin client does)."""
    c = Cluster(tmp_path, controllers=3, brokers=0)
    c.start()
    try:
        controllers = ",".join(f"127.0.0.1:{p}" for p in c.controller_ports.values())
        bc = ["--bootstrap-controller", controllers]
        old = c.leader()
        c.controllers[old].kill9()
        res = tool("metadata-quorum", *bc, "describe", "--status")
        assert res.returncode == 0, res.stderr
        leader = next(ln for ln in res.stdout.splitlines() if ln.startswith("LeaderId:"))
        assert int(leader.split()[1]) != old
        new = int(leader.split()[1])
        c.controllers[new].kill9()
        c.controllers[old].start()
        res = tool("metadata-shell", *bc, "--", "cat", "/metadataQuorum/leader")
        assert res.returncode == 0, res.stderr
        m = re.search(r"leaderId=(\d+)", res.stdout)
        assert m is not None, res.stdout
        assert int(m.group(1)) != new
    finally:
        c.stop()


def test_quorum_tool_fails_at_once_when_no_controller_answers() -> None:
    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    res = tool("metadata-quorum", "--bootstrap-controller", dead, "describe", "--status")
    assert _one_error_line(res).startswith(
        f"ERROR: no active controller answered DescribeQuorum: could not reach {dead} "
    )
    assert time.monotonic() - started < 10


def test_topics_flags_as_kafka(node1: Node) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    assert tool("topics", "--version").stdout.strip()
    for name in ("rx-a", "rx-b", "other"):
        _clean(tool("topics", *bs, "--create", "--topic", name, "--partitions", "2"))
    _clean(tool("topics", *bs, "--create", "--topic", "rx-c", "--config", "retention.ms=5000"))
    # --if-not-exists: an existing topic is no error
    res = tool("topics", *bs, "--create", "--topic", "rx-a", "--if-not-exists")
    _clean(res)
    assert res.stdout == ""
    assert "already exists" in _one_error_line(tool("topics", *bs, "--create", "--topic", "rx-a"))
    # --topic is a regular expression matching whole names
    assert tool("topics", *bs, "--list", "--topic", "rx-.*").stdout.split() == [
        "rx-a",
        "rx-b",
        "rx-c",
    ]
    desc = tool("topics", *bs, "--describe", "--topic", "rx-[ab]").stdout.splitlines()
    assert [ln.split("\t")[0] for ln in desc if not ln.startswith("\t")] == [
        "Topic: rx-a",
        "Topic: rx-b",
    ]
    _clean(tool("topics", *bs, "--alter", "--topic", "rx-[ab]", "--partitions", "3"))
    overrides = tool("topics", *bs, "--describe", "--topics-with-overrides", "--exclude-internal")
    assert [ln.split("\t")[0] for ln in overrides.stdout.splitlines()] == ["Topic: rx-c"]
    # partition filters print partition rows only
    at_min = tool("topics", *bs, "--describe", "--topic", "rx-a", "--at-min-isr-partitions")
    assert [ln.split("\t")[1:3] for ln in at_min.stdout.splitlines()] == [
        ["Topic: rx-a", f"Partition: {p}"] for p in range(3)
    ]
    assert tool("topics", *bs, "--describe", "--under-min-isr-partitions").stdout == ""
    assert "__consumer_offsets" not in tool("topics", *bs, "--list", "--exclude-internal").stdout
    # refusals
    line = _one_error_line(tool("topics", *bs, "--delete", "--topic", "nonexist"))
    assert line == "ERROR: Topic 'nonexist' does not exist as expected"
    _clean(tool("topics", *bs, "--delete", "--topic", "nonexist", "--if-exists"))
    line = _one_error_line(tool("topics", *bs, "--create", "--topic", "z", "--partitions", "0"))
    assert line == "ERROR: The partitions must be greater than 0"
    line = _one_error_line(tool("topics", *bs, "--list", "--describe"))
    assert "exactly one action" in line
    _clean(tool("topics", *bs, "--delete", "--topic", "rx-.*"))
    assert tool("topics", *bs, "--list", "--topic", "rx-.*").stdout == ""


def test_configs_shortcuts_quotas_and_scram(node1: Node) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    _clean(tool("topics", *bs, "--create", "--topic", "cfg-t"))
    res = tool(
        "configs", *bs, "--alter", "--topic", "cfg-t",
        "--add-config", "cleanup.policy=[compact,delete],retention.ms=1000",
    )  # fmt: skip
    _clean(res)
    assert res.stdout == "Completed updating config for topic cfg-t.\n"
    desc = tool("configs", *bs, "--describe", "--topic", "cfg-t").stdout.splitlines()
    assert desc[0] == "Dynamic configs for topic cfg-t are:"
    assert desc[1].startswith("  cleanup.policy=compact,delete sensitive=false")
    # every broker, then the cluster-wide default, when no name is given
    every = tool("configs", *bs, "--describe", "--entity-type", "brokers").stdout
    assert "Dynamic configs for broker 1 are:" in every
    assert "Default configs for brokers in the cluster are:" in every
    topics = tool("configs", *bs, "--describe", "--entity-type", "topics").stdout
    assert "Dynamic configs for topic cfg-t are:" in topics
    everything = tool("configs", *bs, "--describe", "--broker", "1", "--all").stdout
    assert "=None" not in everything
    assert "  broker.rack=null sensitive=false" in everything
    # users: quotas and SCRAM credentials; clients: quotas
    res = tool(
        "configs", *bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
        "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
        "consumer_byte_rate=20000",
    )  # fmt: skip
    _clean(res)
    assert res.stdout == "Completed updating config for user alice.\n"
    _clean(
        tool("configs", *bs, "--alter", "--client", "c1", "--add-config", "request_percentage=50")
    )
    assert tool("configs", *bs, "--describe", "--user", "alice").stdout.splitlines() == [
        "Quota configs for user-principal 'alice' are consumer_byte_rate=20000.0",
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192",
    ]
    assert tool("configs", *bs, "--describe", "--entity-type", "clients").stdout == (
        "Quota configs for client-id 'c1' are request_percentage=50.0\n"
    )
    _clean(tool("configs", *bs, "--alter", "--user", "alice", "--delete-config", "SCRAM-SHA-256"))
    assert "SCRAM" not in tool("configs", *bs, "--describe", "--user", "alice").stdout
    # through the controllers
    bc = ["--bootstrap-controller", f"127.0.0.1:{node1.controller_port}"]
    res = tool(
        "configs", *bc, "--alter", "--broker-defaults", "--add-config", "log.retention.ms=86400000"
    )
    _clean(res)
    assert res.stdout == "Completed updating default config for brokers in the cluster.\n"
    default = tool("configs", *bs, "--describe", "--broker-defaults").stdout
    assert "  log.retention.ms=86400000 sensitive=false" in default
    line = _one_error_line(tool("configs", *bc, "--describe", "--broker-defaults"))
    assert "use --bootstrap-server" in line


def test_raw_tools_read_and_check_command_config(tmp_path: Path) -> None:
    """The tools with their own protocol client read --command-config: a missing file is
    an error, and SASL settings without credentials are refused (naming what is missing)
    rather than ignored."""
    dead = f"127.0.0.1:{free_port()}"
    ssl = tmp_path / "ssl.properties"
    ssl.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    missing = tmp_path / "nope.properties"
    commands = [
        ["metadata-quorum", "--bootstrap-controller", dead, "--command-config", "{}", "describe",
         "--status"],
        ["features", "describe", "--bootstrap-server", dead, "--command-config", "{}"],
        ["cluster", "cluster-id", "--bootstrap-server", dead, "--command-config", "{}"],
        ["log-dirs", "--describe", "--bootstrap-server", dead, "--command-config", "{}"],
        ["leader-election", "--election-type", "preferred", "--all-topic-partitions",
         "--bootstrap-server", dead, "--command-config", "{}"],
        ["configs", "--describe", "--broker", "1", "--bootstrap-server", dead,
         "--command-config", "{}"],
    ]  # fmt: skip
    for cmd in commands:
        line = _one_error_line(tool(*[str(missing) if w == "{}" else w for w in cmd]))
        assert line == f"ERROR: --command-config {missing}: No such file or directory", cmd
        line = _one_error_line(tool(*[str(ssl) if w == "{}" else w for w in cmd]))
        assert line == (
            f"ERROR: --command-config {ssl}: SASL needs sasl.jaas.config (username, "
            "password) or sasl.username and sasl.password"
        ), cmd


def test_console_consumer_flags_as_kafka(node1: Node) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    for topic in ("inc-a", "inc-b"):
        _clean(tool("topics", *bs, "--create", "--topic", topic, "--partitions", "1"))
        _clean(tool("console-producer", *bs, "--topic", topic, stdin=f"{topic}-1\n"))
    # --timeout-ms 0: stop at the first empty poll (it used to run for ever)
    res = tool("console-consumer", *bs, "--topic", "inc-a", "--timeout-ms", "0", timeout=40)
    assert res.returncode == 0, res.stderr
    assert "Processed a total of" in res.stderr
    # --include: a regular expression of topics
    res = tool(
        "console-consumer", *bs, "--include", "inc-.*", "--from-beginning", "--max-messages",
        "2", "--isolation-level", "read_committed", "--property", "print.offset=true",
        "--property", "print.value=false", "--property", "print.key=true",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["Offset:0\tnull", "Offset:0\tnull"]
    line = _one_error_line(
        tool("console-consumer", *bs, "--topic", "inc-a", "--from-beginning", "--partition", "0",
             "--offset", "0")
    )  # fmt: skip
    assert line == "ERROR: Options from-beginning and offset cannot be specified together."
    line = _one_error_line(
        tool("console-consumer", *bs, "--topic", "inc-a", "--formatter", "my.Formatter")
    )
    assert line.startswith("ERROR: --formatter my.Formatter is not supported")
    line = _one_error_line(tool("console-consumer", *bs))
    assert line == "ERROR: Exactly one of --include/--topic is required."


def test_unknown_flags_point_to_the_subcommands_help() -> None:
    line = _one_error_line(tool("storage", "format", "-c", "x", "-t", "y", "--bogus"))
    assert line == "ERROR: unrecognized arguments: --bogus (see keeperless storage format --help)"
    res = subprocess.run(
        [str(ROOT / "bin" / "kafka-topics.sh"), "--bogus"], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert _one_error_line(res) == (
        "ERROR: unrecognized arguments: --bogus (see kafka-topics.sh --help)"
    )


def test_server_start_daemon(tmp_path: Path) -> None:
    """kafka-server-start.sh -daemon: returns at once, the node runs on in the background
    with its output in $LOG_DIR/kafkaServer.out."""
    import os
    import signal

    from keeperless.tools.server_stop import running_nodes
    from tests.integration.cluster import api_versions_ok, wait_until

    n = Node(tmp_path / "daemon")
    n.format()
    logs = tmp_path / "logs"
    started = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "keeperless", "server", "start", "-daemon", str(n.config)],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
        env={**os.environ, "LOG_DIR": str(logs)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started < 10
    pids = [pid for pid, cfg in running_nodes() if cfg == n.config]
    assert len(pids) == 1
    try:
        wait_until(lambda: api_versions_ok(n.port), 30, what="the daemon to listen")
        wait_until(
            lambda: "Started in" in (logs / "kafkaServer.out").read_text(), 10, what="its log"
        )
    finally:
        os.kill(pids[0], signal.SIGTERM)
        wait_until(lambda: not Path(f"/proc/{pids[0]}").exists() or _zombie(pids[0]), 30)
    # an unformatted node fails in the foreground, with one line
    bad = Node(tmp_path / "unformatted")
    line = _one_error_line(tool("server", "start", "-daemon", str(bad.config)))
    assert "format" in line


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_storage_and_features_flags(node1: Node, tmp_path: Path) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    # KIP-1022's version-mapping, in Kafka's order (transaction version 2 from 4.0-IV2, as
    # Kafka bootstraps it; share and streams groups are not built yet)
    mapping = tool("storage", "version-mapping", "--release-version", "3.7")
    assert mapping.stdout == (
        "metadata.version=19 (3.7-IV4)\nkraft.version=0\ntransaction.version=0\n"
        "group.version=0\neligible.leader.replicas.version=0\nshare.version=0\n"
        "streams.version=0\n"
    )
    assert tool("features", "version-mapping").stdout == (
        "metadata.version=28 (4.2-IV0)\nkraft.version=1\ntransaction.version=2\n"
        "group.version=1\neligible.leader.replicas.version=1\nshare.version=1\n"
        "streams.version=0\n"
    )
    assert tool("features", "version-mapping", "--release-version", "4.2").stdout.startswith(
        "metadata.version=29 (4.2-IV1)\n"
    )
    deps = tool("storage", "feature-dependencies", "--feature", "kraft.version=1",
                "--feature", "group.version=1", "--feature", "metadata.version=23")  # fmt: skip
    assert deps.stdout == (
        "kraft.version=1 requires:\n    metadata.version=21 (3.9-IV0)\n"
        "group.version=1 has no dependencies.\n"
        "metadata.version=23 (4.0-IV1) has no dependencies.\n"
    )
    assert tool("features", "feature-dependencies", "--feature",
                "eligible.leader.replicas.version=1").stdout == (
        "eligible.leader.replicas.version=1 requires:\n    metadata.version=23 (4.0-IV1)\n"
    )  # fmt: skip
    for spec, words in (("share.version=9", "No feature:share.version with feature level 9"),
                        ("no.such=1", "Unknown feature: no.such."),
                        ("metadata.version=99", "Unknown metadata.version 99"),
                        ("group.version", "expected NAME=LEVEL")):  # fmt: skip
        line = _one_error_line(tool("features", "feature-dependencies", "--feature", spec))
        assert words in line, line
    res = tool("features", "disable", *bs, "--feature", "metadata.version", "--dry-run")
    assert res.returncode == 1
    assert res.stdout.startswith("Can not disable metadata.version.")  # dry run, as Kafka
    # --standalone: a dynamic quorum (KIP-853), so not with controller.quorum.voters
    alone = Node(tmp_path / "alone")
    text = alone.config.read_text().replace(
        f"controller.quorum.voters=1@127.0.0.1:{alone.controller_port}",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{alone.controller_port}",
    )
    alone.config.write_text(text)
    cid = tool("storage", "random-uuid").stdout.strip()
    res = tool("storage", "format", "--standalone", "-t", cid, "-c", str(alone.config))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Formatting ")
    two = Node(tmp_path / "two")
    line = _one_error_line(
        tool("storage", "format", "--standalone", "-t", cid, "-c", str(two.config))
    )
    assert "controller.quorum.voters is set" in line
    assert "controller.quorum.bootstrap.servers" in line
    assert not two.data.exists()
    # describe --human-readable: times as 'N ms ago'
    bc = ["--bootstrap-controller", f"127.0.0.1:{node1.controller_port}"]
    rep = tool("metadata-quorum", *bc, "describe", "--replication", "--human-readable")
    assert rep.returncode == 0, rep.stderr
    assert re.search(r"\d+ ms ago\s+\d+ ms ago\s+Leader", rep.stdout), rep.stdout


def test_dump_log_indexes_offsets_and_limits(node1: Node) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    _clean(tool("topics", *bs, "--create", "--topic", "dumped", "--partitions", "1"))
    for i in range(3):
        _clean(tool("console-producer", *bs, "--topic", "dumped", stdin=f"r{i}\n"))
    res = tool("console-consumer", *bs, "--topic", "dumped", "--group", "dumpg",
               "--from-beginning", "--max-messages", "3")  # fmt: skip
    assert res.returncode == 0, res.stderr
    seg = node1.data / "dumped-0" / "00000000000000000000"
    index = tool("dump-log", "--files", f"{seg}.index")
    assert index.returncode == 0, index.stdout
    assert index.stdout.splitlines()[1:] == ["offset: 0 position: 0"]
    times = tool("dump-log", "--files", f"{seg}.timeindex").stdout.splitlines()[1:]
    assert [ln.split()[2:] for ln in times] == [["offset:", str(i)] for i in range(3)]
    assert all(re.fullmatch(r"timestamp: \d+ offset: \d", ln) for ln in times)
    whole = tool("dump-log", "--files", f"{seg}.log").stdout.count("baseOffset:")
    assert whole == 3
    first = tool("dump-log", "--max-bytes", "100", "--files", f"{seg}.log")
    assert first.stdout.count("baseOffset:") == 1
    decoded = "".join(
        tool("dump-log", "--offsets-decoder", "--files", str(p)).stdout
        for p in sorted(node1.data.glob("__consumer_offsets-*/*.log"))
    )
    assert 'key: {"type":"1","data":{"group":"dumpg","topic":"dumped","partition":0}} ' in decoded
    assert 'payload: {"version":"3","data":{"offset":3,' in decoded
    # the group's membership (GroupMetadata, key type 2), as Kafka's decoder prints it
    assert (
        'key: {"type":"2","data":{"group":"dumpg"}} payload: {"version":"3","data":'
        '{"protocolType":"consumer","generation":' in decoded
    )
    line = _one_error_line(
        tool("dump-log", "--value-decoder-class", "x.Y", "--files", f"{seg}.log")
    )
    assert line.startswith("ERROR: --value-decoder-class is not supported")
