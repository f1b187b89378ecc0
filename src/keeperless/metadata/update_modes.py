"""Which broker configs change while running, and at which level: Kafka 4.1's
DynamicBrokerConfig sets (read-only, per-broker, cluster-wide), and the few Kafka
reloads that keeperless reads only at start."""

from __future__ import annotations

import re

__all__ = [
    "CLUSTER_WIDE",
    "LIVE_UNSUPPORTED",
    "LIVE_UNSUPPORTED_REASON",
    "PER_BROKER",
    "READ_ONLY",
    "RECONFIGURABLE_SSL",
    "kafka_update_mode",
    "listener_key",
    "update_mode",
]

READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"

# Which broker configs Kafka 4.1 changes while running, and at which level (its
# DynamicBrokerConfig: the listener and security configs per broker, the rest
# cluster-wide; every other key is read-only). Each catalog entry's update mode is read
# from here, never declared beside it.
_KAFKA_PER_BROKER = frozenset({
    # DynamicListenerConfig (advertised.listeners left it in 4.0, KAFKA-18403)
    "listeners", "listener.security.protocol.map", "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.truststore.certificates",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
})  # fmt: skip
_KAFKA_CLUSTER_WIDE = frozenset({
    # LogCleaner, DynamicThreadPool, SocketServer, the producer state, metric reporters
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms", "message.max.bytes",
    "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads", "num.network.threads", "max.connections",
    "max.connection.creation.rate", "max.connections.per.ip",
    "max.connections.per.ip.overrides", "metric.reporters", "producer.id.expiration.ms",
    "transaction.partition.verification.enable",
    # DynamicLogConfig: every broker synonym of a topic config
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.roll.jitter.ms",
    "log.roll.jitter.hours", "log.index.size.max.bytes", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.retention.bytes", "log.retention.ms",
    "log.retention.minutes", "log.retention.hours", "log.index.interval.bytes",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleanup.policy",
    "unclean.leader.election.enable", "min.insync.replicas", "compression.type",
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "log.preallocate", "log.message.timestamp.type", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "log.local.retention.ms",
    "log.local.retention.bytes",
    # DynamicConfig.Broker's replication quotas (set for one broker or the default)
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})  # fmt: skip


def kafka_update_mode(name: str) -> str:
    """Kafka 4.1's update mode of a broker config: read-only, per-broker, cluster-wide."""
    if name in _KAFKA_PER_BROKER:
        return PER_BROKER
    return CLUSTER_WIDE if name in _KAFKA_CLUSTER_WIDE else READ_ONLY


# A listener's key store and trust store, reloaded on a running broker (Kafka's
# SslConfigs.RECONFIGURABLE_CONFIGS): per broker, for every listener or one
# (listener.name.<l>.<key>); the listener's new connections get them
RECONFIGURABLE_SSL = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})  # fmt: skip
# Kafka changes these on a running broker; keeperless builds its listeners, the rest of
# their TLS settings and SASL mechanisms and reads these producer-state settings at start
# only, so for now they are read-only here, and changing one says so
# (LIVE_UNSUPPORTED_REASON) rather than storing a value nothing would use
LIVE_UNSUPPORTED = frozenset(
    {k for k in _KAFKA_PER_BROKER
     if (k.startswith("ssl.") and k not in RECONFIGURABLE_SSL)
     or k in ("listeners", "listener.security.protocol.map", "principal.builder.class",
              "sasl.jaas.config", "sasl.enabled.mechanisms",
              "sasl.mechanism.inter.broker.protocol")}
    | {"producer.id.expiration.ms", "transaction.partition.verification.enable"}
)  # fmt: skip
_LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_-]+)\.(.+)")


def listener_key(name: str) -> tuple[str | None, str]:
    """(listener, key) of ``listener.name.<listener>.<key>`` (a key set for one listener;
    a JAAS configuration per mechanism, ``<mechanism>.sasl.jaas.config``, is
    ``sasl.jaas.config``); (None, name) for any other name."""
    m = _LISTENER_KEY.fullmatch(name)
    if m is None:
        return None, name
    key = m[2]
    if key.endswith(".sasl.jaas.config"):
        key = "sasl.jaas.config"
    return m[1], key


LIVE_UNSUPPORTED_REASON = (
    "keeperless reads it at start (Kafka changes it on a running broker): set it in the "
    "broker's server.properties and restart the broker"
)


def update_mode(name: str) -> str:
    """This node's update mode of a broker config: Kafka's, but for LIVE_UNSUPPORTED."""
    return READ_ONLY if name in LIVE_UNSUPPORTED else kafka_update_mode(name)
