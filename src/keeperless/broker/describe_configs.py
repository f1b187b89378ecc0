"""DescribeConfigs: every config of a topic, this broker, the cluster-wide broker defaults
or this broker's loggers, with types, sources, synonyms and documentation as Kafka fills
them (sensitive values hidden)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.log_levels import BROKER_LOGGER_RESOURCE, logger_levels
from keeperless.metadata.config_catalog import (
    BROKER_CONFIGS,
    READ_ONLY,
    ConfigDef,
    ConfigSource,
    ConfigType,
    topic_config_type,
    topic_doc,
)
from keeperless.metadata.config_resolution import resolve_broker
from keeperless.metadata.group_configs import GROUP_BROKER_KEYS, GROUP_CONFIGS, GROUP_RESOURCE
from keeperless.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from keeperless.metadata.update_modes import listener_key
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["describe_configs"]


def describe_configs(broker: Broker, header: RequestHeader, req: Any) -> Any:
    """Every config of a topic, this broker, the cluster-wide broker defaults or this
    broker's loggers, with types, sources, synonyms and documentation as Kafka fills
    them (sensitive values hidden)."""
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))
    results = []
    for res in req.resources:
        entry: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "configs": (),
        }
        try:
            found = _describe_resource(broker, res.resource_type, res.resource_name)
        except _DescribeError as e:
            entry.update(error_code=e.code, error_message=str(e))
        else:
            keys = res.configuration_keys
            entry["configs"] = [
                _config_entry(c, synonyms, docs)
                for c in found
                if keys is None or not keys or c.name in keys
            ]
        results.append(entry)
    return build(
        response_class(ApiKey.DESCRIBE_CONFIGS, header.api_version),
        {"throttle_time": 0, "results": results},
    )


def _describe_resource(broker: Broker, rtype: int, name: str) -> list[_Described]:
    image = broker.image
    if rtype == TOPIC_RESOURCE:
        if image.topic(name) is None:
            raise _DescribeError(
                ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist"
            )
        return [
            _Described(k, v, src, syn, topic_config_type(k), False, False, topic_doc(k))
            for k, (v, src, syn) in sorted(broker.topic_config_details(name).items())
        ]
    if rtype == BROKER_RESOURCE and name == "":
        # the cluster-wide defaults: only what is set dynamically at that level
        cluster = image.configs.get((BROKER_RESOURCE, ""), {})
        src = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return [_broker_described(k, v, src, ((k, v, src),)) for k, v in sorted(cluster.items())]
    if rtype in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE) and name != str(broker.node_id):
        raise _DescribeError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
        )
    if rtype == BROKER_RESOURCE:
        layers = broker.config_layers()
        out = []
        for k in sorted(BROKER_CONFIGS):
            v, src, syn = resolve_broker(k, *layers)
            out.append(_broker_described(k, v, src, syn))
        # and the keys set for one listener (listener.name.<l>.<key>), as Kafka lists them
        own, _cluster, static = layers
        for k in sorted({k for k in (*own, *static) if listener_key(k)[0] is not None}):
            src = (ConfigSource.DYNAMIC_BROKER_CONFIG if k in own
                   else ConfigSource.STATIC_BROKER_CONFIG)  # fmt: skip
            v = own[k] if k in own else static[k]
            out.append(_broker_described(k, v, src, ((k, v, src),)))
        return out
    if rtype == BROKER_LOGGER_RESOURCE:
        src = ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG
        return [
            _Described(n, lvl, src, (), ConfigType.STRING, False, False, "")
            for n, lvl in logger_levels()
        ]
    if rtype == GROUP_RESOURCE:
        if not name:
            raise _DescribeError(ErrorCode.invalid_request, "A group config needs a group name")
        own = image.configs.get((GROUP_RESOURCE, name), {})
        layers = broker.config_layers()

        def effective(d: ConfigDef) -> str | None:
            # a group without its own value takes the broker's (Kafka's GroupConfig)
            if GROUP_BROKER_KEYS[d.name] in BROKER_CONFIGS:
                return resolve_broker(GROUP_BROKER_KEYS[d.name], *layers)[0]
            return d.default

        return [
            _Described(
                k,
                own[k] if k in own else effective(d),
                ConfigSource.GROUP_CONFIG if k in own else ConfigSource.DEFAULT_CONFIG,
                ((k, own[k], ConfigSource.GROUP_CONFIG),) if k in own else (),
                d.type,
                False,
                False,
                d.doc,
            )
            for k, d in sorted(GROUP_CONFIGS.items())
        ]
    raise _DescribeError(
        ErrorCode.invalid_request, f"Unsupported resource type {rtype} in DescribeConfigs"
    )


class _DescribeError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class _Described:
    name: str
    value: str | None
    source: int
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]
    type: int
    read_only: bool
    sensitive: bool
    doc: str


def _broker_described(
    key: str, value: str | None, source: int, synonyms: tuple[Any, ...]
) -> _Described:
    d = BROKER_CONFIGS.get(listener_key(key)[1])
    return _Described(
        key,
        None if d is not None and d.sensitive else value,
        source,
        synonyms,
        d.type if d is not None else ConfigType.STRING,
        d is None or d.scope == READ_ONLY,
        d is not None and d.sensitive,
        d.doc if d is not None else "",
    )


def _config_entry(c: _Described, synonyms: bool, docs: bool) -> dict[str, Any]:
    return {
        "name": c.name,
        "value": c.value,
        "read_only": c.read_only,
        "config_source": int(c.source),
        "is_sensitive": c.sensitive,
        "synonyms": [{"name": n, "value": v, "source": int(src)} for n, v, src in c.synonyms]
        if synonyms
        else (),
        "config_type": int(c.type),
        "documentation": c.doc if docs else None,
        "is_default": c.source == ConfigSource.DEFAULT_CONFIG,
    }
