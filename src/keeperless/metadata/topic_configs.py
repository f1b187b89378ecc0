"""Topic-level configs: the keys Kafka accepts on a topic, their defaults and validation."""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["TOPIC_CONFIG_DEFAULTS", "TopicConfigError", "validate_topic_configs"]


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
    "message.timestamp.after.max.ms": (_long(0), "9223372036854775807"),
}
TOPIC_CONFIG_DEFAULTS: Mapping[str, str] = {k: d for k, (_, d) in _TOPIC_CONFIGS.items()}


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
