"""Which entities a kafka-configs.sh command line names (--entity-type/--entity-name/
--entity-default, or the shortcuts --topic, --broker, --broker-defaults, --user,
--user-defaults, --client, --client-defaults), and its --add-config list."""

from __future__ import annotations

from typing import Any

from keeperless.tools.errors import ToolError

__all__ = ["DEFAULT", "ENTITY_TYPES", "Entity", "parse_config_items", "resolve_entities"]

DEFAULT = ""  # the entity's default (--entity-default); None: every entity (describe)
ENTITY_TYPES = ("topics", "brokers", "broker-loggers", "groups", "users", "clients")
Entity = tuple[str, str | None]

_SHORTCUTS = (
    ("topic", "topics", False),
    ("broker", "brokers", False),
    ("broker_defaults", "brokers", True),
    ("user", "users", False),
    ("user_defaults", "users", True),
    ("client", "clients", False),
    ("client_defaults", "clients", True),
)


def resolve_entities(args: Any, alter: bool) -> list[Entity]:
    """[(type, name)], name DEFAULT for a default and None for 'every one' (describe
    only). Several entities only as a user and a client together (their quotas)."""
    out: list[Entity] = []
    for attr, etype, default in _SHORTCUTS:
        value = getattr(args, attr, None)
        if default and value:
            out.append((etype, DEFAULT))
        elif not default and value is not None:
            out.append((etype, value))
    types = list(args.entity_type or [])
    names = list(args.entity_name or [])
    if out and (types or names or args.entity_default):
        raise ToolError(
            "--topic, --broker, --user, --client and their -defaults flags may not be "
            "combined with --entity-type, --entity-name or --entity-default"
        )
    if not out:
        if not types:
            raise ToolError("--entity-type (or --topic, --broker, --user, --client) is required")
        bad = [t for t in types if t not in ENTITY_TYPES]
        if bad:
            raise ToolError(f"--entity-type {bad[0]!r}: expected one of {', '.join(ENTITY_TYPES)}")
        if len(names) > len(types):
            raise ToolError("more --entity-name than --entity-type options")
        for i, etype in enumerate(types):
            if i < len(names):
                out.append((etype, names[i]))
            elif args.entity_default and i == len(types) - 1:
                out.append((etype, DEFAULT))
            else:
                out.append((etype, None))
    kinds = [t for t, _ in out]
    if len(out) > 1 and sorted(kinds) != ["clients", "users"]:
        raise ToolError("only a user and a client may be named together (their quota)")
    if out[0][0] in ("topics", "broker-loggers", "groups") and out[0][1] == DEFAULT:
        raise ToolError(f"--entity-default applies to brokers, users and clients, not {out[0][0]}")
    if alter and any(name is None for _, name in out):
        raise ToolError("--alter needs --entity-name or --entity-default")
    return sorted(out, key=lambda e: e[0] != "users")


def parse_config_items(values: list[str] | None) -> dict[str, str]:
    """--add-config k1=v1,k2=[a,b],k3=v3 (repeatable): a value in square brackets is a
    list whose commas belong to it (cleanup.policy=[compact,delete])."""
    out: dict[str, str] = {}
    for value in values or ():
        for item in _split_top_level(value):
            if not item.strip():
                continue
            k, sep, v = item.partition("=")
            if not sep or not k.strip():
                raise ToolError(f"--add-config {item!r}: expected key=value")
            v = v.strip()
            if v.startswith("[") and v.endswith("]"):
                v = v[1:-1]
            out[k.strip()] = v
    return out


def _split_top_level(text: str) -> list[str]:
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ToolError(f"--add-config {text!r}: a '[' is never closed")
    items.append("".join(cur))
    return items
