"""A cluster holds only its own nodes, and a node that cannot serve never joins:
regressions for issue 12's bugs 2 (a foreign broker joined) and 3 (registered before
binding its listeners)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, describe_quorum, wait_until


@pytest.fixture
def one_and_one(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path, controllers=1, brokers=1)
    yield c
    c.stop()


def _start_controller(c: Cluster) -> None:
    from tests.integration.cluster import keeperless

    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    for n in [*c.controllers.values(), *c.brokers.values()]:
        n.format(cid)
    for n in c.controllers.values():
        n.start_background()
        n.wait_listening()
    c.leader()


def test_a_broker_that_cannot_bind_its_listener_never_registers(one_and_one: Cluster) -> None:
    c = one_and_one
    _start_controller(c)
    broker = c.brokers[2]
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", broker.port))
    squatter.listen()
    try:
        broker.start_background()
        assert broker.proc is not None
        rc = broker.proc.wait(60)
    finally:
        squatter.close()
    assert rc != 0
    logs = broker.logs()
    assert f"Cannot listen on PLAINTEXT://127.0.0.1:{broker.port}" in logs
    assert "Registered broker" not in logs
    assert "Registering broker 2" not in c.controllers[1].logs()
    broker.proc = None
    broker.start()  # the port is free again: it binds, registers and serves
    assert "Registering broker 2" in c.controllers[1].logs()
    assert "Broker listeners accepting requests" in broker.logs()
    assert broker.logs().index("Bound PLAINTEXT") < broker.logs().index("Registered broker")


def _random_uuid() -> str:
    from tests.integration.cluster import keeperless

    return keeperless("storage", "random-uuid", check=True).stdout.strip()


def test_a_broker_formatted_for_another_cluster_is_refused(one_and_one: Cluster) -> None:
    """Kafka refuses a broker whose cluster id differs (INCONSISTENT_CLUSTER_ID): it is
    never registered, unfenced or shown, and both sides say why."""
    c = one_and_one
    ours, theirs = _random_uuid(), _random_uuid()
    c.controllers[1].format(ours)
    broker = c.brokers[2]
    broker.format(theirs)
    c.controllers[1].start_background()
    c.controllers[1].wait_listening()
    c.leader()
    broker.start_background()
    assert broker.proc is not None
    assert broker.proc.wait(60) != 0
    blog, clog = broker.logs(), c.controllers[1].logs()
    assert "INCONSISTENT_CLUSTER_ID" in blog
    assert theirs in blog
    assert f"expected cluster ID {ours}, but got cluster ID {theirs}" in clog
    assert "Registering broker 2" not in clog
    assert "Registered broker" not in blog
    broker.proc = None


def test_a_controller_formatted_for_another_cluster_never_joins_the_quorum(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path, controllers=3, brokers=0)
    try:
        ours, theirs = _random_uuid(), _random_uuid()
        for i, n in c.controllers.items():
            n.format(theirs if i == 3 else ours)
        for n in c.controllers.values():
            n.start_background()
        for n in c.controllers.values():
            n.wait_listening()
        leader = c.leader()
        assert leader in (1, 2)
        wait_until(
            lambda: "INCONSISTENT_CLUSTER_ID" in c.controllers[3].logs(),
            30,
            what="the foreign controller to be told",
        )
        wait_until(
            lambda: any(
                "INCONSISTENT_CLUSTER_ID" in c.controllers[i].logs()
                and f"of cluster {theirs}" in c.controllers[i].logs()
                for i in (1, 2)
            ),
            30,
            what="a voter to log the refusal",
        )
        info = describe_quorum(c.controllers[leader].port)
        assert dict(info["voters"])[3] == -1  # never fetched from the leader
        assert "Completed transition to Follower" not in c.controllers[3].logs()
        # the quorum of the two others commits
        wait_until(
            lambda: describe_quorum(c.controllers[leader].port)["high_watermark"] > 0,
            20,
            what="the two others to commit",
        )
    finally:
        c.stop()
