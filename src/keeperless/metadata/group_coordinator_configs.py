"""The broker configs of groups - __consumer_offsets, the classic, consumer-protocol
(KIP-848) and share (KIP-932) groups' timeouts and limits (Kafka's GroupCoordinatorConfig
and ShareGroupConfig) - each defined once with its validator; part of the broker catalog
(config_catalog.py)."""

from __future__ import annotations

from keeperless.metadata.config_def import ConfigDef, Validator, at_least
from keeperless.metadata.config_def import ConfigType as T
from keeperless.metadata.update_modes import update_mode

__all__ = ["GROUP_COORDINATOR_CONFIGS"]


def _d(name: str, t: T, default: str, doc: str, validator: Validator | None) -> ConfigDef:
    return ConfigDef(name, t, default, doc, update_mode(name), validator=validator)


GROUP_COORDINATOR_CONFIGS: list[ConfigDef] = [
    _d(
        "offsets.topic.replication.factor",
        T.SHORT,
        "3",
        "The replication factor of __consumer_offsets.",
        at_least(1),
    ),
    _d(
        "offsets.topic.num.partitions",
        T.INT,
        "50",
        "The partitions of __consumer_offsets.",
        at_least(1),
    ),
    _d(
        "offsets.commit.timeout.ms",
        T.INT,
        "5000",
        "How long an offset commit waits for the in-sync replicas.",
        at_least(1),
    ),
    _d(
        "group.initial.rebalance.delay.ms",
        T.INT,
        "3000",
        "How long a new group waits for more members before its first rebalance.",
        at_least(0),
    ),
    _d(
        "group.min.session.timeout.ms",
        T.INT,
        "6000",
        "The shortest session timeout a member may ask for.",
        at_least(0),
    ),
    _d(
        "group.max.session.timeout.ms",
        T.INT,
        "1800000",
        "The longest session timeout a member may ask for.",
        at_least(0),
    ),
    _d(
        "group.consumer.heartbeat.interval.ms",
        T.INT,
        "5000",
        "How often members of a consumer-protocol group heartbeat (KIP-848).",
        at_least(1),
    ),
    _d(
        "group.consumer.session.timeout.ms",
        T.INT,
        "45000",
        "A consumer-protocol member that misses heartbeats this long leaves the group.",
        at_least(1),
    ),
    _d(
        "group.consumer.assignors",
        T.LIST,
        "uniform,range",
        "The server assignors of consumer-protocol groups, the first the default.",
        None,
    ),
    _d(
        "group.share.heartbeat.interval.ms",
        T.INT,
        "5000",
        "How often members of a share group heartbeat (KIP-932).",
        at_least(1),
    ),
    _d(
        "group.share.session.timeout.ms",
        T.INT,
        "45000",
        "A share group member that misses heartbeats this long leaves the group.",
        at_least(1),
    ),
    _d(
        "group.share.record.lock.duration.ms",
        T.INT,
        "30000",
        "How long a share group member holds a record it was delivered before it is "
        "delivered again.",
        at_least(1000),
    ),
    _d(
        "group.share.min.record.lock.duration.ms",
        T.INT,
        "15000",
        "The shortest acquisition lock a share group may set (share.record.lock.duration.ms).",
        at_least(1000),
    ),
    _d(
        "group.share.max.record.lock.duration.ms",
        T.INT,
        "60000",
        "The longest acquisition lock a share group may set (share.record.lock.duration.ms).",
        at_least(1000),
    ),
    _d(
        "group.share.delivery.count.limit",
        T.INT,
        "5",
        "How often a record is delivered to a share group before it is archived.",
        at_least(2),
    ),
    _d(
        "group.share.partition.max.record.locks",
        T.INT,
        "2000",
        "The most records of one partition a share group has in flight at a time.",
        at_least(100),
    ),
    _d(
        "share.coordinator.state.topic.num.partitions",
        T.INT,
        "50",
        "The partitions of __share_group_state (the share coordinator's topic).",
        at_least(1),
    ),
    _d(
        "share.coordinator.state.topic.replication.factor",
        T.SHORT,
        "3",
        "The replication factor of __share_group_state.",
        at_least(1),
    ),
    _d(
        "share.coordinator.state.topic.min.isr",
        T.SHORT,
        "2",
        "The min.insync.replicas of __share_group_state.",
        at_least(1),
    ),
    _d(
        "share.coordinator.state.topic.segment.bytes",
        T.INT,
        "104857600",
        "The segment size of __share_group_state.",
        at_least(1),
    ),
    _d(
        "share.coordinator.snapshot.update.records.per.snapshot",
        T.INT,
        "500",
        "How many ShareUpdate records of a share-partition are written before the next "
        "ShareSnapshot.",
        at_least(0),
    ),
    _d(
        "share.coordinator.state.topic.prune.interval.ms",
        T.LONG,
        "300000",
        "How often the share coordinator deletes the records of __share_group_state that "
        "no state needs any more (those before each share-partition's latest snapshot).",
        at_least(1),
    ),
    _d(
        "share.coordinator.cold.partition.snapshot.interval.ms",
        T.INT,
        "300000",
        "How often the share coordinator writes a fresh snapshot of share-partitions whose "
        "latest snapshot has records after it, so that idle ones do not hold back pruning.",
        at_least(1),
    ),
    _d(
        "share.coordinator.write.timeout.ms",
        T.INT,
        "5000",
        "How long a write of share-group state waits for the in-sync replicas.",
        at_least(1),
    ),
]
