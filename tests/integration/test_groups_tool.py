"""kafka-consumer-groups.sh as Kafka 4 behaves: describe of active groups and of groups
whose topic was deleted, reset rules (inactive groups only, dry run by default),
partition lists, the reset options, --members/--state/--offsets, --all-groups,
--delete-offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster import ROOT, Node, wait_until
from tests.integration.test_tool_errors import tool


@pytest.fixture(scope="module")
def node1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("groups-tool"))
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _ok(*args: str) -> subprocess.CompletedProcess[str]:
    res = tool(*args)
    assert res.returncode == 0, res.stderr
    return res


def _setup(node: Node, topic: str, per_partition: list[int]) -> None:
    """A topic with the given number of records in each partition."""
    from confluent_kafka import Producer

    bs = ["--bootstrap-server", node.bootstrap]
    _ok("topics", *bs, "--create", "--topic", topic, "--partitions", str(len(per_partition)))
    p = Producer({"bootstrap.servers": node.bootstrap})
    for part, n in enumerate(per_partition):
        for i in range(n):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(20) == 0


def _commit(node: Node, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group})
    try:
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        c.close()


def _rows(out: str, group: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.split()[:1] == [group]]


def _offsets(node: Node, group: str) -> dict[tuple[str, int], str]:
    out = _ok(
        "consumer-groups", "--bootstrap-server", node.bootstrap, "--describe", "--group", group
    )
    return {(r[1], int(r[2])): r[3] for r in _rows(out.stdout, group)}


def test_describe_shows_a_deleted_topics_offsets_with_dashes(node1: Node) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    _setup(node1, "gone", [3])
    _commit(node1, "gg", {("gone", 0): 2})
    _ok("topics", *bs, "--delete", "--topic", "gone")
    wait_until(
        lambda: "gone" not in _ok("topics", *bs, "--list").stdout.split(), 20, what="deletion"
    )
    res = _ok("consumer-groups", *bs, "--describe", "--group", "gg")
    assert _rows(res.stdout, "gg") == [["gg", "gone", "0", "2", "-", "-", "-", "-", "-"]]


@pytest.fixture
def live_member(node1: Node) -> Iterator[subprocess.Popen[str]]:
    """A console consumer in group 'live' that commits nothing."""
    _setup(node1, "orders", [4, 2])
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "keeperless", "console-consumer", "--bootstrap-server",
         node1.bootstrap, "--topic", "orders", "--group", "live",
         "--consumer-property", "enable.auto.commit=false"],
        stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGINT)  # the consumer leaves the group
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:  # where it hangs (faulthandler on SIGABRT)
            os.kill(proc.pid, signal.SIGABRT)
            proc.wait(10)
            err.seek(0)
            raise AssertionError(
                f"console-consumer ignored SIGINT:\n{err.read()[-4000:]}"
            ) from None
        finally:
            err.close()


def test_an_active_group(node1: Node, live_member: Any) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]

    def assigned() -> list[list[str]]:
        rows = _rows(tool("consumer-groups", *bs, "--describe", "--group", "live").stdout, "live")
        return rows if len(rows) == 2 else []

    rows = wait_until(assigned, 30, what="the member's assignment")
    # the assigned partitions, no offset committed: CURRENT-OFFSET and LAG are '-'
    assert [r[1:6] for r in rows] == [
        ["orders", "0", "-", "4", "-"],
        ["orders", "1", "-", "2", "-"],
    ]
    member = rows[0][6]
    assert member != "-"
    assert rows[0][7] == "/127.0.0.1"
    members = _ok("consumer-groups", *bs, "--describe", "--group", "live", "--members", "--verbose")
    header, row = members.stdout.splitlines()
    assert header.split()[:5] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert "CURRENT-ASSIGNMENT" in header
    assert row.split()[1] == member
    assert row.split()[4] == "2"
    assert "orders:0,1" in row.split()
    state = _ok("consumer-groups", *bs, "--describe", "--group", "live", "--state").stdout
    assert state.splitlines()[1].split()[-2:] == ["Stable", "1"]
    listed = _ok("consumer-groups", *bs, "--list", "--state", "stable").stdout.splitlines()
    assert listed[0].split() == ["GROUP", "STATE"]
    assert ["live", "Stable"] in [ln.split() for ln in listed[1:]]
    # Kafka refuses to reset the offsets of a group with members
    res = tool(
        "consumer-groups", *bs, "--reset-offsets", "--group", "live", "--topic", "orders",
        "--to-earliest", "--execute",
    )  # fmt: skip
    assert res.returncode == 1
    assert (
        "Error: Assignments can only be reset if the group 'live' is inactive, but the current "
        "state is Stable." in res.stderr
    )
    assert set(_offsets(node1, "live").values()) == {"-"}


def test_reset_offsets(node1: Node) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    _setup(node1, "resets", [10, 10, 10])
    _commit(node1, "rg", {("resets", 0): 5, ("resets", 1): 5, ("resets", 2): 5})
    reset = ["consumer-groups", *bs, "--reset-offsets", "--group", "rg"]
    # neither --execute nor --dry-run: the plan and Kafka's warning, nothing changed
    res = _ok(*reset, "--topic", "resets:0,2", "--to-earliest")
    assert res.stderr.startswith("WARN: No action will be performed as the --execute option")
    assert [r[1:] for r in _rows(res.stdout, "rg")] == [["resets", "0", "0"], ["resets", "2", "0"]]
    assert _offsets(node1, "rg") == {("resets", p): "5" for p in range(3)}
    res = _ok(*reset, "--topic", "resets:0,2", "--to-earliest", "--execute")
    assert res.stderr == ""
    assert _offsets(node1, "rg") == {("resets", 0): "0", ("resets", 1): "5", ("resets", 2): "0"}
    _ok(*reset, "--all-topics", "--shift-by", "3", "--execute")
    assert _offsets(node1, "rg") == {("resets", 0): "3", ("resets", 1): "8", ("resets", 2): "3"}
    _ok(*reset, "--topic", "resets:1", "--shift-by", "100", "--execute")  # clamped to the end
    assert _offsets(node1, "rg")[("resets", 1)] == "10"
    _ok(*reset, "--topic", "resets", "--to-datetime", "2000-01-01T00:00:00.000", "--execute")
    assert set(_offsets(node1, "rg").values()) == {"0"}
    _ok(*reset, "--topic", "resets", "--by-duration", "PT0S", "--execute")  # now: the end
    assert set(_offsets(node1, "rg").values()) == {"10"}
    _ok(*reset, "--topic", "resets:0", "--to-offset", "4", "--execute")
    _ok(*reset, "--topic", "resets", "--to-current", "--execute")
    assert _offsets(node1, "rg")[("resets", 0)] == "4"
    dry = _ok(*reset, "--all-topics", "--to-latest", "--dry-run")
    assert dry.stderr == ""
    assert _offsets(node1, "rg")[("resets", 0)] == "4"
    bad = tool(*reset, "--topic", "resets", "--to-earliest", "--to-latest")
    assert bad.returncode == 1
    assert "exactly one of" in bad.stderr
    bad = tool("consumer-groups", *bs, "--list", "--describe")
    assert bad.returncode == 1
    assert "exactly one action" in bad.stderr


def test_delete_offsets_and_all_groups(node1: Node) -> None:
    bs = ["--bootstrap-server", node1.bootstrap]
    _setup(node1, "dels", [2, 2])
    _commit(node1, "dg", {("dels", 0): 1, ("dels", 1): 2})
    _commit(node1, "dg2", {("dels", 0): 2})
    res = _ok("consumer-groups", *bs, "--delete-offsets", "--group", "dg", "--topic", "dels:0")
    assert res.stdout.splitlines()[0] == "Request succeeded for deleting offsets from group dg."
    assert res.stdout.splitlines()[2].split() == ["dels", "0", "Successful"]
    assert _offsets(node1, "dg") == {("dels", 1): "2"}
    verbose = _ok("consumer-groups", *bs, "--describe", "--group", "dg", "--verbose").stdout
    header, row = verbose.splitlines()
    assert header.split()[:5] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET"]
    assert row.split()[:3] == ["dg", "dels", "1"]
    assert row.split()[4] == "2"
    everything = _ok("consumer-groups", *bs, "--describe", "--all-groups").stdout
    assert _rows(everything, "dg")
    assert _rows(everything, "dg2")
    _ok("consumer-groups", *bs, "--delete", "--all-groups")
    assert _ok("consumer-groups", *bs, "--list").stdout.split() == []
