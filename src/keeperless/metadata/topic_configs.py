"""Topic-level configs: the keys Kafka accepts on a topic, their defaults and validation."""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = [
    "TOPIC_CONFIG_DEFAULTS",
    "TOPIC_CONFIG_DOCS",
    "TopicConfigError",
    "validate_topic_configs",
]


class TopicConfigError(ValueError):
    """A topic config key is unknown or its value is invalid."""


def _long(lo: int) -> Callable[[str, str], None]:
    def check(key: str, v: str) -> None:
        try:
            n = int(v)
        except ValueError:
            raise TopicConfigError(
                f"Invalid value {v} for configuration {key}: Not a number of type LONG"
            ) from None
        if n < lo:
            raise TopicConfigError(
                f"Invalid value {v} for configuration {key}: Value must be at least {lo}"
            )

    return check


def _choice(*options: str) -> Callable[[str, str], None]:
    def check(key: str, v: str) -> None:
        if v not in options:
            raise TopicConfigError(
                f"Invalid value {v} for configuration {key}: "
                f"String must be one of: {', '.join(options)}"
            )

    return check


def _list_of(*options: str) -> Callable[[str, str], None]:
    """A LIST config of these values; empty is a list too (Kafka stores it)."""

    def check(key: str, v: str) -> None:
        parts = [p.strip() for p in v.split(",") if p.strip()]
        if not all(p in options for p in parts):
            raise TopicConfigError(
                f"Invalid value {v} for configuration {key}: "
                f"String must be one of: {', '.join(options)}"
            )

    return check


def _bool(key: str, v: str) -> None:
    if v.lower() not in ("true", "false"):
        raise TopicConfigError(
            f"Invalid value {v} for configuration {key}: Expected value to be either true or false"
        )


# key -> (validator, Kafka default)
_TOPIC_CONFIGS: dict[str, tuple[Callable[[str, str], None], str]] = {
    "cleanup.policy": (_list_of("delete", "compact"), "delete"),
    "compression.type": (
        _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        "producer",
    ),
    "retention.ms": (_long(-1), "604800000"),
    "retention.bytes": (_long(-1), "-1"),
    "segment.bytes": (_long(14), "1073741824"),
    "segment.ms": (_long(1), "604800000"),
    "max.message.bytes": (_long(0), "1048588"),
    "min.insync.replicas": (_long(1), "1"),
    "message.timestamp.type": (_choice("CreateTime", "LogAppendTime"), "CreateTime"),
    "unclean.leader.election.enable": (_bool, "false"),
    "flush.messages": (_long(1), "9223372036854775807"),
    "flush.ms": (_long(0), "9223372036854775807"),
    "index.interval.bytes": (_long(0), "4096"),
    "delete.retention.ms": (_long(0), "86400000"),
    "min.compaction.lag.ms": (_long(0), "0"),
    "max.compaction.lag.ms": (_long(1), "9223372036854775807"),
    "min.cleanable.dirty.ratio": (lambda k, v: None, "0.5"),
    "segment.index.bytes": (_long(4), "10485760"),
    "segment.jitter.ms": (_long(0), "0"),
    "file.delete.delay.ms": (_long(0), "60000"),
    "preallocate": (_bool, "false"),
    "message.timestamp.before.max.ms": (_long(0), "9223372036854775807"),
    "message.timestamp.after.max.ms": (_long(0), "3600000"),
}
TOPIC_CONFIG_DEFAULTS: Mapping[str, str] = {k: d for k, (_, d) in _TOPIC_CONFIGS.items()}

TOPIC_CONFIG_DOCS: Mapping[str, str] = {
    "cleanup.policy": "What happens to old data: delete (by retention), compact (keep the last "
    "record of each key), or both.",
    "compression.type": "The compression of stored batches; producer keeps what the producer sent.",
    "retention.ms": "How long data is kept before its segments may be deleted (-1: forever).",
    "retention.bytes": "The most data a partition keeps before old segments are deleted "
    "(-1: no limit).",
    "segment.bytes": "The size at which the active segment is rolled.",
    "segment.ms": "The age at which the active segment is rolled, even if not full.",
    "max.message.bytes": "The largest record batch the topic accepts.",
    "min.insync.replicas": "In-sync replicas an acks=all write needs to succeed.",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime "
    "stamps records with the broker's time.",
    "unclean.leader.election.enable": "Allow a replica outside the ISR to lead when no ISR "
    "member is alive (acknowledged data may be lost).",
    "flush.messages": "Records written before the partition is flushed to disk.",
    "flush.ms": "Time before the partition is flushed to disk.",
    "index.interval.bytes": "Bytes between entries of the offset index.",
    "delete.retention.ms": "How long tombstones stay readable on a compacted topic.",
    "min.compaction.lag.ms": "The minimum age of a record before it may be compacted.",
    "max.compaction.lag.ms": "The maximum age of a record before it must be compacted.",
    "min.cleanable.dirty.ratio": "The share of uncompacted data above which the log is cleaned.",
    "segment.index.bytes": "The largest size of a segment's offset index.",
    "segment.jitter.ms": "A random amount subtracted from segment.ms so segments do not all "
    "roll at once.",
    "file.delete.delay.ms": "How long a deleted segment's files stay before removal.",
    "preallocate": "Preallocate the file of a new segment.",
    "message.timestamp.before.max.ms": "How far in the past a record's timestamp may be.",
    "message.timestamp.after.max.ms": "How far in the future a record's timestamp may be.",
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in configs.items():
        spec = _TOPIC_CONFIGS.get(key)
        if spec is None:
            raise TopicConfigError(f"Unknown topic config name: {key}")
        if value is None:
            raise TopicConfigError(f"Null value not supported for topic configs: {key}")
        spec[0](key, value)
        out[key] = value
    return out
