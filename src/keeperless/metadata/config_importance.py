"""How much each config key matters, as Kafka's ConfigDef ranks it (Importance HIGH,
MEDIUM or LOW): read into each definition (config_def.ConfigDef.importance) from here,
never declared beside it (as update_modes.py gives the update mode). Keys Kafka does not
have (this project's own) are LOW; a key in neither set is MEDIUM."""

from __future__ import annotations

__all__ = ["HIGH", "LOW", "MEDIUM", "importance"]

HIGH, MEDIUM, LOW = "high", "medium", "low"

# broker (and controller) keys, from Kafka 4.1's server ConfigDefs
_BROKER_HIGH = frozenset({
    "advertised.listeners", "auto.create.topics.enable", "auto.leader.rebalance.enable",
    "background.threads", "controller.listener.names",
    "controller.quorum.bootstrap.servers", "controller.quorum.election.backoff.max.ms",
    "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
    "controller.quorum.voters", "delete.topic.enable", "early.start.listeners",
    "leader.imbalance.check.interval.seconds", "leader.imbalance.per.broker.percentage",
    "listeners", "log.dir", "log.dirs", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.retention.bytes", "log.retention.hours",
    "log.retention.minutes", "log.retention.ms", "log.roll.hours", "log.roll.jitter.hours",
    "log.roll.jitter.ms", "log.roll.ms", "log.segment.bytes", "log.segment.delete.delay.ms",
    "message.max.bytes", "metadata.log.dir",
    "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.max.snapshot.interval.ms", "metadata.log.segment.bytes",
    "min.insync.replicas", "node.id", "num.io.threads", "num.network.threads",
    "num.recovery.threads.per.data.dir", "num.replica.fetchers",
    "offsets.commit.timeout.ms", "offsets.topic.num.partitions",
    "offsets.topic.replication.factor", "process.roles", "replica.fetch.wait.max.ms",
    "replica.high.watermark.checkpoint.interval.ms", "replica.lag.time.max.ms",
    "sasl.mechanism.controller.protocol", "share.coordinator.state.topic.min.isr",
    "share.coordinator.state.topic.num.partitions",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.segment.bytes", "share.coordinator.write.timeout.ms",
    "socket.receive.buffer.bytes",
    "socket.request.max.bytes", "socket.send.buffer.bytes", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.truststore.certificates", "ssl.truststore.location",
    "ssl.truststore.password", "transaction.max.timeout.ms",
    "transaction.state.log.min.isr", "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor", "transaction.state.log.segment.bytes",
    "transactional.id.expiration.ms", "unclean.leader.election.enable",
    # Kafka 3.x's, for a migration from ZooKeeper
    "zookeeper.connect", "zookeeper.metadata.migration.enable",
})  # fmt: skip
_BROKER_LOW = frozenset({
    "allow.everyone.if.no.acl.found", "authorizer.class.name", "controller.quorum.auto.join.enable",
    "delegation.token.expiry.check.interval.ms", "listener.security.protocol.map",
    "metrics.http.listener", "producer.id.expiration.check.interval.ms",
    "producer.id.expiration.ms", "replication.quota.window.num",
    "replication.quota.window.size.seconds", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.partition.verification.enable",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
})  # fmt: skip


def importance(name: str, topic: bool = False) -> str:
    """A broker key's importance; every topic key this project has (Kafka's LogConfig)
    and every group key (GroupConfig) is MEDIUM - a topic key can rank lower than its
    broker synonym (min.insync.replicas: HIGH for the broker)."""
    if topic:
        return MEDIUM
    if name in _BROKER_HIGH:
        return HIGH
    return LOW if name in _BROKER_LOW else MEDIUM
