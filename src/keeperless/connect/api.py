"""What a connector is made of (Kafka Connect's ``connect-api``, in Python): a
``Connector`` that validates its configuration and splits the work into task
configurations, and ``SourceTask`` / ``SinkTask`` classes that do the work.

A source task's ``poll()`` returns records; the worker writes them and, once Kafka has
acknowledged them, stores their source offsets and calls ``commit()`` (where a CDC task
tells its database how far it may discard its log). A sink task's ``put()`` receives
records; ``flush()`` is called before the consumer's offsets are committed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from keeperless.connect.data import SinkRecord, SourceRecord

__all__ = [
    "ConfigDef",
    "ConfigKey",
    "Connector",
    "ConnectorContext",
    "SinkTask",
    "SourceTask",
    "TaskContext",
]


class ConnectorError(Exception):
    """A connector or task cannot go on; its status becomes FAILED with this message."""


def at_least_one(value: str) -> str | None:
    """A ConfigKey check: an integer of 1 or more (Kafka's ``atLeast(1)``)."""
    try:
        return None if int(value) >= 1 else "Value must be at least 1"
    except ValueError:
        return "Not a number of type INT"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One setting of a connector (Kafka's ``ConfigDef.ConfigKey``)."""

    name: str
    type: str = "STRING"  # STRING, INT, LONG, BOOLEAN, LIST, PASSWORD, CLASS
    default: str | None = None
    required: bool = False
    importance: str = "MEDIUM"
    documentation: str = ""
    group: str | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[str], str | None] | None = None  # an error message, or None

    def definition(self, order: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "default_value": self.default,
            "importance": self.importance,
            "documentation": self.documentation,
            "group": self.group,
            "width": "NONE",
            "display_name": self.name,
            "dependents": [],
            "order": order,
        }

    def errors(self, value: str | None) -> list[str]:
        if value is None:
            if self.required:
                return [f'Missing required configuration "{self.name}" which has no default value.']
            return []
        if self.type in ("INT", "LONG", "SHORT"):
            try:
                int(value)
            except ValueError:
                return [
                    f"Invalid value {value} for configuration {self.name}: Not a number of type {self.type}"  # noqa: E501
                ]
        if self.type == "BOOLEAN" and value.strip().lower() not in ("true", "false"):
            return [
                f"Invalid value {value} for configuration {self.name}: Expected value to be either true or false"  # noqa: E501
            ]
        if self.choices and value.strip().lower() not in {c.lower() for c in self.choices}:
            return [
                f"Invalid value {value} for configuration {self.name}: String must be one of: {', '.join(self.choices)}"  # noqa: E501
            ]
        if self.check is not None and (msg := self.check(value)) is not None:
            return [f"Invalid value {value} for configuration {self.name}: {msg}"]
        return []


@dataclass(frozen=True, slots=True)
class ConfigDef:
    keys: tuple[ConfigKey, ...] = ()

    def __add__(self, other: ConfigDef) -> ConfigDef:
        return ConfigDef(self.keys + other.keys)

    def groups(self) -> list[str]:
        out: list[str] = []
        for k in self.keys:
            if k.group and k.group not in out:
                out.append(k.group)
        return out

    def validate(self, config: Mapping[str, str]) -> list[dict[str, Any]]:
        """Kafka's validate response entries: ``{"definition", "value"}`` per key."""
        out = []
        for order, key in enumerate(self.keys, 1):
            value = config.get(key.name, key.default)
            shown = "[hidden]" if key.type == "PASSWORD" and value is not None else value
            out.append(
                {
                    "definition": key.definition(order),
                    "value": {
                        "name": key.name,
                        "value": shown,
                        "recommended_values": list(key.choices),
                        "errors": key.errors(value),
                        "visible": True,
                    },
                }
            )
        return out

    def parse(self, config: Mapping[str, str]) -> dict[str, str | None]:
        errors = [e for entry in self.validate(config) for e in entry["value"]["errors"]]
        if errors:
            raise ConnectorError("; ".join(errors))
        return {k.name: config.get(k.name, k.default) for k in self.keys}


class ConnectorContext:
    """How a running connector reaches its worker."""

    def __init__(self, reconfigure: Callable[[], None], fail: Callable[[BaseException], None]):
        self._reconfigure = reconfigure
        self._fail = fail

    def request_task_reconfiguration(self) -> None:
        self._reconfigure()

    def raise_error(self, error: BaseException) -> None:
        self._fail(error)


@dataclass(slots=True)
class TaskContext:
    """A task's view of its worker: the offsets stored for its source partitions (source
    tasks) and its name."""

    connector: str
    task: int
    offsets: Callable[[Iterable[Mapping[str, Any]]], dict[str, dict[str, Any] | None]] = field(
        default=lambda parts: {}
    )

    def offset(self, partition: Mapping[str, Any]) -> dict[str, Any] | None:
        found = self.offsets([partition])
        return next(iter(found.values()), None) if found else None


class SourceTask:
    def start(self, props: Mapping[str, str], context: TaskContext) -> None:
        raise NotImplementedError

    def poll(self) -> list[SourceRecord] | None:
        """Records ready to write (wait a little for them; None or [] when there are none)."""
        raise NotImplementedError

    def commit(self) -> None:
        """The offsets of every record returned so far are stored."""

    def stop(self) -> None:
        pass


class SinkTask:
    def start(self, props: Mapping[str, str], context: TaskContext) -> None:
        raise NotImplementedError

    def put(self, records: list[SinkRecord]) -> None:
        raise NotImplementedError

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Make every record ``put`` so far durable; the consumer commits after it."""

    def stop(self) -> None:
        pass


class Connector:
    """A connector plugin. ``kind`` is "source" or "sink"; Kafka's class name (and its
    aliases: the simple name, with or without "Connector") selects it."""

    kind: ClassVar[str] = "source"
    class_name: ClassVar[str] = ""
    version: ClassVar[str] = "0.1.0"
    task_class: ClassVar[type[SourceTask] | type[SinkTask]]

    def __init__(self) -> None:
        self.context: ConnectorContext | None = None

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef()

    @classmethod
    def validate(cls, config: Mapping[str, str]) -> list[dict[str, Any]]:
        return cls.config_def().validate(config)

    def start(self, props: Mapping[str, str], context: ConnectorContext) -> None:
        self.context = context
        self.props = dict(props)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]

    def stop(self) -> None:
        pass

    # KIP-875: connectors that keep offsets of their own may refuse an alteration
    def alter_offsets(self, config: Mapping[str, str], offsets: Mapping[str, Any]) -> bool:
        return False
