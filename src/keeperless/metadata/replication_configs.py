"""The broker configs of replication between brokers - the replica fetchers, the ISR,
the saved high watermarks and the replication throttles (Kafka's ReplicationConfigs and
QuotaConfig) - each defined once with its validator; part of the broker catalog
(config_catalog.py)."""

from __future__ import annotations

from keeperless.metadata.config_def import ConfigDef, Validator, at_least
from keeperless.metadata.config_def import ConfigType as T
from keeperless.metadata.update_modes import update_mode

__all__ = ["REPLICATION_CONFIGS"]

_LONG_MAX = str(2**63 - 1)


def _d(name: str, t: T, default: str, doc: str, validator: Validator) -> ConfigDef:
    return ConfigDef(name, t, default, doc, update_mode(name), validator=validator)


REPLICATION_CONFIGS: list[ConfigDef] = [
    _d(
        "replica.lag.time.max.ms",
        T.LONG,
        "30000",
        "A follower that has not caught up for this long leaves the ISR.",
        at_least(1),
    ),
    _d(
        "replica.fetch.wait.max.ms",
        T.INT,
        "500",
        "How long a follower's fetch waits for data.",
        at_least(0),
    ),
    _d(
        "replica.fetch.max.bytes",
        T.INT,
        "1048576",
        "Bytes a follower fetches per partition.",
        at_least(1),
    ),
    _d(
        "replica.fetch.response.max.bytes",
        T.INT,
        "10485760",
        "Bytes a follower fetches per request.",
        at_least(1),
    ),
    _d(
        "replica.fetch.backoff.ms",
        T.INT,
        "1000",
        "How long a follower waits after a failed fetch.",
        at_least(0),
    ),
    ConfigDef(
        "num.replica.fetchers",
        T.INT,
        "1",
        "Fetcher threads per source broker.",
        update_mode("num.replica.fetchers"),
    ),
    _d(
        "replica.high.watermark.checkpoint.interval.ms",
        T.LONG,
        "5000",
        "How often each partition's high watermark is saved to replication-offset-checkpoint "
        "(read back at start: a leader elected after a restart knows what was committed).",
        at_least(1),
    ),
    # the throttles: the rates set dynamically, per broker or as the cluster default;
    # the topics name the replicas they apply to
    _d(
        "leader.replication.throttled.rate",
        T.LONG,
        _LONG_MAX,
        "Bytes per second this broker sends, as a leader, to the followers of the replicas "
        "its topics' leader.replication.throttled.replicas name while they are not in the "
        "ISR.",
        at_least(0),
    ),
    _d(
        "follower.replication.throttled.rate",
        T.LONG,
        _LONG_MAX,
        "Bytes per second this broker fetches, as a follower not in the ISR, of the "
        "replicas its topics' follower.replication.throttled.replicas name.",
        at_least(0),
    ),
    _d(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        T.LONG,
        _LONG_MAX,
        "Bytes per second a replica moved between this broker's log directories is copied.",
        at_least(0),
    ),
    _d(
        "replication.quota.window.num",
        T.INT,
        "11",
        "The samples a replication throttle's rate is measured over.",
        at_least(1),
    ),
    _d(
        "replication.quota.window.size.seconds",
        T.INT,
        "1",
        "The length of one sample of a replication throttle's rate.",
        at_least(1),
    ),
]
