"""Every broker and topic config keeperless knows, as DescribeConfigs reports them: type,
default, documentation, whether it may change while running (Kafka's read-only,
per-broker and cluster-wide), and how a topic config falls back to its broker synonyms
(``retention.ms`` <- ``log.retention.ms`` <- ``log.retention.minutes`` <- ``log.retention.hours``).

How a value resolves across its sources is config_resolution.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import IntEnum

from keeperless.metadata.config_def import (
    ConfigDef,
    ConfigType,
    Validator,
    at_least,
    between,
    greater_than,
    list_of,
)
from keeperless.metadata.group_coordinator_configs import GROUP_COORDINATOR_CONFIGS
from keeperless.metadata.replication_configs import REPLICATION_CONFIGS
from keeperless.metadata.topic_configs import TOPIC_CONFIGS
from keeperless.metadata.update_modes import (
    CLUSTER_WIDE,
    PER_BROKER,
    READ_ONLY,
    kafka_update_mode,
    update_mode,
)

__all__ = [
    "BROKER_CONFIGS",
    "CLUSTER_WIDE",
    "PER_BROKER",
    "READ_ONLY",
    "ConfigDef",
    "ConfigSource",
    "ConfigType",
    "Resolved",
    "kafka_update_mode",
]


class ConfigSource(IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


# (value, source, synonyms as (name, value, source) in precedence order)
Resolved = tuple[str | None, ConfigSource, tuple[tuple[str, str | None, ConfigSource], ...]]

T = ConfigType
_LONG_MAX = str(2**63 - 1)


def _d(name: str, t: ConfigType, default: str | None, doc: str) -> ConfigDef:
    return ConfigDef(name, t, default, doc, update_mode(name))


_BROKER: list[ConfigDef] = [
    # roles and identity
    _d("process.roles", T.LIST, None, "The roles this node plays: broker, controller or both."),
    _d(
        "node.id",
        T.INT,
        None,
        "This node's id in the cluster, unique among brokers and controllers.",
    ),
    _d("broker.rack", T.STRING, None, "The rack of this broker, used to spread replicas."),
    _d(
        "replica.selector.class",
        T.CLASS,
        None,
        "The selector of the replica a consumer fetches from (KIP-392): "
        "org.apache.kafka.common.replica.RackAwareReplicaSelector sends a consumer with a "
        "client.rack to an in-sync replica in that rack; unset, consumers fetch from leaders.",
    ),
    # listeners
    _d(
        "listeners",
        T.STRING,
        "PLAINTEXT://:9092",
        "The addresses this node listens on, as NAME://host:port.",
    ),
    _d(
        "advertised.listeners",
        T.STRING,
        None,
        # read-only in KRaft (Kafka 4.0, KAFKA-18403): a broker's registration keeps its
        # endpoints until it registers again
        "The addresses clients are told to use, when they differ from listeners.",
    ),
    _d("controller.listener.names", T.STRING, None, "The listeners the controllers use."),
    _d(
        "listener.security.protocol.map",
        T.STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "The security protocol of each listener name.",
    ),
    _d(
        "inter.broker.listener.name",
        T.STRING,
        None,
        "The listener brokers use to reach each other.",
    ),
    # the quorum
    _d(
        "controller.quorum.voters",
        T.LIST,
        "",
        "The static quorum: id@host:port of every controller.",
    ),
    _d(
        "controller.quorum.bootstrap.servers",
        T.LIST,
        "",
        "Controller addresses to discover the quorum from.",
    ),
    _d(
        "controller.quorum.election.timeout.ms",
        T.INT,
        "1000",
        "How long a voter waits without a leader before it stands for election.",
    ),
    _d(
        "controller.quorum.fetch.timeout.ms",
        T.INT,
        "2000",
        "How long without a fetch from the leader before a voter suspects it is gone.",
    ),
    _d(
        "controller.quorum.election.backoff.max.ms",
        T.INT,
        "1000",
        "The longest a voter waits before standing again after a failed election.",
    ),
    _d(
        "controller.quorum.request.timeout.ms",
        T.INT,
        "2000",
        "How long a quorum request may take before it is retried.",
    ),
    _d(
        "controller.quorum.auto.join.enable",
        T.BOOLEAN,
        "false",
        "Whether a controller of a dynamic quorum that is not a voter asks the leader to "
        "add it once it has caught up (removing first a voter of its id with another "
        "directory, its old disk).",
    ),
    _d(
        "controller.quorum.append.linger.ms",
        T.INT,
        "25",
        "How long the leader gathers records before it writes them as one batch.",
    ),
    _d(
        "broker.session.timeout.ms",
        T.INT,
        "9000",
        "A broker that misses heartbeats this long is fenced.",
    ),
    _d(
        "broker.heartbeat.interval.ms",
        T.INT,
        "2000",
        "How often a broker heartbeats the active controller.",
    ),
    _d(
        "metadata.log.dir",
        T.STRING,
        None,
        "Where the metadata log lives (the first of log.dirs if not set).",
    ),
    _d("metadata.log.segment.bytes", T.INT, str(1024**3), "The size of a metadata log segment."),
    _d(
        "metadata.log.max.record.bytes.between.snapshots",
        T.LONG,
        str(20 * 1024**2),
        "Metadata bytes appended before a new snapshot is written.",
    ),
    _d(
        "metadata.log.max.snapshot.interval.ms",
        T.LONG,
        "3600000",
        "The longest time between metadata snapshots (0: by size only).",
    ),
    # logs
    _d("log.dirs", T.STRING, None, "The directories holding partition data."),
    _d(
        "log.dir",
        T.STRING,
        "/tmp/kraft-combined-logs",
        "The data directory when log.dirs is not set.",
    ),
    _d(
        "num.partitions",
        T.INT,
        "1",
        "The number of partitions of a new topic that names none.",
    ),
    _d(
        "default.replication.factor",
        T.INT,
        "1",
        "The replication factor of a new topic that names none.",
    ),
    _d(
        "auto.create.topics.enable",
        T.BOOLEAN,
        "true",
        "Create a topic when a client asks for one that does not exist.",
    ),
    _d(
        "log.segment.bytes",
        T.INT,
        str(1024**3),
        "The size at which a log segment is rolled.",
    ),
    _d(
        "log.roll.ms",
        T.LONG,
        None,
        "The age at which a log segment is rolled (log.roll.hours if not set).",
    ),
    _d(
        "log.roll.hours",
        T.INT,
        "168",
        "The age in hours at which a log segment is rolled.",
    ),
    _d(
        "log.roll.jitter.ms",
        T.LONG,
        None,
        "A random amount subtracted from the roll time.",
    ),
    _d("log.roll.jitter.hours", T.INT, "0", "log.roll.jitter.ms in hours."),
    _d(
        "log.retention.ms",
        T.LONG,
        None,
        "How long data is kept (log.retention.minutes if not set; -1: forever).",
    ),
    _d(
        "log.retention.minutes",
        T.INT,
        None,
        "How long data is kept, in minutes (log.retention.hours if not set).",
    ),
    _d("log.retention.hours", T.INT, "168", "How long data is kept, in hours."),
    _d(
        "log.retention.bytes",
        T.LONG,
        "-1",
        "The most data a partition keeps (-1: no limit).",
    ),
    _d("log.retention.check.interval.ms", T.LONG, "300000", "How often retention is enforced."),
    _d(
        "log.index.interval.bytes",
        T.INT,
        "4096",
        "Bytes between offset index entries.",
    ),
    _d(
        "log.index.size.max.bytes",
        T.INT,
        "10485760",
        "The largest an offset index grows.",
    ),
    _d(
        "log.flush.interval.messages",
        T.LONG,
        _LONG_MAX,
        "Messages written before a partition is flushed to disk.",
    ),
    _d(
        "log.flush.interval.ms",
        T.LONG,
        None,
        "Time before a partition is flushed to disk (unset: never on a timer).",
    ),
    _d(
        "log.cleanup.policy",
        T.LIST,
        "delete",
        "The default cleanup policy: delete, compact or both.",
    ),
    _d("log.cleaner.enable", T.BOOLEAN, "true", "Run the log cleaner for compacted topics."),
    _d("log.cleaner.threads", T.INT, "1", "Threads cleaning compacted logs."),
    _d(
        "log.cleaner.dedupe.buffer.size",
        T.LONG,
        "134217728",
        "Memory for the cleaner's offset map of keys, over all its threads.",
    ),
    _d(
        "log.cleaner.io.max.bytes.per.second",
        T.DOUBLE,
        "1.7976931348623157E308",
        "The cleaner's read and write rate limit, over all its threads.",
    ),
    _d(
        "log.cleaner.backoff.ms",
        T.LONG,
        "15000",
        "How long the cleaner sleeps when no log needs cleaning.",
    ),
    _d(
        "log.cleaner.delete.retention.ms",
        T.LONG,
        "86400000",
        "How long tombstones are kept on compacted topics.",
    ),
    _d(
        "log.cleaner.min.compaction.lag.ms",
        T.LONG,
        "0",
        "The minimum age of a record before it may be compacted.",
    ),
    _d(
        "log.cleaner.max.compaction.lag.ms",
        T.LONG,
        _LONG_MAX,
        "The maximum age of a record before it must be compacted.",
    ),
    _d(
        "log.cleaner.min.cleanable.ratio",
        T.DOUBLE,
        "0.5",
        "The dirty share of a log above which it is cleaned.",
    ),
    _d(
        "log.segment.delete.delay.ms",
        T.LONG,
        "60000",
        "How long a deleted segment's files stay before removal.",
    ),
    _d("log.preallocate", T.BOOLEAN, "false", "Preallocate new segment files."),
    _d(
        "log.message.timestamp.type",
        T.STRING,
        "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
    ),
    _d(
        "log.message.timestamp.before.max.ms",
        T.LONG,
        _LONG_MAX,
        "How far in the past a record's timestamp may be.",
    ),
    _d(
        "log.message.timestamp.after.max.ms",
        T.LONG,
        "3600000",
        "How far in the future a record's timestamp may be.",
    ),
    _d(
        "message.max.bytes",
        T.INT,
        "1048588",
        "The largest record batch a partition accepts.",
    ),
    _d(
        "compression.type",
        T.STRING,
        "producer",
        "The compression of stored batches (producer: as the producer sent them).",
    ),
    _d("min.insync.replicas", T.INT, "1", "In-sync replicas an acks=all write needs."),
    _d(
        "unclean.leader.election.enable",
        T.BOOLEAN,
        "false",
        "Elect a replica outside the ISR when no ISR member is alive (may lose data).",
    ),
    _d("delete.topic.enable", T.BOOLEAN, "true", "Topics may be deleted."),
    # accepted without effect here
    _d("background.threads", T.INT, "10", "Background threads (tasks of one event loop here)."),
    _d(
        "log.cleaner.io.buffer.load.factor",
        T.DOUBLE,
        "0.9",
        "How full the cleaner's offset map may be.",
    ),
    _d("log.cleaner.io.buffer.size", T.INT, "524288", "The cleaner's read and write buffers."),
    # Kerberos (GSSAPI) and OAUTHBEARER logins: keeperless offers neither mechanism
    _d("sasl.kerberos.service.name", T.STRING, None, "The Kerberos name the broker runs as."),
    _d("sasl.kerberos.kinit.cmd", T.STRING, "/usr/bin/kinit", "The Kerberos kinit command."),
    _d(
        "sasl.kerberos.ticket.renew.window.factor",
        T.DOUBLE,
        "0.8",
        "When a Kerberos ticket is renewed, as a fraction of its lifetime.",
    ),
    _d(
        "sasl.kerberos.ticket.renew.jitter",
        T.DOUBLE,
        "0.05",
        "Random jitter added to a Kerberos renewal.",
    ),
    _d(
        "sasl.kerberos.min.time.before.relogin",
        T.LONG,
        "60000",
        "The shortest time between Kerberos relogins.",
    ),
    _d(
        "sasl.kerberos.principal.to.local.rules",
        T.LIST,
        "DEFAULT",
        "Rules mapping Kerberos principal names to short names.",
    ),
    _d(
        "sasl.login.refresh.window.factor",
        T.DOUBLE,
        "0.8",
        "When a login's credential is refreshed, as a fraction of its lifetime.",
    ),
    _d(
        "sasl.login.refresh.window.jitter",
        T.DOUBLE,
        "0.05",
        "Random jitter added to a login refresh.",
    ),
    _d(
        "sasl.login.refresh.min.period.seconds",
        T.SHORT,
        "60",
        "The shortest time between login refreshes.",
    ),
    _d(
        "sasl.login.refresh.buffer.seconds",
        T.SHORT,
        "300",
        "How long before a credential expires it is refreshed.",
    ),
    _d(
        "num.network.threads",
        T.INT,
        "3",
        "Network threads (one event loop serves all connections here).",
    ),
    _d(
        "num.io.threads",
        T.INT,
        "8",
        "I/O threads (one event loop serves all requests here).",
    ),
    _d("socket.send.buffer.bytes", T.INT, "102400", "The socket send buffer (-1: the OS default)."),
    _d(
        "socket.receive.buffer.bytes",
        T.INT,
        "102400",
        "The socket receive buffer (-1: the OS default).",
    ),
    _d("socket.request.max.bytes", T.INT, "104857600", "The largest request accepted."),
    _d(
        "num.recovery.threads.per.data.dir",
        T.INT,
        "2",
        "Threads recovering logs at start.",
    ),
    _d(
        "transaction.state.log.replication.factor",
        T.SHORT,
        "3",
        "The replication factor of __transaction_state.",
    ),
    _d("transaction.state.log.min.isr", T.INT, "2", "min.insync.replicas of __transaction_state."),
    _d(
        "transaction.state.log.num.partitions",
        T.INT,
        "50",
        "The partitions of __transaction_state (set before it is first created).",
    ),
    _d(
        "transaction.state.log.segment.bytes",
        T.INT,
        "104857600",
        "The segment size of __transaction_state.",
    ),
    _d(
        "transaction.max.timeout.ms",
        T.INT,
        "900000",
        "The largest transaction.timeout.ms a producer may ask for (larger: "
        "INVALID_TRANSACTION_TIMEOUT).",
    ),
    _d(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        T.INT,
        "10000",
        "How often the transaction coordinator aborts transactions open longer than their timeout.",
    ),
    _d(
        "transaction.partition.verification.enable",
        T.BOOLEAN,
        "true",
        "Partition leaders ask the transaction coordinator whether a producer's first "
        "transactional write to a partition belongs to its ongoing transaction (KIP-890).",
    ),
    _d(
        "transactional.id.expiration.ms",
        T.INT,
        "604800000",
        "How long the coordinator keeps a transactional id that sent nothing.",
    ),
    _d(
        "share.coordinator.state.topic.replication.factor",
        T.SHORT,
        "3",
        "The replication factor of __share_group_state.",
    ),
    _d(
        "share.coordinator.state.topic.min.isr",
        T.SHORT,
        "2",
        "min.insync.replicas of __share_group_state.",
    ),
    _d(
        "metrics.http.listener",
        T.STRING,
        None,
        "host:port of the Prometheus metrics endpoint (keeperless).",
    ),
]

# security (issue 17): each may be set for one listener as listener.name.<l>.<key>
_SECURITY: tuple[tuple[str, ConfigType, str | None, str], ...] = (
    ("ssl.keystore.type", T.STRING, "PEM", "The key store format: PEM only."),
    ("ssl.keystore.location", T.STRING, None, "A PEM file: certificate chain and key."),
    ("ssl.keystore.password", T.PASSWORD, None, "The password of the key store."),
    ("ssl.keystore.certificate.chain", T.PASSWORD, None, "The certificate chain, inline PEM."),
    ("ssl.keystore.key", T.PASSWORD, None, "The private key, inline PEM."),
    ("ssl.key.password", T.PASSWORD, None, "The password of the private key."),
    ("ssl.truststore.type", T.STRING, "PEM", "The trust store format: PEM only."),
    ("ssl.truststore.location", T.STRING, None, "A PEM file of trusted CA certificates."),
    ("ssl.truststore.password", T.PASSWORD, None, "The password of the trust store."),
    ("ssl.truststore.certificates", T.PASSWORD, None, "Trusted certificates, inline PEM."),
    ("ssl.client.auth", T.STRING, "none", "Client certificates: none, requested, required."),
    ("ssl.principal.mapping.rules", T.STRING, "DEFAULT", "Certificate DN to principal rules."),
    ("ssl.endpoint.identification.algorithm", T.STRING, "https", "Peer host name checks."),
    ("ssl.enabled.protocols", T.LIST, "TLSv1.2,TLSv1.3", "The TLS versions taken."),
    ("ssl.protocol", T.STRING, "TLSv1.3", "The TLS protocol."),
    ("ssl.cipher.suites", T.LIST, "", "The cipher suites taken (empty: the defaults)."),
    ("sasl.enabled.mechanisms", T.LIST, "GSSAPI", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512."),
    ("sasl.jaas.config", T.PASSWORD, None, "JAAS login options (PLAIN's users)."),
    ("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI", "Brokers' own mechanism."),
    ("sasl.mechanism.controller.protocol", T.STRING, "GSSAPI", "Toward controllers."),
    ("security.inter.broker.protocol", T.STRING, "PLAINTEXT", "Brokers' own protocol."),
    ("connections.max.reauth.ms", T.LONG, "0", "Re-authentication interval (0: never)."),
    ("early.start.listeners", T.STRING, None, "Listeners started before catching up."),
    ("authorizer.class.name", T.STRING, "", "The StandardAuthorizer, enforcing the ACLs."),
    ("super.users", T.LIST, "", "Principals allowed everything (User:a;User:b)."),
    ("allow.everyone.if.no.acl.found", T.BOOLEAN, "false", "Allow what no ACL names."),
    (
        "auto.leader.rebalance.enable",
        T.BOOLEAN,
        "true",
        "The active controller moves leadership back to each partition's preferred replica.",
    ),
    (
        "leader.imbalance.check.interval.seconds",
        T.LONG,
        "300",
        "How often the active controller looks for partitions led by another replica.",
    ),
    (
        "leader.imbalance.per.broker.percentage",
        T.INT,
        "10",
        "Accepted for ZooKeeper-era configs; a KRaft controller, as Kafka's, does not use it.",
    ),
    (
        "inter.broker.protocol.version",
        T.STRING,
        None,
        "Kafka 3.x's, for a broker rolled from a ZooKeeper-mode cluster: it registers at "
        "that release's metadata.version only, so brokers of another release are refused.",
    ),
    (
        "zookeeper.metadata.migration.enable",
        T.BOOLEAN,
        "false",
        "A controller migrating a ZooKeeper-mode cluster: copies its metadata from "
        "zookeeper.connect, then writes every change back until the migration is finalized.",
    ),
    (
        "zookeeper.connect",
        T.STRING,
        None,
        "The ZooKeeper-mode cluster's ZooKeeper (host:port[,host:port][/chroot]), while "
        "migrating from it.",
    ),
    (
        "delegation.token.secret.key",
        T.PASSWORD,
        None,
        "The key delegation tokens are signed with, the same on every node (none: no tokens).",
    ),
    (
        "delegation.token.max.lifetime.ms",
        T.LONG,
        "604800000",
        "The longest a delegation token lives, however often it is renewed.",
    ),
    (
        "delegation.token.expiry.time.ms",
        T.LONG,
        "86400000",
        "How long a delegation token lives before it must be renewed.",
    ),
    (
        "delegation.token.expiry.check.interval.ms",
        T.LONG,
        "3600000",
        "How often the active controller removes expired delegation tokens.",
    ),
    (
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        T.INT,
        "3600000",
        "How often transactional ids idle past transactional.id.expiration.ms are removed.",
    ),
    (
        "producer.id.expiration.ms",
        T.INT,
        "86400000",
        "How long a partition keeps an idle producer's state (no open transaction).",
    ),
    (
        "producer.id.expiration.check.interval.ms",
        T.INT,
        "600000",
        "How often idle producers are looked for.",
    ),
)
_BROKER.extend(
    ConfigDef(n, t, d, doc, update_mode(n), sensitive=t == T.PASSWORD) for n, t, d, doc in _SECURITY
)

# the values each broker key takes beyond its type (Kafka's validators), checked by the
# node's parser and by AlterConfigs alike
_VALIDATORS: dict[str, Validator] = {
    "node.id": at_least(0),
    "num.partitions": at_least(1),
    "default.replication.factor": at_least(1),
    "log.segment.bytes": at_least(14),
    "log.roll.ms": at_least(1),
    "log.roll.hours": at_least(1),
    "log.retention.ms": at_least(-1),
    "log.retention.minutes": at_least(-1),
    "log.retention.hours": at_least(-1),
    "log.retention.bytes": at_least(-1),
    "log.retention.check.interval.ms": at_least(1),
    "log.index.interval.bytes": at_least(0),
    "log.flush.interval.messages": at_least(1),
    "min.insync.replicas": at_least(1),
    "transaction.state.log.num.partitions": at_least(1),
    "transaction.state.log.replication.factor": at_least(1),
    "transaction.state.log.min.isr": at_least(1),
    "transaction.state.log.segment.bytes": at_least(1024),
    "transaction.max.timeout.ms": at_least(1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": at_least(1),
    "transactional.id.expiration.ms": at_least(1),
    "transaction.remove.expired.transaction.cleanup.interval.ms": at_least(1),
    "producer.id.expiration.ms": at_least(1),
    "producer.id.expiration.check.interval.ms": at_least(1),
    "message.max.bytes": at_least(0),
    "socket.request.max.bytes": at_least(1),
    "controller.quorum.election.timeout.ms": at_least(1),
    "controller.quorum.fetch.timeout.ms": at_least(1),
    "controller.quorum.election.backoff.max.ms": at_least(1),
    "controller.quorum.request.timeout.ms": at_least(1),
    "controller.quorum.append.linger.ms": at_least(0),
    "broker.session.timeout.ms": at_least(1),
    "broker.heartbeat.interval.ms": at_least(1),
    "metadata.log.max.record.bytes.between.snapshots": at_least(1),
    "metadata.log.max.snapshot.interval.ms": at_least(0),
    "metadata.log.segment.bytes": at_least(1024),
    "log.cleaner.threads": at_least(1),
    "log.cleaner.dedupe.buffer.size": at_least(1 << 16),
    "log.cleaner.io.max.bytes.per.second": greater_than(0),
    "log.cleaner.backoff.ms": at_least(0),
    "log.cleaner.delete.retention.ms": at_least(0),
    "log.cleaner.min.compaction.lag.ms": at_least(0),
    "log.cleaner.max.compaction.lag.ms": at_least(1),
    "log.cleaner.min.cleanable.ratio": between(0, 1),
    "leader.imbalance.check.interval.seconds": at_least(1),
    "leader.imbalance.per.broker.percentage": at_least(0),
    "delegation.token.max.lifetime.ms": at_least(1),
    "delegation.token.expiry.time.ms": at_least(1),
    "delegation.token.expiry.check.interval.ms": at_least(1),
    "log.cleanup.policy": list_of("delete", "compact"),
}

_BROKER.extend(REPLICATION_CONFIGS)
_BROKER.extend(GROUP_COORDINATOR_CONFIGS)
BROKER_CONFIGS: Mapping[str, ConfigDef] = {
    c.name: replace(c, validator=_VALIDATORS.get(c.name, c.validator)) for c in _BROKER
}
assert set(_VALIDATORS) <= set(BROKER_CONFIGS), set(_VALIDATORS) - set(BROKER_CONFIGS)


def topic_config_type(key: str) -> ConfigType:
    d = TOPIC_CONFIGS.get(key)
    return d.type if d is not None else T.LONG


def topic_doc(key: str) -> str:
    d = TOPIC_CONFIGS.get(key)
    return d.doc if d is not None else ""
