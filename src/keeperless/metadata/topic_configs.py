"""Topic-level configs: the keys Kafka accepts on a topic, each defined once (type,
default, validator, documentation; metadata/config_def.py)."""

from __future__ import annotations

from collections.abc import Mapping

from keeperless.metadata.config_def import (
    TOPIC_SCOPE,
    ConfigDef,
    ConfigValueError,
    at_least,
    between,
    list_of,
    one_of,
    throttled_replicas,
)
from keeperless.metadata.config_def import ConfigType as T

__all__ = [
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_DEFAULTS",
    "TopicConfigError",
    "validate_topic_configs",
]


class TopicConfigError(ConfigValueError):
    """A topic config key is unknown or its value is invalid."""


_TOPIC: list[ConfigDef] = [
    ConfigDef(
        "cleanup.policy",
        T.LIST,
        "delete",
        (
            "What happens to old data: delete (by retention), compact (keep the last record "
            "of each key), or both."
        ),
        TOPIC_SCOPE,
        validator=list_of("delete", "compact"),
    ),
    ConfigDef(
        "compression.type",
        T.STRING,
        "producer",
        "The compression of stored batches; producer keeps what the producer sent.",
        TOPIC_SCOPE,
        validator=one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    ConfigDef(
        "retention.ms",
        T.LONG,
        "604800000",
        "How long data is kept before its segments may be deleted (-1: forever).",
        TOPIC_SCOPE,
        validator=at_least(-1),
    ),
    ConfigDef(
        "retention.bytes",
        T.LONG,
        "-1",
        "The most data a partition keeps before old segments are deleted (-1: no limit).",
        TOPIC_SCOPE,
        validator=at_least(-1),
    ),
    ConfigDef(
        "segment.bytes",
        T.INT,
        "1073741824",
        "The size at which the active segment is rolled.",
        TOPIC_SCOPE,
        validator=at_least(14),
    ),
    ConfigDef(
        "segment.ms",
        T.LONG,
        "604800000",
        "The age at which the active segment is rolled, even if not full.",
        TOPIC_SCOPE,
        validator=at_least(1),
    ),
    ConfigDef(
        "max.message.bytes",
        T.INT,
        "1048588",
        "The largest record batch the topic accepts.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "min.insync.replicas",
        T.INT,
        "1",
        "In-sync replicas an acks=all write needs to succeed.",
        TOPIC_SCOPE,
        validator=at_least(1),
    ),
    ConfigDef(
        "message.timestamp.type",
        T.STRING,
        "CreateTime",
        (
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps records with "
            "the broker's time."
        ),
        TOPIC_SCOPE,
        validator=one_of("CreateTime", "LogAppendTime"),
    ),
    ConfigDef(
        "unclean.leader.election.enable",
        T.BOOLEAN,
        "false",
        (
            "Allow a replica outside the ISR to lead when no ISR member is alive "
            "(acknowledged data may be lost)."
        ),
        TOPIC_SCOPE,
        validator=None,
    ),
    ConfigDef(
        "flush.messages",
        T.LONG,
        "9223372036854775807",
        "Records written before the partition is flushed to disk.",
        TOPIC_SCOPE,
        validator=at_least(1),
    ),
    ConfigDef(
        "flush.ms",
        T.LONG,
        "9223372036854775807",
        "Time before the partition is flushed to disk.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "index.interval.bytes",
        T.INT,
        "4096",
        "Bytes between entries of the offset index.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "delete.retention.ms",
        T.LONG,
        "86400000",
        "How long tombstones stay readable on a compacted topic.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "min.compaction.lag.ms",
        T.LONG,
        "0",
        "The minimum age of a record before it may be compacted.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "max.compaction.lag.ms",
        T.LONG,
        "9223372036854775807",
        "The maximum age of a record before it must be compacted.",
        TOPIC_SCOPE,
        validator=at_least(1),
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        T.DOUBLE,
        "0.5",
        "The share of uncompacted data above which the log is cleaned.",
        TOPIC_SCOPE,
        validator=between(0, 1),
    ),
    ConfigDef(
        "segment.index.bytes",
        T.INT,
        "10485760",
        "The largest size of a segment's offset index.",
        TOPIC_SCOPE,
        validator=at_least(4),
    ),
    ConfigDef(
        "segment.jitter.ms",
        T.LONG,
        "0",
        "A random amount subtracted from segment.ms so segments do not all roll at once.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "file.delete.delay.ms",
        T.LONG,
        "60000",
        "How long a deleted segment's files stay before removal.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "preallocate",
        T.BOOLEAN,
        "false",
        "Preallocate the file of a new segment.",
        TOPIC_SCOPE,
        validator=None,
    ),
    ConfigDef(
        "message.timestamp.before.max.ms",
        T.LONG,
        "9223372036854775807",
        "How far in the past a record's timestamp may be.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "message.timestamp.after.max.ms",
        T.LONG,
        "3600000",
        "How far in the future a record's timestamp may be.",
        TOPIC_SCOPE,
        validator=at_least(0),
    ),
    ConfigDef(
        "leader.replication.throttled.replicas",
        T.LIST,
        "",
        "The replicas whose replication is throttled on the leader side, as "
        "partition:broker pairs (or * for all): while a follower not in the ISR catches "
        "up, the leader sends it no more than leader.replication.throttled.rate.",
        TOPIC_SCOPE,
        validator=throttled_replicas,
    ),
    ConfigDef(
        "follower.replication.throttled.replicas",
        T.LIST,
        "",
        "The replicas whose replication is throttled on the follower side, as "
        "partition:broker pairs (or * for all): a follower not in the ISR fetches them no "
        "faster than follower.replication.throttled.rate.",
        TOPIC_SCOPE,
        validator=throttled_replicas,
    ),
]
TOPIC_CONFIGS: Mapping[str, ConfigDef] = {c.name: c for c in _TOPIC}
TOPIC_CONFIG_DEFAULTS: Mapping[str, str | None] = {c.name: c.default for c in _TOPIC}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in configs.items():
        spec = TOPIC_CONFIGS.get(key)
        if spec is None:
            raise TopicConfigError(f"Unknown topic config name: {key}")
        if value is None:
            raise TopicConfigError(f"Null value not supported for topic configs: {key}")
        try:
            spec.validate(value)
        except ConfigValueError as e:
            raise TopicConfigError(str(e)) from None
        out[key] = value
    return out
