"""Group configs (KIP-848, KIP-932, KIP-1071): the keys Kafka 4.1 accepts on a GROUP
config resource, as ConfigDefs like every other key (config_def.py), each with the broker
config a group without its own value takes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from keeperless.metadata.config_def import (
    GROUP_SCOPE,
    ConfigDef,
    ConfigType,
    ConfigValueError,
    Validator,
    one_of,
)

__all__ = [
    "BROKER_LIMITS",
    "GROUP_BROKER_KEYS",
    "GROUP_CONFIGS",
    "GROUP_RESOURCE",
    "validate_group_config",
]

GROUP_RESOURCE = 32
_DURATION = re.compile(r"^by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$")


def _within(low: int, high: int) -> Validator:
    """Kafka's group limits (the broker's group.*.min/max.* defaults)."""

    def check(key: str, value: str) -> None:
        if not low <= int(value) <= high:
            raise ConfigValueError(
                f"Invalid value {value} for configuration {key}: must be between {low} "
                f"and {high} (the broker's group limits)"
            )

    return check


def _offset_reset(key: str, value: str) -> None:
    if value in ("latest", "earliest") or _DURATION.match(value):
        return
    raise ConfigValueError(
        f"Invalid value {value} for configuration {key}: must be latest, earliest or "
        "by_duration:<ISO 8601 duration>"
    )


def _i(name: str, default: int, low: int, high: int, doc: str) -> ConfigDef:
    return ConfigDef(name, ConfigType.INT, str(default), doc, GROUP_SCOPE,
                     validator=_within(low, high))  # fmt: skip


_DEFS = (
    _i("consumer.session.timeout.ms", 45000, 45000, 60000,
       "A member that misses heartbeats this long leaves the group."),
    _i("consumer.heartbeat.interval.ms", 5000, 5000, 15000,
       "How often the group's members heartbeat."),
    _i("share.session.timeout.ms", 45000, 45000, 60000, "A share group member's session timeout."),
    _i("share.heartbeat.interval.ms", 5000, 5000, 15000,
       "How often a share group's members heartbeat."),
    _i("share.record.lock.duration.ms", 30000, 15000, 60000,
       "How long a share group's delivery lock on a record lasts."),
    ConfigDef("share.auto.offset.reset", ConfigType.STRING, "latest",
              "Where a share group starts: latest, earliest, by_duration:<ISO 8601>.",
              GROUP_SCOPE, validator=_offset_reset),
    ConfigDef("share.isolation.level", ConfigType.STRING, "read_uncommitted",
              "Whether a share group reads transactional records uncommitted.", GROUP_SCOPE,
              validator=one_of("read_committed", "read_uncommitted")),
    _i("streams.session.timeout.ms", 45000, 45000, 60000,
       "A streams group member's session timeout."),
    _i("streams.heartbeat.interval.ms", 5000, 5000, 15000,
       "How often a streams group's members heartbeat."),
    _i("streams.num.standby.replicas", 0, 0, 2, "Standby replicas of a streams group's tasks."),
)  # fmt: skip
GROUP_CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in _DEFS}
# the broker config each group key takes its value from when the group has none
GROUP_BROKER_KEYS: Mapping[str, str] = {
    **{k: f"group.{k}" for k in GROUP_CONFIGS},
    "share.auto.offset.reset": "share.auto.offset.reset",
    "share.isolation.level": "share.isolation.level",
}


# group keys whose limits are the broker's own configs (Kafka's GroupConfig checks them
# against the controller's values): key -> (its lower, its upper limit's broker key)
BROKER_LIMITS: Mapping[str, tuple[str, str]] = {
    "share.record.lock.duration.ms": (
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
}


def validate_group_config(
    name: str, value: str | None, limits: Mapping[str, int] | None = None
) -> str | None:
    """None if ``name`` may be set to ``value`` (None: deleted); else why not, in Kafka's
    words. ``limits``: the broker configs that bound some keys (BROKER_LIMITS), else
    Kafka's defaults."""
    d = GROUP_CONFIGS.get(name)
    if d is None:
        return f"Unknown group config name: {name}"
    if value is None:
        return None
    try:
        if name in BROKER_LIMITS and limits is not None:
            replace(d, validator=None).validate(value)  # the type
            low_key, high_key = BROKER_LIMITS[name]
            _within(limits.get(low_key, 15000), limits.get(high_key, 60000))(name, value.strip())
        else:
            d.validate(value)
    except ConfigValueError as e:
        return str(e)
    return None
