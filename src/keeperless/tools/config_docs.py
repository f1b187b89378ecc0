"""docs/configuration.md, generated from the config definitions as Kafka generates its
configuration pages from ConfigDef (toHtml): each broker, topic and group key with its
description, type, default, importance and update mode. ``python -m
keeperless.tools.config_docs > docs/configuration.md``; a unit test keeps the file
current."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from keeperless.metadata.config_catalog import BROKER_CONFIGS
from keeperless.metadata.config_def import GROUP_SCOPE, TOPIC_SCOPE, ConfigDef
from keeperless.metadata.group_configs import GROUP_CONFIGS
from keeperless.metadata.topic_configs import TOPIC_CONFIGS
from keeperless.metadata.update_modes import LIVE_UNSUPPORTED, kafka_update_mode

__all__ = ["render"]

_ORDER = {"high": 0, "medium": 1, "low": 2}


def _mode(d: ConfigDef) -> str:
    if d.scope in (TOPIC_SCOPE, GROUP_SCOPE):
        return f"per {d.scope}"
    if d.name in LIVE_UNSUPPORTED:
        return f"read-only here ({kafka_update_mode(d.name)} in Kafka)"
    return d.scope


def _cell(text: str | None) -> str:
    return "" if text is None else text.replace("|", "\\|").replace("\n", " ")


def _table(defs: Iterable[ConfigDef]) -> list[str]:
    rows = ["| Name | Description | Type | Default | Importance | Update mode |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    # as Kafka's pages: the most important first, then by name
    for d in sorted(defs, key=lambda d: (_ORDER[d.importance], d.name)):
        if d.default is None:
            default = "null"
        elif d.default == "":
            default = '""'
        else:
            default = "(sensitive)" if d.sensitive else f"`{_cell(d.default)}`"
        rows.append(
            f"| `{d.name}` | {_cell(d.doc)} | {d.type.name.lower()} | {default} | "
            f"{d.importance} | {_mode(d)} |"
        )
    return rows


def render() -> str:
    out = [
        "# Configuration",
        "",
        "Generated from the config definitions (`python -m keeperless.tools.config_docs`);",
        "each key as Kafka 4.1 defines it - importance and update mode included - unless",
        "the update mode says keeperless differs. Broker keys go in `server.properties` or",
        "are changed with `kafka-configs.sh --entity-type brokers`; topic keys with",
        "`--entity-type topics` (or at creation); group keys with `--entity-type groups`.",
        "",
        f"## Broker configs ({len(BROKER_CONFIGS)})",
        "",
        *_table(BROKER_CONFIGS.values()),
        "",
        f"## Topic configs ({len(TOPIC_CONFIGS)})",
        "",
        *_table(TOPIC_CONFIGS.values()),
        "",
        f"## Group configs ({len(GROUP_CONFIGS)})",
        "",
        *_table(GROUP_CONFIGS.values()),
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render())
