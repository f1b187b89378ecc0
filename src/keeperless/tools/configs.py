"""`configs --describe | --alter` for topics, brokers and the cluster-wide broker default,
as Kafka's kafka-configs.sh prints them."""

from __future__ import annotations

from typing import Any, TextIO

from keeperless.tools.client import ToolError, call, parse_servers

__all__ = ["run_configs"]

_TYPES = {"topics": 2, "brokers": 4}
_SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
}


def _entity(args: Any) -> tuple[int, str, str]:
    rtype = _TYPES.get(args.entity_type or "")
    if rtype is None:
        raise ToolError("--entity-type must be topics or brokers")
    if args.entity_default:
        if rtype != 4:
            raise ToolError("--entity-default applies to brokers only")
        return rtype, "", "cluster-wide default broker"
    if not args.entity_name:
        raise ToolError("--entity-name (or --entity-default for brokers) is required")
    return rtype, args.entity_name, f"{args.entity_type[:-1]} {args.entity_name}"


def run_configs(args: Any, out: TextIO) -> int:
    servers = parse_servers(args.bootstrap_server, "--bootstrap-server")
    rtype, name, label = _entity(args)
    if args.alter:
        ops: list[dict[str, Any]] = []
        for item in ",".join(args.add_config or []).split(","):
            if item:
                k, sep, v = item.partition("=")
                if not sep:
                    raise ToolError(f"--add-config {item!r}: expected key=value")
                ops.append({"name": k, "config_operation": 0, "value": v})
        for k in ",".join(args.delete_config or []).split(","):
            if k:
                ops.append({"name": k, "config_operation": 1, "value": None})
        if not ops:
            raise ToolError("--alter needs --add-config or --delete-config")
        resp = call(
            servers,
            44,
            1,
            {
                "resources": [{"resource_type": rtype, "resource_name": name, "configs": ops}],
                "validate_only": False,
            },
            timeout_s=40,
        )
        r = resp.responses[0]
        if int(r.error_code) != 0:
            raise ToolError(r.error_message or r.error_code.name)
        what = (
            "default config for brokers in the cluster"
            if rtype == 4 and not name
            else f"config for {label}"
        )
        print(f"Completed updating {what}.", file=out)
        return 0
    target = name if name or rtype != 4 else ""
    resp = call(
        servers,
        32,
        4,
        {
            "resources": [
                {"resource_type": rtype, "resource_name": target, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    res = resp.results[0]
    if int(res.error_code) != 0:
        raise ToolError(res.error_message or res.error_code.name)
    dynamic = {1, 2, 3}
    shown = [c for c in res.configs if args.all or c.config_source in dynamic]
    print(f"{'All' if args.all else 'Dynamic'} configs for {label} are:", file=out)
    for c in sorted(shown, key=lambda c: c.name):
        src = _SOURCES.get(c.config_source, "UNKNOWN")
        print(
            f"  {c.name}={c.value} sensitive={str(c.is_sensitive).lower()} "
            f"synonyms={{{src}:{c.name}={c.value}}}",
            file=out,
        )
    return 0
