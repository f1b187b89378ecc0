"""`share-groups`: Kafka's kafka-share-groups.sh (KIP-932) - --list [--state [STATES]]
and --describe --group G [--offsets (the default) | --members | --state], over ListGroups
(type share), and ShareGroupDescribe and DescribeShareGroupOffsets sent to each group's
coordinator; --reset-offsets (AlterShareGroupOffsets, --dry-run by default, as Kafka's),
--delete-offsets --topic (DeleteShareGroupOffsets) and --delete (DeleteGroups), each
allowed only while the group has no member."""

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
    if given[0] in ("delete", "reset_offsets", "delete_offsets") and not args.group:
        raise ToolError(f"Option {_flag(given[0])} takes the option: --group")
    if given[0] == "reset_offsets":
        from keeperless.tools.group_offsets import check_reset_args

        check_reset_args(args)
    if given[0] == "delete_offsets" and not args.topic:
        raise ToolError("Option --delete-offsets takes the option: --topic")
    if given[0] == "delete_offsets" and any(":" in t for t in args.topic):
        raise ToolError("Option --delete-offsets deletes a share group's state of whole "
                        "topics: --topic TOPIC, without partitions")  # fmt: skip
    for opt in ("members", "offsets"):
        if getattr(args, opt, False) and given[0] != "describe":
            raise ToolError(f"Option --{opt} is only valid with --describe")
    if args.members and getattr(args, "offsets", False):
        raise ToolError("Option --describe takes at most one of these options: --members, "
                        "--offsets, --state")  # fmt: skip


def _coordinator(servers: Servers, group: str) -> tuple[str, int]:
    for _ in range(20):  # the coordinator's partition may be created by this question
        found = call(servers, ApiKey.FIND_COORDINATOR, 4,
                     {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]  # fmt: skip
        if int(found.error_code) == 0:
            return found.host, found.port
        time.sleep(0.25)
    raise ToolError(f"no coordinator for group {group}: {found.error_code.name}")


def _start_offsets(coordinator: tuple[str, int], group: str) -> dict[tuple[str, int], int]:
    resp = call([coordinator], ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0,
                {"groups": [{"group_id": group, "topics": None}]})  # fmt: skip
    g = resp.groups[0]
    if int(g.error_code) != 0:
        raise ToolError(f"describe offsets of {group}: {g.error_message or g.error_code.name}")
    return {(t.topic_name, p.partition_index): p.start_offset for t in g.topics
            for p in t.partitions if int(p.error_code) == 0 and p.start_offset >= 0}  # fmt: skip


def _reset(args: Any, servers: Servers, group: str, out: TextIO) -> None:
    """--reset-offsets: the new start offsets (as kafka-consumer-groups.sh computes them,
    from the share group's start offsets for --to-current and --shift-by); written with
    --execute."""
    from keeperless.tools.group_offsets import reset_spec
    from keeperless.tools.groups import _Tool

    coordinator = _coordinator(servers, group)
    tool = _Tool(args, {}, out)
    tool.committed = lambda gid: _start_offsets(coordinator, gid)  # type: ignore[method-assign]
    new = reset_spec(tool, group)
    if args.execute and new:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (t, p), o in sorted(new.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "start_offset": o})
        topics = [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]
        resp = call([coordinator], ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0,
                    {"group_id": group, "topics": topics})  # fmt: skip
        if int(resp.error_code) != 0:
            raise ToolError(f"{resp.error_message or resp.error_code.name}")
        for t in resp.responses:
            for p in t.partitions:
                if int(p.error_code) != 0:
                    raise ToolError(f"{t.topic_name}-{p.partition_index}: "
                                    f"{p.error_message or p.error_code.name}")  # fmt: skip
    gw = max(15, len(group))
    tw = max([15, *(len(t) for t, _ in new)])
    print(f"\n{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} NEW-OFFSET", file=out)
    for (t, p), o in sorted(new.items()):
        print(f"{group:<{gw}} {t:<{tw}} {p:<10} {o}", file=out)


def _delete_offsets(args: Any, servers: Servers, group: str, out: TextIO) -> int:
    topics = sorted({value.partition(":")[0] for value in args.topic})
    resp = call([_coordinator(servers, group)], ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0,
                {"group_id": group, "topics": [{"topic_name": t} for t in topics]})  # fmt: skip
    if int(resp.error_code) != 0:
        raise ToolError(f"{resp.error_message or resp.error_code.name}")
    width = max([15, *(len(t.topic_name) for t in resp.responses)])
    print(f"\n{'TOPIC':<{width}} STATUS", file=out)
    failed = 0
    for t in resp.responses:
        ok = int(t.error_code) == 0
        failed |= not ok
        status = "Successful" if ok else f"Error: {t.error_message or t.error_code.name}"
        print(f"{t.topic_name:<{width}} {status}", file=out)
    return failed


def _delete(servers: Servers, groups: list[str], out: TextIO) -> int:
    """DeleteGroups of share groups only: a consumer group of the name is refused, as
    Kafka's ShareGroupCommand refuses it, before anything is deleted (DeleteGroups
    itself deletes a group of any type)."""
    failures: dict[str, str] = {}
    for g in groups:
        desc, (host, port, _) = _describe(servers, g)
        if int(desc.error_code) == 69:  # none, or of another type (the broker says which)
            not_share = "not a share group" in (desc.error_message or "")
            failures[g] = "GroupIdNotFoundException" + (
                f": {desc.error_message}" if not_share else ""
            )
            continue
        if int(desc.error_code) != 0:
            failures[g] = desc.error_message or desc.error_code.name
            continue
        resp = call([(host, port)], ApiKey.DELETE_GROUPS, 2, {"groups_names": [g]})
        code = resp.results[0].error_code
        if int(code) != 0:
            failures[g] = {69: "GroupIdNotFoundException", 68: "GroupNotEmptyException"}.get(
                int(code), code.name)  # fmt: skip
    if not failures:
        names = ", ".join(f"'{g}'" for g in groups)
        print(f"Deletion of requested share groups ({names}) was successful.", file=out)
        return 0
    print("Error: Deletion of some share groups failed:", file=out)
    for g, why in failures.items():
        print(f"* Share group '{g}' could not be deleted due to: {why}", file=out)
    return 1


def run_share_groups(args: Any, servers: Servers, out: TextIO) -> int:
    check_args(args)
    if args.reset_offsets:
        for group in args.group:
            _reset(args, servers, group, out)
        return 0
    if args.delete_offsets:
        return _delete_offsets(args, servers, args.group[0], out)
    if args.delete:
        return _delete(servers, args.group, out)
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
