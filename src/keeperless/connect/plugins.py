"""The connector plugins a worker knows, by Kafka's class names and aliases, and the
settings every connector has (Kafka's ``ConnectorConfig``, ``SinkConnectorConfig``,
``SourceConnectorConfig``), validated as Kafka's ``AbstractHerder.validateConnectorConfig``
does: one list of errors, answered 400 with Kafka's sentence when not empty."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keeperless.connect.api import ConfigDef, ConfigKey, Connector, at_least_one
from keeperless.connect.data import CONVERTERS

__all__ = ["PluginError", "connector_class", "plugins", "validate"]


class PluginError(ValueError):
    """No plugin of that name (HTTP 400 / 404, as Kafka answers)."""


def _registry() -> dict[str, type[Connector]]:
    from keeperless.connect.connectors.file import (
        FileStreamSinkConnector,
        FileStreamSourceConnector,
    )
    from keeperless.connect.connectors.parquet import ParquetSinkConnector
    from keeperless.connect.connectors.postgres import PostgresConnector

    out: dict[str, type[Connector]] = {}
    for cls in (FileStreamSourceConnector, FileStreamSinkConnector, PostgresConnector,
                ParquetSinkConnector):  # fmt: skip
        out[cls.class_name] = cls
    return out


_PLUGINS: dict[str, type[Connector]] | None = None


def plugins() -> dict[str, type[Connector]]:
    global _PLUGINS
    if _PLUGINS is None:
        _PLUGINS = _registry()
    return _PLUGINS


def connector_class(name: str) -> type[Connector]:
    """Kafka's plugin aliases: the class name, its simple name, or the simple name
    without "Connector"."""
    name = name.strip()
    for full, cls in plugins().items():
        simple = full.rsplit(".", 1)[-1]
        if name in (full, simple) or (simple.endswith("Connector") and name == simple[:-9]):
            return cls
    available = ", ".join(
        f"PluginDesc{{klass=class {c}, name='{c}', version='{cls.version}', type={cls.kind}}}"
        for c, cls in sorted(plugins().items())
    )
    raise PluginError(
        f"Failed to find any class that implements Connector and which name matches {name}, "
        f"available connectors are: {available}"
    )


def _converter_check(value: str) -> str | None:
    if value.strip() not in CONVERTERS:
        return f"Class {value} could not be found."
    return None


_COMMON = (
    ConfigKey(
        "name",
        required=True,
        importance="HIGH",
        group="Common",
        documentation="Globally unique name to use for this connector.",
    ),
    ConfigKey(
        "connector.class",
        required=True,
        importance="HIGH",
        group="Common",
        documentation="Name or alias of the class for this connector.",
    ),
    ConfigKey(
        "tasks.max",
        "INT",
        "1",
        importance="HIGH",
        group="Common",
        check=at_least_one,
        documentation="Maximum number of tasks to use for this connector.",
    ),
    ConfigKey(
        "key.converter",
        "CLASS",
        None,
        importance="LOW",
        group="Common",
        check=_converter_check,
        documentation="Converter class for keys.",
    ),
    ConfigKey(
        "value.converter",
        "CLASS",
        None,
        importance="LOW",
        group="Common",
        check=_converter_check,
        documentation="Converter class for values.",
    ),
    ConfigKey("header.converter", "CLASS", None, importance="LOW", group="Common"),
    ConfigKey(
        "errors.tolerance",
        "STRING",
        "none",
        importance="MEDIUM",
        group="Error Handling",
        choices=("none", "all"),
    ),
    ConfigKey("errors.log.enable", "BOOLEAN", "false", importance="MEDIUM", group="Error Handling"),
)
_SOURCE = (
    ConfigKey(
        "exactly.once.support",
        "STRING",
        "requested",
        importance="MEDIUM",
        group="Exactly Once Support",
        choices=("requested", "required"),
    ),
    ConfigKey(
        "transaction.boundary",
        "STRING",
        "poll",
        importance="MEDIUM",
        group="Exactly Once Support",
        choices=("poll",),
    ),
)
_SINK = (
    ConfigKey(
        "errors.deadletterqueue.topic.name",
        "STRING",
        "",
        importance="MEDIUM",
        group="Error Handling",
    ),
    ConfigKey(
        "errors.deadletterqueue.topic.replication.factor",
        "SHORT",
        "3",
        importance="MEDIUM",
        group="Error Handling",
    ),
    ConfigKey(
        "errors.deadletterqueue.context.headers.enable",
        "BOOLEAN",
        "false",
        importance="MEDIUM",
        group="Error Handling",
    ),
    ConfigKey(
        "topics",
        "LIST",
        "",
        importance="HIGH",
        group="Common",
        documentation="List of topics to consume, separated by commas",
    ),
    ConfigKey(
        "topics.regex",
        "STRING",
        "",
        importance="HIGH",
        group="Common",
        documentation="Regular expression giving topics to consume.",
    ),
)


def common_def(kind: str) -> ConfigDef:
    return ConfigDef(_COMMON + (_SINK if kind == "sink" else _SOURCE))


def validate(config: Mapping[str, str]) -> dict[str, Any]:
    """Kafka's ConfigInfos for a connector configuration (the validate endpoint's body)."""
    cls = connector_class(config["connector.class"])
    common = common_def(cls.kind)
    configs = common.validate(config) + cls.validate(config)
    if cls.kind == "sink":
        topics = config.get("topics", "").strip()
        regex = config.get("topics.regex", "").strip()
        msg = None
        if topics and regex:
            msg = "topics and topics.regex are mutually exclusive options, but both are set."
        elif not topics and not regex:
            msg = "Must configure one of topics or topics.regex"
        if msg:
            for entry in configs:
                if entry["value"]["name"] in ("topics", "topics.regex"):
                    entry["value"]["errors"].append(msg)
    for setting in ("transforms", "predicates"):
        if config.get(setting, "").strip():
            configs.append({
                "definition": ConfigKey(setting, "LIST").definition(len(configs) + 1),
                "value": {"name": setting, "value": config[setting], "recommended_values": [],
                          "errors": [f"Single Message Transforms and predicates are not supported by this worker ({setting}={config[setting]})"],  # noqa: E501
                          "visible": True},
            })  # fmt: skip
    groups = common.groups() + [g for g in cls.config_def().groups() if g not in common.groups()]
    errors = sum(len(e["value"]["errors"]) for e in configs)
    return {"name": cls.class_name, "error_count": errors, "groups": groups, "configs": configs}


def invalid_message(infos: Mapping[str, Any]) -> str:
    lines = [
        f"{e['value']['name']}: {err}" for e in infos["configs"] for err in e["value"]["errors"]
    ]
    return (
        f"Connector configuration is invalid and contains the following {len(lines)} "
        "error(s):\n" + "\n".join(lines) + "\nYou can also find the above list of errors at "
        "the endpoint `/connector-plugins/{connectorType}/config/validate`"
    )
