"""`share-groups`: Kafka's kafka-share-groups.sh (KIP-932) - --list [--state [STATES]]
and --describe --group G [--offsets (the default) | --members | --state], over ListGroups
(type share), and ShareGroupDescribe and DescribeShareGroupOffsets sent to each group's
coordinator. --delete / --reset-offsets / --delete-offsets are refused, saying so (not
built yet)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from keeperless.tools.errors import ToolError

__all__ = ["run_share_groups"]

Servers = list[tuple[str, int]]
STATES = ("Empty", "Stable", "Dead")
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _brokers(servers: Servers) -> dict[int, tuple[str, int]]:
    body = {"topics": [], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    md = call(servers, ApiKey.METADATA, 12, body)
    return {b.node_id: (b.host, b.port) for b in md.brokers}


def _list(servers: Servers) -> list[tuple[str, str]]:
    """(group, state) of every broker's share groups."""
    out: dict[str, str] = {}
    for node, server in sorted(_brokers(servers).items()):
        resp = call([server], ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                      "types_filter": ["share"]})  # fmt: skip
        if int(resp.error_code) != 0:
            raise ToolError(f"list: {resp.error_code.name} from broker {node}")
        out.update((g.group_id, g.group_state) for g in resp.groups)
    return sorted(out.items())


def _describe(servers: Servers, group: str) -> tuple[Any, tuple[str, int, int]]:
    """The group's description and its coordinator (host, port, id)."""
    for _ in range(20):  # the coordinator's partition may be created by this question
        found = call(servers, ApiKey.FIND_COORDINATOR, 4,
                     {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]  # fmt: skip
        if int(found.error_code) == 0:
            break
        time.sleep(0.25)
    else:
        raise ToolError(f"no coordinator for group {group}: {found.error_code.name}")
    where = (found.host, found.port, found.node_id)
    resp = call([(found.host, found.port)], ApiKey.SHARE_GROUP_DESCRIBE, 1,
                {"group_ids": [group], "include_authorized_operations": False})  # fmt: skip
    return resp.groups[0], where


def _states(text: str) -> set[str]:
    wanted = {s.strip().lower() for s in text.split(",") if s.strip()}
    bad = wanted - {s.lower() for s in STATES}
    if bad:
        raise ToolError(f"Invalid state list '{text}'. Valid states are: {', '.join(STATES)}")
    return wanted


def _assignment(member: Any) -> str:
    """Kafka's ShareGroupCommand form: ``topic:0,1,2;other:0``, topics sorted."""
    parts: dict[str, list[int]] = {}
    for t in member.assignment.topic_partitions:
        parts.setdefault(t.topic_name, []).extend(t.partitions)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(parts.items()))


def check_args(args: Any) -> None:
    given = [a for a in ACTIONS if getattr(args, a, False)]
    if len(given) != 1:
        raise ToolError("Command must include exactly one action: "
                        + ", ".join(_flag(a) for a in ACTIONS) + ".")  # fmt: skip
    if given[0] == "describe" and not args.group:
        raise ToolError("Option --describe takes the option: --group")
    if given[0] in ("delete", "reset_offsets", "delete_offsets"):
        raise ToolError(f"{_flag(given[0])} is not built in keeperless yet")
    for opt in ("members", "offsets"):
        if getattr(args, opt, False) and given[0] != "describe":
            raise ToolError(f"Option --{opt} is only valid with --describe")
    if args.members and getattr(args, "offsets", False):
        raise ToolError("Option --describe takes at most one of these options: --members, "
                        "--offsets, --state")  # fmt: skip


def run_share_groups(args: Any, servers: Servers, out: TextIO) -> int:
    check_args(args)
    if args.list:
        groups = _list(servers)
        if args.state is None:
            for g, _ in groups:
                print(g, file=out)
            return 0
        wanted = _states(args.state)
        rows = [(g, s) for g, s in groups if not wanted or s.lower() in wanted]
        width = max([15, *(len(g) for g, _ in rows)])
        print(f"{'GROUP':<{width}} STATE", file=out)
        for g, s in rows:
            print(f"{g:<{width}} {s}", file=out)
        return 0
    failed = 0
    for group in args.group:
        desc, (host, port, node) = _describe(servers, group)
        if int(desc.error_code) != 0:
            print(f"\nError: Share group '{group}' does not exist."
                  if int(desc.error_code) == 69 else
                  f"\nError: {desc.error_message or desc.error_code.name}", file=out)  # fmt: skip
            failed = 1
            continue
        width = max(15, len(group))
        if args.state is not None:
            if desc.group_state == "Empty":
                print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
            coordinator = f"{host}:{port}  ({node})"
            cw = max(25, len(coordinator))
            print(f"{'GROUP':<{width}} {'COORDINATOR (ID)':<{cw}} {'STATE':<15} #MEMBERS",
                  file=out)  # fmt: skip
            print(f"{group:<{width}} {coordinator:<{cw}} {desc.group_state:<15} "
                  f"{len(desc.members)}", file=out)  # fmt: skip
        elif args.members:
            if not desc.members:
                print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
                continue
            members = [(m.member_id, m.client_host, m.client_id, _assignment(m))
                       for m in desc.members]  # fmt: skip
            w = [max(15, *(len(r[i]) for r in members)) for i in range(3)]
            fmt = f"{{:<{width}}} {{:<{w[0]}}} {{:<{w[1]}}} {{:<{w[2]}}} {{}}"
            print(fmt.format("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "ASSIGNMENT"), file=out)
            for r in members:
                print(fmt.format(group, *r), file=out)
        else:
            _print_offsets(group, (host, port), out)
    return failed


def _print_offsets(group: str, coordinator: tuple[str, int], out: TextIO) -> None:
    """Each share-partition's start offset and the leader epoch that last wrote it, as
    Kafka's ShareGroupCommand prints them ('-' where the group has none)."""
    resp = call([coordinator], ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0,
                {"groups": [{"group_id": group, "topics": None}]})  # fmt: skip
    g = resp.groups[0]
    if int(g.error_code) != 0:
        raise ToolError(f"describe offsets of {group}: {g.error_message or g.error_code.name}")
    rows = []
    for t in g.topics:
        for p in t.partitions:
            if int(p.error_code) != 0:
                why = p.error_message or p.error_code.name
                raise ToolError(
                    f"describe offsets of {group} on {t.topic_name}-{p.partition_index}: {why}"
                )
            epoch = str(p.leader_epoch) if p.leader_epoch >= 0 else "-"
            start = str(p.start_offset) if p.start_offset >= 0 else "-"
            rows.append((t.topic_name, p.partition_index, epoch, start))
    rows.sort()
    gw = max(15, len(group))
    tw = max([15, *(len(r[0]) for r in rows)])
    print(f"{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} {'LEADER-EPOCH':<13} START-OFFSET",
          file=out)  # fmt: skip
    for topic, idx, epoch, start in rows:
        print(f"{group:<{gw}} {topic:<{tw}} {idx:<10} {epoch:<13} {start}", file=out)
