"""How a config's value resolves, as DescribeConfigs reports it, in Kafka's precedence:
a topic's own value, then the broker synonyms set dynamically for this broker, then those
set as the cluster-wide dynamic default, then those in the broker's static file, then the
default; a topic config falls back to its broker synonyms (``retention.ms`` <-
``log.retention.ms`` <- ``log.retention.minutes`` <- ``log.retention.hours``)."""

from __future__ import annotations

from collections.abc import Mapping

from keeperless.metadata.config_catalog import BROKER_CONFIGS, ConfigSource, Resolved
from keeperless.metadata.topic_configs import TOPIC_CONFIG_DEFAULTS

__all__ = ["TOPIC_SYNONYMS", "resolve_broker", "resolve_topic"]

_HOUR_MS = 3_600_000

# topic config -> its broker synonyms, most specific first, with the factor from the
# broker key's unit to the topic key's (Kafka's LogConfig synonyms)
TOPIC_SYNONYMS: Mapping[str, tuple[tuple[str, int], ...]] = {
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "compression.type": (("compression.type", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "preallocate": (("log.preallocate", 1),),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", _HOUR_MS),
    ),
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR_MS)),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS)),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
}


def _scaled(value: str | None, factor: int) -> str | None:
    if value is None or factor == 1:
        return value
    try:
        n = int(value)
    except ValueError:
        return value
    return str(n * factor) if n >= 0 else str(n)


def _chain(
    keys: tuple[tuple[str, int], ...],
    per_broker: Mapping[str, str],
    cluster: Mapping[str, str],
    static: Mapping[str, str],
) -> list[tuple[str, str | None, ConfigSource, int]]:
    """(broker key, raw value, source, factor) wherever one of ``keys`` is set, in
    Kafka's precedence, then the first key's default."""
    out: list[tuple[str, str | None, ConfigSource, int]] = []
    levels = (
        (per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (cluster, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (static, ConfigSource.STATIC_BROKER_CONFIG),
    )
    for values, source in levels:
        for key, factor in keys:
            if key in values:
                out.append((key, values[key], source, factor))
    for key, factor in keys:
        d = BROKER_CONFIGS.get(key)
        if d is not None and d.default is not None:
            out.append((key, d.default, ConfigSource.DEFAULT_CONFIG, factor))
            break
    return out


def resolve_broker(
    key: str,
    per_broker: Mapping[str, str],
    cluster: Mapping[str, str],
    static: Mapping[str, str],
) -> Resolved:
    """A broker config's value and source on this broker, with its synonyms."""
    keys: tuple[tuple[str, int], ...] = ((key, 1),)
    for chained in TOPIC_SYNONYMS.values():  # log.retention.ms also from minutes/hours
        if chained[0][0] == key:
            keys = chained
    chain = _chain(keys, per_broker, cluster, static)
    found = tuple((k, v, src) for k, v, src, _ in chain)
    if not chain:
        return None, ConfigSource.DEFAULT_CONFIG, ()
    k, v, src, factor = chain[0]
    return (v if k == key else _scaled(v, factor)), src, found


def resolve_topic(
    key: str,
    topic: Mapping[str, str],
    per_broker: Mapping[str, str],
    cluster: Mapping[str, str],
    static: Mapping[str, str],
) -> Resolved:
    """A topic config's effective value and source, with its synonyms."""
    chain = _chain(TOPIC_SYNONYMS.get(key, ()), per_broker, cluster, static)
    synonyms = [(k, _scaled(v, f), s) for k, v, s, f in chain]
    if key in topic:
        synonyms.insert(0, (key, topic[key], ConfigSource.DYNAMIC_TOPIC_CONFIG))
    if not synonyms:
        return TOPIC_CONFIG_DEFAULTS.get(key), ConfigSource.DEFAULT_CONFIG, ()
    value, source = synonyms[0][1], synonyms[0][2]
    return value, source, tuple(synonyms)
