"""`configs --describe | --alter` as Kafka's kafka-configs.sh: topics, brokers and the
cluster-wide broker default (DescribeConfigs / IncrementalAlterConfigs), user and client
quotas (DescribeClientQuotas / AlterClientQuotas) and users' SCRAM credentials
(DescribeUserScramCredentials / AlterUserScramCredentials)."""

from __future__ import annotations

from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import ToolError, call
from keeperless.tools.configs_entities import (
    DEFAULT,
    Entity,
    parse_config_items,
    resolve_entities,
)
from keeperless.tools.configs_quotas import alter_user_or_client, describe_users_or_clients

__all__ = ["run_configs"]

_TYPES = {"topics": 2, "brokers": 4, "broker-loggers": 8, "groups": 32}
_SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    8: "GROUP_CONFIG",
}
NOT_CONTROLLER = 41


def _text(value: str | None) -> str:
    """A config value as Kafka prints it: a null (unset, or sensitive) as 'null'."""
    return "null" if value is None else value


def _label(etype: str, name: str) -> str:
    return f"{etype[:-1]} {name}"


def _broker_address(servers: list[tuple[str, int]], name: str) -> list[tuple[str, int]]:
    """Where a broker's own configs are asked: that broker, as Kafka's admin client
    sends them (a broker answers only for itself), found through any bootstrap server."""
    if name == DEFAULT:
        return servers
    body = {"topics": [], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    md = call(servers, ApiKey.METADATA, 12, body)
    for b in md.brokers:
        if str(b.node_id) == name:
            return [(b.host, b.port)]
    ids = ", ".join(str(i) for i in sorted(b.node_id for b in md.brokers))
    raise ToolError(f"Broker {name} is not a registered broker of this cluster (brokers: {ids})")


def _names(servers: list[tuple[str, int]], etype: str) -> list[str]:
    """Every topic, every group, or every broker and then the cluster-wide default
    (Kafka's order)."""
    if etype == "groups":  # as Kafka 4.1's tool: ListConfigResources of groups
        listed = call(servers, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [32]})
        if int(listed.error_code) != 0:
            raise ToolError(f"Cannot list groups: {listed.error_code.name}")
        return sorted(r.resource_name for r in listed.config_resources)
    md = call(
        servers,
        ApiKey.METADATA,
        12,
        {
            "topics": None if etype == "topics" else [],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    if etype == "topics":
        return sorted(t.name for t in md.topics if int(t.error_code) == 0)
    ids = [str(b) for b in sorted(b.node_id for b in md.brokers)]
    return ids if etype == "broker-loggers" else [*ids, DEFAULT]


def _describe_resource(
    servers: list[tuple[str, int]], etype: str, name: str, describe_all: bool, out: TextIO
) -> None:
    resp = call(
        servers,
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": _TYPES[etype], "resource_name": name, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    res = resp.results[0]
    if int(res.error_code) != 0:
        raise ToolError(res.error_message or res.error_code.name)
    dynamic = {1, 2, 3, 6, 8}
    shown = [c for c in res.configs if describe_all or c.config_source in dynamic]
    if etype == "brokers" and name == DEFAULT:
        print(
            f"{'All' if describe_all else 'Default'} configs for brokers in the cluster are:",
            file=out,
        )
    else:
        print(
            f"{'All' if describe_all else 'Dynamic'} configs for {_label(etype, name)} are:",
            file=out,
        )
    for c in sorted(shown, key=lambda c: c.name):
        src = _SOURCES.get(c.config_source, "UNKNOWN")
        value = _text(c.value)
        print(
            f"  {c.name}={value} sensitive={str(c.is_sensitive).lower()} "
            f"synonyms={{{src}:{c.name}={value}}}",
            file=out,
        )


def _alter_resource(
    servers: list[tuple[str, int]],
    entity: Entity,
    adds: dict[str, str],
    deletes: list[str],
    out: TextIO,
) -> None:
    etype, name = entity[0], str(entity[1])
    ops: list[dict[str, Any]] = [
        {"name": k, "config_operation": 0, "value": v} for k, v in adds.items()
    ] + [{"name": k, "config_operation": 1, "value": None} for k in deletes]
    body = {
        "resources": [{"resource_type": _TYPES[etype], "resource_name": name, "configs": ops}],
        "validate_only": False,
    }
    r: Any = None
    for server in servers:  # a controller that does not lead answers NOT_CONTROLLER
        r = call([server], ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body, timeout_s=40).responses[0]
        if int(r.error_code) != NOT_CONTROLLER:
            break
    if int(r.error_code) != 0:
        raise ToolError(r.error_message or r.error_code.name)
    if etype == "brokers" and name == DEFAULT:
        print("Completed updating default config for brokers in the cluster.", file=out)
    else:
        print(f"Completed updating config for {_label(etype, name)}.", file=out)


def run_configs(args: Any, servers: list[tuple[str, int]], controller: bool, out: TextIO) -> int:
    if args.describe == args.alter:
        raise ToolError("Command must include exactly one action: --describe, --alter")
    entities = resolve_entities(args, alter=args.alter)
    etype = entities[0][0]
    if args.alter:
        adds = parse_config_items(args.add_config)
        deletes = [k.strip() for d in args.delete_config or () for k in d.split(",") if k.strip()]
        if not adds and not deletes:
            raise ToolError("--alter needs --add-config or --delete-config")
        if etype in ("users", "clients"):
            return alter_user_or_client(servers, entities, adds, deletes, out)
        where = servers
        if etype in ("brokers", "broker-loggers") and not controller:
            where = _broker_address(servers, str(entities[0][1]))
        _alter_resource(where, entities[0], adds, deletes, out)
        return 0
    if args.add_config or args.delete_config:
        raise ToolError("--add-config and --delete-config are only valid with --alter")
    if etype in ("users", "clients"):
        return describe_users_or_clients(servers, entities, controller, out)
    if controller:
        raise ToolError(
            "describing topic or broker configs through --bootstrap-controller is not "
            "supported: keeperless controllers do not serve DescribeConfigs; use "
            "--bootstrap-server"
        )
    name = entities[0][1]
    names = _names(servers, etype) if name is None else [name]
    for n in names:
        where = _broker_address(servers, n) if etype in ("brokers", "broker-loggers") else servers
        _describe_resource(where, etype, n, args.all, out)
    return 0
