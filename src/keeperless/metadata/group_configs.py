"""Group configs (KIP-848, KIP-932, KIP-1071): the keys Kafka 4.1 accepts on a GROUP
config resource, the broker config each one defaults to, and their validation."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "GROUP_CONFIGS",
    "GROUP_RESOURCE",
    "GroupConfigDef",
    "validate_group_config",
]

GROUP_RESOURCE = 32
_DURATION = re.compile(r"^by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$")


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: str  # "int" or "string"
    default: str
    broker_key: str  # the broker config a group without its own value takes
    low: int = 1  # ints: the range Kafka's broker defaults allow
    high: int = 2**31 - 1
    choices: tuple[str, ...] = ()
    doc: str = ""


def _i(name: str, default: int, broker_key: str, low: int, high: int, doc: str) -> GroupConfigDef:
    return GroupConfigDef(name, "int", str(default), broker_key, low, high, doc=doc)


# ranges: Kafka's group.*.min/max.* broker defaults
GROUP_CONFIGS: Mapping[str, GroupConfigDef] = {
    d.name: d
    for d in (
        _i("consumer.session.timeout.ms", 45000, "group.consumer.session.timeout.ms",
           45000, 60000, "A member that misses heartbeats this long leaves the group."),
        _i("consumer.heartbeat.interval.ms", 5000, "group.consumer.heartbeat.interval.ms",
           5000, 15000, "How often the group's members heartbeat."),
        _i("share.session.timeout.ms", 45000, "group.share.session.timeout.ms",
           45000, 60000, "A share group member's session timeout."),
        _i("share.heartbeat.interval.ms", 5000, "group.share.heartbeat.interval.ms",
           5000, 15000, "How often a share group's members heartbeat."),
        _i("share.record.lock.duration.ms", 30000, "group.share.record.lock.duration.ms",
           15000, 60000, "How long a share group's delivery lock on a record lasts."),
        GroupConfigDef("share.auto.offset.reset", "string", "latest",
                       "share.auto.offset.reset", choices=("latest", "earliest", "by_duration"),
                       doc="Where a share group starts: latest, earliest, by_duration:<ISO 8601>."),
        GroupConfigDef("share.isolation.level", "string", "read_uncommitted",
                       "share.isolation.level", choices=("read_committed", "read_uncommitted"),
                       doc="Whether a share group reads transactional records uncommitted."),
        _i("streams.session.timeout.ms", 45000, "group.streams.session.timeout.ms",
           45000, 60000, "A streams group member's session timeout."),
        _i("streams.heartbeat.interval.ms", 5000, "group.streams.heartbeat.interval.ms",
           5000, 15000, "How often a streams group's members heartbeat."),
        _i("streams.num.standby.replicas", 0, "group.streams.num.standby.replicas",
           0, 2, "Standby replicas of a streams group's tasks."),
    )
}  # fmt: skip


def validate_group_config(name: str, value: str | None) -> str | None:
    """None if ``name`` may be set to ``value`` (None: deleted); else why not, in Kafka's
    words."""
    d = GROUP_CONFIGS.get(name)
    if d is None:
        return f"Unknown group config name: {name}"
    if value is None:
        return None
    if d.type == "int":
        try:
            n = int(value)
        except ValueError:
            return f"Invalid value {value} for configuration {name}: Not a number of type INT"
        if not d.low <= n <= d.high:
            return (
                f"Invalid value {value} for configuration {name}: must be between {d.low} "
                f"and {d.high} (the broker's group limits)"
            )
        return None
    if name == "share.auto.offset.reset":
        if value in ("latest", "earliest") or _DURATION.match(value):
            return None
        return (
            f"Invalid value {value} for configuration {name}: must be latest, earliest or "
            "by_duration:<ISO 8601 duration>"
        )
    if value not in d.choices:
        return (
            f"Invalid value {value} for configuration {name}: String must be one of: "
            f"{', '.join(d.choices)}"
        )
    return None
