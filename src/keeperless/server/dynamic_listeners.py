"""A broker's listeners following its own dynamic configs (Kafka's DynamicListenerConfig
and SslFactory.reconfigure): a renewed key or trust store, set with kafka-configs.sh for
this broker, is loaded before the change is forwarded and, once it is in the metadata,
served to new connections - and used by the broker's own connections to its peers on the
inter-broker listener."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from keeperless.broker.broker import Broker
from keeperless.security.listeners import (
    ListenerSecurity,
    SecurityConfigError,
    check_reconfiguration,
    client_security,
    reconfigure_listeners,
    store_settings,
)
from keeperless.server.config import NodeConfig

__all__ = ["follow_own_configs"]

log = logging.getLogger(__name__)


def follow_own_configs(
    broker: Broker, config: NodeConfig, listeners: Sequence[ListenerSecurity]
) -> None:
    raw = config.raw

    def changed(own: Mapping[str, str]) -> None:
        effective = {**raw, **own}
        reconfigure_listeners(broker.node_id, listeners, effective)
        name = broker.inter_broker_listener
        if not name or not config.protocol_of(name).endswith("SSL"):
            return
        stores = store_settings(effective, name)
        if stores == peer_stores.get(name, store_settings(raw, name)):
            return
        try:
            broker.peers.security = client_security(
                effective, name, config.protocol_of(name), "sasl.mechanism.inter.broker.protocol"
            )
        except SecurityConfigError as e:
            log.error("[node %d] Connections to peers keep their key and trust stores: %s",
                      broker.node_id, e)  # fmt: skip
            return
        peer_stores[name] = stores
        log.info("[node %d] Connections to peers use the reloaded key and trust stores of "
                 "listener %s", broker.node_id, name)  # fmt: skip

    peer_stores: dict[str, tuple[str | None, ...]] = {}
    broker.on_own_configs = changed
    broker.check_own_configs = lambda own: check_reconfiguration(listeners, {**raw, **own})
