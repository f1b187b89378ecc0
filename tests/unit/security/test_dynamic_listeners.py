"""A broker's key and trust stores renewed while it runs (Kafka's DynamicListenerConfig):
its TLS listener serves the new ones to new handshakes, its connections to its peers use
them, and a store that does not load is refused before anything changes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from keeperless.security.listeners import listener_security
from keeperless.server.dynamic_listeners import follow_own_configs


def _store(d: Path, name: str) -> Path:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj",
         f"/CN={name}"],
        cwd=d, check=True, capture_output=True,
    )  # fmt: skip
    store = d / f"{name}.pem"
    store.write_text((d / f"{name}.crt").read_text() + (d / f"{name}.key").read_text())
    return store


def test_renewed_stores_reach_the_listener_and_the_peers(tmp_path: Path) -> None:
    old, new = _store(tmp_path, "old"), _store(tmp_path, "new")
    raw = {"ssl.keystore.location": str(old), "ssl.truststore.location": str(old)}
    listener = listener_security(raw, "BROKER", "SSL", None)
    bound = listener.ssl_context
    config = SimpleNamespace(raw=raw, protocol_of=lambda _name: "SSL")
    first_peers = object()
    broker: Any = SimpleNamespace(node_id=4, inter_broker_listener="BROKER",
                                  peers=SimpleNamespace(security=first_peers),
                                  on_own_configs=None, check_own_configs=None)  # fmt: skip
    follow_own_configs(broker, config, [listener])  # type: ignore[arg-type]
    # a change of something else: nothing is reloaded
    broker.on_own_configs({"leader.replication.throttled.rate": "1000"})
    assert listener.serving is bound
    assert broker.peers.security is first_peers
    # a store that does not load is refused before it is stored
    missing = {"listener.name.broker.ssl.keystore.location": str(tmp_path / "none.pem")}
    why = broker.check_own_configs(missing)
    assert why is not None
    assert "Validation of dynamic config update of SSLFactory failed" in why
    assert broker.check_own_configs({"ssl.keystore.location": str(new)}) is None
    # the renewed one: new handshakes are handed the new context, peers get new stores
    broker.on_own_configs({"listener.name.broker.ssl.keystore.location": str(new)})
    assert listener.serving is not bound
    assert broker.peers.security is not first_peers
    assert broker.peers.security.ssl_context is not None
    handed = SimpleNamespace(context=bound)
    listener._hand_over(handed, None, bound)
    assert handed.context is listener.serving
    # unchanged stores on the next change: nothing reloaded again
    serving, peers = listener.serving, broker.peers.security
    broker.on_own_configs({"listener.name.broker.ssl.keystore.location": str(new), "x": "1"})
    assert listener.serving is serving
    assert broker.peers.security is peers
