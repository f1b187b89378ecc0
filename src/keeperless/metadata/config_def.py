"""One config key's definition, as Kafka's ConfigDef holds it: name, type, default,
documentation, validator, importance, whether and where it may change while running
(broker keys: read-only, per-broker, cluster-wide; topic and group keys: per topic or
group), and whether it is sensitive.
The node's parser (server/config.py), AlterConfigs and IncrementalAlterConfigs on the
controller and DescribeConfigs all read the same definitions (config_catalog.py for
broker keys, topic_configs.py for topic keys), and refuse a bad value with the same
words, Kafka's: ``Invalid value X for configuration K: <reason>``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from keeperless.metadata.config_importance import importance
from keeperless.metadata.update_modes import READ_ONLY

__all__ = [
    "GROUP_SCOPE",
    "TOPIC_SCOPE",
    "ConfigDef",
    "ConfigType",
    "ConfigValueError",
    "Validator",
    "at_least",
    "between",
    "greater_than",
    "list_of",
    "one_of",
    "throttled_replicas",
]

TOPIC_SCOPE = "topic"  # a topic config: set per topic, at any time
GROUP_SCOPE = "group"  # a group config (KIP-848): set per group, at any time


class ConfigType(IntEnum):
    """DescribeConfigs' config_type (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigValueError(ValueError):
    """A config value its definition refuses (the message names the key and why)."""


Validator = Callable[[str, str], None]  # (key, value): raises ConfigValueError


def _invalid(key: str, value: str, reason: str) -> ConfigValueError:
    return ConfigValueError(f"Invalid value {value} for configuration {key}: {reason}")


def _number(key: str, value: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise _invalid(key, value, "Not a number") from None


def at_least(lo: float) -> Validator:
    """Kafka's Range.atLeast."""

    def check(key: str, value: str) -> None:
        if _number(key, value) < lo:
            shown = int(lo) if float(lo).is_integer() else lo
            raise _invalid(key, value, f"Value must be at least {shown}")

    return check


def greater_than(lo: float) -> Validator:
    def check(key: str, value: str) -> None:
        if _number(key, value) <= lo:
            raise _invalid(key, value, f"Value must be greater than {lo}")

    return check


def between(lo: float, hi: float) -> Validator:
    """Kafka's Range.between."""

    def check(key: str, value: str) -> None:
        n = _number(key, value)
        if n < lo:
            raise _invalid(key, value, f"Value must be at least {lo}")
        if n > hi:
            raise _invalid(key, value, f"Value must be no more than {hi}")

    return check


def one_of(*options: str) -> Validator:
    """Kafka's ValidString.in."""

    def check(key: str, value: str) -> None:
        if value not in options:
            raise _invalid(key, value, f"String must be one of: {', '.join(options)}")

    return check


def list_of(*options: str) -> Validator:
    """Kafka's ValidList.in: a LIST of these values (empty is a list too)."""

    def check(key: str, value: str) -> None:
        if not all(p.strip() in options for p in value.split(",") if p.strip()):
            raise _invalid(key, value, f"String must be one of: {', '.join(options)}")

    return check


_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def throttled_replicas(key: str, value: str) -> None:
    """Kafka's ThrottledReplicaListValidator: ``*``, or partition:broker pairs."""
    v = value.strip()
    if v == "*" or all(_REPLICA.fullmatch(p.strip()) for p in v.split(",") if p.strip()):
        return
    raise _invalid(
        key,
        value,
        f"{key} must be the literal '*' or a list of replicas in the "
        "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


_INTEGRAL = {ConfigType.INT: "INT", ConfigType.SHORT: "SHORT", ConfigType.LONG: "LONG"}


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    doc: str
    scope: str = READ_ONLY
    sensitive: bool = False
    validator: Validator | None = None

    @property
    def importance(self) -> str:
        """Kafka's Importance (high, medium, low), from config_importance's table."""
        return importance(self.name, topic=self.scope in (TOPIC_SCOPE, GROUP_SCOPE))

    def validate(self, value: str) -> None:
        """Refuse a value of the wrong type, or one the key's validator refuses."""
        v = value.strip()
        if self.type in _INTEGRAL:
            try:
                int(v)
            except ValueError:
                raise _invalid(
                    self.name, value, f"Not a number of type {_INTEGRAL[self.type]}"
                ) from None
        elif self.type == ConfigType.DOUBLE:
            try:
                float(v)
            except ValueError:
                raise _invalid(self.name, value, "Not a number of type DOUBLE") from None
        elif self.type == ConfigType.BOOLEAN and v.lower() not in ("true", "false"):
            raise _invalid(self.name, value, "Expected value to be either true or false")
        if self.validator is not None:
            self.validator(self.name, v)
