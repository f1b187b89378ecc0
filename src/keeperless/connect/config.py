"""The worker's configuration: Kafka Connect's distributed-worker keys (``WorkerConfig`` and
``DistributedConfig``), each defined once, with Kafka's defaults and its error words."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from keeperless._properties import PropertiesError, parse_properties

__all__ = ["ConfigException", "WorkerConfig", "load_worker_config"]


class ConfigException(ValueError):
    """Kafka's ConfigException: a worker or connector setting that cannot be used."""


_NO_DEFAULT = object()


@dataclass(frozen=True, slots=True)
class _Key:
    name: str
    kind: Callable[[str, str], Any]
    default: Any = _NO_DEFAULT


def _string(name: str, raw: str) -> str:
    return raw.strip()


def _int(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigException(
            f"Invalid value {raw} for configuration {name}: Not a number of type INT"
        ) from None


def _partitions(name: str, raw: str) -> int:
    value = _int(name, raw)
    if value < 1:
        raise ConfigException(
            f"Invalid value {value} for configuration {name}: "
            "Value must be a positive integer (Kafka's PARTITIONS_VALIDATOR)"
        )
    return value


def _replication(name: str, raw: str) -> int:
    value = _int(name, raw)
    if value < 1 and value != -1:
        raise ConfigException(
            f"Invalid value {value} for configuration {name}: Replication factor must be "
            "positive, or -1 to use the broker's default"
        )
    return value


def _boolean(name: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise ConfigException(
            f"Invalid value {raw} for configuration {name}: Expected value to be either true or false"  # noqa: E501
        )
    return v == "true"


def _eos(name: str, raw: str) -> str:
    v = raw.strip().lower()
    if v not in ("disabled", "preparing", "enabled"):
        raise ConfigException(
            f"Invalid value {raw} for configuration {name}: "
            "String must be one of (case insensitive): DISABLED, ENABLED, PREPARING"
        )
    return v


def _list(name: str, raw: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in raw.split(",") if p.strip())


_KEYS = (
    _Key("bootstrap.servers", _string, "localhost:9092"),
    _Key("group.id", _string),
    _Key("config.storage.topic", _string),
    _Key("offset.storage.topic", _string),
    _Key("status.storage.topic", _string),
    _Key("config.storage.replication.factor", _replication, 3),
    _Key("offset.storage.replication.factor", _replication, 3),
    _Key("offset.storage.partitions", _partitions, 25),
    _Key("status.storage.replication.factor", _replication, 3),
    _Key("status.storage.partitions", _partitions, 5),
    _Key("key.converter", _string),
    _Key("value.converter", _string),
    _Key("header.converter", _string, "org.apache.kafka.connect.storage.SimpleHeaderConverter"),
    _Key("listeners", _list, ("http://:8083",)),
    _Key("rest.advertised.host.name", _string, ""),
    _Key("rest.advertised.port", _int, 0),
    _Key("rest.advertised.listener", _string, ""),
    _Key("session.timeout.ms", _int, 10_000),
    _Key("heartbeat.interval.ms", _int, 3_000),
    _Key("rebalance.timeout.ms", _int, 60_000),
    _Key("offset.flush.interval.ms", _int, 60_000),
    _Key("offset.flush.timeout.ms", _int, 5_000),
    _Key("task.shutdown.graceful.timeout.ms", _int, 5_000),
    _Key("exactly.once.source.support", _eos, "disabled"),
    _Key("topic.creation.enable", _boolean, True),
    _Key("topic.tracking.enable", _boolean, True),
    _Key("topic.tracking.allow.reset", _boolean, True),
    _Key("client.id", _string, ""),
    _Key("plugin.path", _string, ""),
)
# client settings the worker passes on to its producers, consumers and admin client
_CLIENT_PREFIXES = ("security.", "ssl.", "sasl.")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """A distributed worker's settings, parsed and checked."""

    values: Mapping[str, Any]
    raw: Mapping[str, str]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def group_id(self) -> str:
        return str(self.values["group.id"])

    @property
    def exactly_once(self) -> bool:
        return bool(self.values["exactly.once.source.support"] == "enabled")

    def client_config(self) -> dict[str, str]:
        """What every Kafka client of this worker is configured with (librdkafka's keys)."""
        from keeperless.tools.rdkafka import librdkafka_config

        sec = {k: v for k, v in self.raw.items() if k.startswith(_CLIENT_PREFIXES)}
        conf = librdkafka_config(sec)
        conf["bootstrap.servers"] = self.values["bootstrap.servers"]
        return conf

    def prefixed(self, prefix: str) -> dict[str, str]:
        """Kafka Connect's ``producer.*`` / ``consumer.*`` worker settings: passed to the
        producers of source tasks / consumers of sink tasks, without the prefix."""
        return {k[len(prefix) :]: v for k, v in self.raw.items() if k.startswith(prefix)}

    def converter_config(self, which: str) -> dict[str, str]:
        """``key.converter.*`` / ``value.converter.*`` settings, without the prefix."""
        prefix = f"{which}."
        return {k[len(prefix) :]: v for k, v in self.raw.items() if k.startswith(prefix)}

    def rest_listener(self) -> tuple[str, str, int]:
        """(scheme, host, port) of the first listener; Kafka's default ``http://:8083``."""
        first = self.values["listeners"][0]
        parts = urlsplit(first)
        if parts.scheme not in ("http", "https") or parts.port is None:
            raise ConfigException(
                f"Invalid value {first} for configuration listeners: "
                "expected a URL such as http://:8083 or http://0.0.0.0:8083"
            )
        return parts.scheme, parts.hostname or "", parts.port

    def advertised_url(self, bound_port: int) -> str:
        scheme, host, _ = self.rest_listener()
        scheme = self.values["rest.advertised.listener"] or scheme
        host = self.values["rest.advertised.host.name"] or host or "127.0.0.1"
        if host == "0.0.0.0":
            host = "127.0.0.1"
        port = self.values["rest.advertised.port"] or bound_port
        return f"{scheme}://{host}:{port}/"


def worker_config(raw: Mapping[str, str]) -> WorkerConfig:
    values: dict[str, Any] = {}
    for key in _KEYS:
        if key.name in raw:
            values[key.name] = key.kind(key.name, raw[key.name])
        elif key.default is _NO_DEFAULT:
            raise ConfigException(
                f'Missing required configuration "{key.name}" which has no default value.'
            )
        else:
            values[key.name] = key.default
    for name in ("heartbeat.interval.ms", "session.timeout.ms", "rebalance.timeout.ms"):
        if values[name] <= 0:
            raise ConfigException(f"Invalid value {values[name]} for configuration {name}")
    return WorkerConfig(values, dict(raw))


def load_worker_config(path: str | Path, overrides: Mapping[str, str] = ()) -> WorkerConfig:  # type: ignore[assignment]
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigException(f"cannot read {path}: {e.strerror}") from None
    try:
        raw = parse_properties(text, str(path))
    except PropertiesError as e:
        raise ConfigException(str(e)) from None
    raw.update(dict(overrides))
    return worker_config(raw)
