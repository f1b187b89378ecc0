"""A cluster holds only its own nodes, and a node that cannot serve never joins:
regressions for issue 12's bugs 2 (a foreign broker joined) and 3 (registered before
binding its listeners)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster


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
