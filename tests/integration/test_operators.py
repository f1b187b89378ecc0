"""Operator tools that never hang and find the quorum from any address (issue 14)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, keeperless, wait_until


@pytest.fixture(scope="module")
def snapshotting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """3 controllers and a broker that write metadata snapshots every few kilobytes."""
    c = Cluster(
        tmp_path_factory.mktemp("ops"),
        brokers=1,
        extra={
            "metadata.log.max.record.bytes.between.snapshots": "2048",
            "metadata.log.segment.bytes": "8192",
        },
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _controllers(c: Cluster, only: list[int] | None = None) -> str:
    return ",".join(
        f"127.0.0.1:{n.port}" for i, n in c.controllers.items() if only is None or i in only
    )


def test_the_metadata_shell_returns_once_a_snapshot_exists(snapshotting: Cluster) -> None:
    """It fetched the snapshot again and again at 70% CPU: after loading it, it asked
    for the next offset with last fetched epoch -1, which the leader answers with the
    snapshot."""
    c = snapshotting
    for i in range(12):
        keeperless(
            "topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", f"snap-{i}",
            "--partitions", "3", check=True,
        )  # fmt: skip
    leader = c.leader()
    wait_until(
        lambda: any(
            p.name != "bootstrap.checkpoint"
            for p in (c.controllers[leader].data / "__cluster_metadata-0").glob("*.checkpoint")
        ),
        30,
        what="a metadata snapshot",
    )
    res = keeperless(
        "metadata-shell", "--bootstrap-controller", _controllers(c), "--", "ls", "/topics"
    )
    assert res.returncode == 0, res.stderr
    assert {f"snap-{i}" for i in range(12)} <= set(res.stdout.split())
    # a new broker (an observer) catches up past the snapshot as well
    assert "Caught up with the metadata" in c.brokers[4].logs()


def test_tools_find_the_leader_from_any_controller(snapshotting: Cluster) -> None:
    c = snapshotting
    leader = c.leader()
    follower = next(i for i in c.controllers if i != leader)
    for tool in (
        ["metadata-quorum", "--bootstrap-controller", _controllers(c, [follower]),
         "describe", "--status"],
        ["metadata-shell", "--bootstrap-controller", _controllers(c, [follower]), "--",
         "cat", "/metadataQuorum/leader"],
    ):  # fmt: skip
        res = keeperless(*tool)
        assert res.returncode == 0, res.stderr
        assert str(leader) in res.stdout


def test_tools_skip_a_controller_that_is_down(snapshotting: Cluster) -> None:
    c = snapshotting
    leader = c.leader()
    down = next(i for i in sorted(c.controllers) if i != leader)
    c.controllers[down].kill9()
    try:
        order = [down, *[i for i in sorted(c.controllers) if i != down]]
        servers = ",".join(f"127.0.0.1:{c.controllers[i].port}" for i in order)
        res = keeperless(
            "metadata-quorum", "--bootstrap-controller", servers, "describe", "--status"
        )
        assert res.returncode == 0, res.stderr
        assert "LeaderId:" in res.stdout
    finally:
        c.controllers[down].start_background()
        c.controllers[down].wait_listening()


def test_exit_codes_as_kafkas_tools(snapshotting: Cluster) -> None:
    c = snapshotting
    missing = keeperless(
        "metadata-shell", "--bootstrap-controller", _controllers(c), "--", "cat", "/nowhere"
    )
    assert missing.returncode == 1
    assert "no such file" in missing.stderr
    unknown = keeperless("topics", "--bootstrap-server", c.bootstrap, "--lisst")
    assert unknown.returncode == 1
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert "unrecognized arguments: --lisst" in unknown.stderr


def test_console_consumer_offsets_and_timeout(snapshotting: Cluster) -> None:
    c = snapshotting
    keeperless(
        "topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", "cc",
        "--partitions", "1", check=True,
    )  # fmt: skip
    subprocess.run(
        [*_cli(), "console-producer", "--bootstrap-server", c.bootstrap, "--topic", "cc"],
        input="a\nb\nc\n", text=True, check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    def consume(*flags: str) -> list[str]:
        res = keeperless(
            "console-consumer", "--bootstrap-server", c.bootstrap, "--topic", "cc", *flags
        )
        assert res.returncode == 0, res.stderr
        return res.stdout.split()

    assert consume("--partition", "0", "--offset", "earliest", "--max-messages", "3") == [
        "a",
        "b",
        "c",
    ]
    assert consume("--partition", "0", "--offset", "1", "--max-messages", "2") == ["b", "c"]
    assert consume("--partition", "0", "--offset", "latest", "--timeout-ms", "1000") == []
    bad = keeperless(
        "console-consumer", "--bootstrap-server", c.bootstrap, "--topic", "cc",
        "--partition", "0", "--offset", "soon",
    )  # fmt: skip
    assert bad.returncode == 1
    assert "earliest, latest or a non-negative number" in bad.stderr
    # --timeout-ms counts from the assignment: a short timeout still reads everything,
    # every time (it printed nothing in 3 of ~28 runs while the group formed)
    for _ in range(3):
        assert consume("--from-beginning", "--timeout-ms", "1000") == ["a", "b", "c"]


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "keeperless"]


def test_no_client_chatter_on_stderr(snapshotting: Cluster) -> None:
    c = snapshotting
    for args in (
        ["topics", "--bootstrap-server", c.bootstrap, "--list"],
        ["topics", "--bootstrap-server", c.bootstrap, "--describe", "--topic", "cc"],
        ["consumer-groups", "--bootstrap-server", c.bootstrap, "--list"],
    ):
        res = keeperless(*args)
        assert res.returncode == 0, res.stderr
        assert res.stderr == "", res.stderr


def test_a_controlled_shutdown_is_logged_in_a_few_lines(tmp_path: Path) -> None:
    """A controlled shutdown in a few lines: the leaders do not propose the stopping peer
    into their ISRs (Kafka's leaders skip a replica in controlled shutdown; the refusals
    made 97 warnings); AlterPartition refusals one warning per answer, not one per
    partition (163 lines for 163 partitions); the controller's ISR changes one line per
    request; the groups a broker stops coordinating one line, not one per
    __consumer_offsets partition (50 lines)."""
    c = Cluster(tmp_path, controllers=1, brokers=3, extra={"offsets.topic.num.partitions": "12"})
    c.start()
    try:
        keeperless(
            "topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", "many",
            "--partitions", "60", "--replication-factor", "3", check=True,
        )  # fmt: skip
        from confluent_kafka import Consumer, TopicPartition

        for g in range(6):  # __consumer_offsets, and groups spread over its leaders
            cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"g{g}"})
            cons.commit(offsets=[TopicPartition("many", 0, 0)], asynchronous=False)
            cons.close()
        gone = 4
        c.brokers[gone].stop()
        c.brokers[gone].start()
        wait_until(lambda: "Broker listeners accepting requests" in c.brokers[gone].logs(), 30)
        # the ISRs grow back: 60 partitions, in a few lines
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": c.bootstrap})

        def full() -> bool:
            parts = admin.list_topics("many", timeout=10).topics["many"].partitions.values()
            return all(len(p.isrs) == 3 for p in parts)

        wait_until(full, 60, what="every ISR whole again")
        for b in c.brokers.values():
            refusals = [ln for ln in b.logs().splitlines() if "AlterPartition" in ln]
            assert len(refusals) <= 3, refusals
            assert not [ln for ln in refusals if "ineligible" in ln], refusals
            unloads = [ln for ln in b.logs().splitlines() if "Unloaded" in ln]
            assert len(unloads) <= 2, unloads
            shrinks = [ln for ln in b.logs().splitlines() if "Shrinking the ISR" in ln]
            assert len(shrinks) <= 60, len(shrinks)
        isr_lines = [ln for ln in c.controllers[1].logs().splitlines() if "ISR of" in ln]
        assert len(isr_lines) <= 20, len(isr_lines)
    finally:
        c.stop()


def test_a_broker_stopping_without_controllers_says_why_it_took_long(tmp_path: Path) -> None:
    """The last nodes of a cluster cannot shut down in a controlled way: the broker waits
    for a controller, then says in one line that it stops without it (it took 10-12 s in
    silence)."""
    c = Cluster(tmp_path, controllers=1, brokers=1)
    c.start()
    try:
        c.controllers[1].stop()
        rc = c.brokers[2].stop(timeout=90)
        assert rc == 0, c.brokers[2].logs()[-2000:]
        logs = c.brokers[2].logs()
        assert "Controlled shutdown: asking the controller" in logs
        assert "Stopping without a controlled shutdown: " in logs, logs[-2000:]
    finally:
        c.stop()
