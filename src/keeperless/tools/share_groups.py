"""`share-groups`: Kafka's kafka-share-groups.sh (KIP-932) - --list [--state [STATES]],
--describe (--group G ... | --all-groups) [--offsets (the default) | --members | --state]
[--verbose], over ListGroups (type share), and ShareGroupDescribe and
DescribeShareGroupOffsets (v1: with each share-partition's lag, KIP-1226) sent to each
group's coordinator; --reset-offsets (AlterShareGroupOffsets; --dry-run or --execute, as
Kafka's), --delete-offsets --topic (DeleteShareGroupOffsets) and --delete (--group G ...
| --all-groups; DeleteGroups), each allowed only while the group has no member;
--timeout MS for every request. Output as Kafka 4.2's ShareGroupCommand prints it."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call, exception_class
from keeperless.tools.errors import ToolError

__all__ = ["run_share_groups"]

Servers = list[tuple[str, int]]
STATES = ("Empty", "Stable", "Dead")
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
_TIMEOUT_S = [30.0]  # --timeout, for every request this run sends


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _call(servers: Servers, api: ApiKey, version: int, body: dict[str, Any]) -> Any:
    return call(servers, api, version, body, _TIMEOUT_S[0])


def _brokers(servers: Servers) -> dict[int, tuple[str, int]]:
    body = {"topics": [], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    md = _call(servers, ApiKey.METADATA, 12, body)
    return {b.node_id: (b.host, b.port) for b in md.brokers}


def _list(servers: Servers) -> list[tuple[str, str]]:
    """(group, state) of every broker's share groups."""
    out: dict[str, str] = {}
    for node, server in sorted(_brokers(servers).items()):
        resp = _call([server], ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                       "types_filter": ["share"]})  # fmt: skip
        if int(resp.error_code) != 0:
            raise ToolError(f"list: {resp.error_code.name} from broker {node}")
        out.update((g.group_id, g.group_state) for g in resp.groups)
    return sorted(out.items())


def _coordinator(servers: Servers, group: str) -> tuple[str, int, int]:
    """The group's coordinator: host, port, node id."""
    deadline = time.monotonic() + _TIMEOUT_S[0]
    while True:  # the coordinator's partition may be created by this question
        found = _call(servers, ApiKey.FIND_COORDINATOR, 4,
                      {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]  # fmt: skip
        if int(found.error_code) == 0:
            return found.host, found.port, found.node_id
        if time.monotonic() >= deadline:
            raise ToolError(f"no coordinator for group {group}: {found.error_code.name}")
        time.sleep(0.25)


def _describe(servers: Servers, group: str) -> tuple[Any, tuple[str, int, int]]:
    """The group's description and its coordinator (host, port, id)."""
    where = _coordinator(servers, group)
    resp = _call([where[:2]], ApiKey.SHARE_GROUP_DESCRIBE, 1,
                 {"group_ids": [group], "include_authorized_operations": False})  # fmt: skip
    return resp.groups[0], where


def _states(text: str) -> set[str]:
    wanted = {s.strip().lower() for s in text.split(",") if s.strip()}
    bad = wanted - {s.lower() for s in STATES}
    if bad:
        raise ToolError(f"Invalid state list '{text}'. Valid states are: {', '.join(STATES)}")
    return wanted


def _assignment(member: Any) -> tuple[int, str]:
    """How many partitions, and Kafka's ShareGroupCommand form: ``topic:0,1,2;other:0``,
    topics sorted."""
    parts: dict[str, list[int]] = {}
    for t in member.assignment.topic_partitions:
        parts.setdefault(t.topic_name, []).extend(t.partitions)
    text = ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(parts.items()))
    return sum(len(ps) for ps in parts.values()), text


def check_args(args: Any) -> None:
    """Kafka's ShareGroupCommandOptions.checkArgs, in its words."""
    given = [a for a in ACTIONS if getattr(args, a, False)]
    if len(given) != 1:
        raise ToolError("Command must include exactly one action: "
                        + ", ".join(_flag(a) for a in ACTIONS) + ".")  # fmt: skip
    action = given[0]
    if args.timeout is not None and args.timeout <= 0:
        raise ToolError(f"--timeout {args.timeout}: a number of milliseconds above 0")
    if action == "describe":
        if not args.group and not args.all_groups:
            raise ToolError("Option --describe takes one of these options: --group, --all-groups")
        if sum(bool(x) for x in (args.members, args.offsets, args.state is not None)) > 1:
            raise ToolError("Option --describe takes at most one of these options: --members, "
                            "--offsets, --state")  # fmt: skip
        if args.state:
            raise ToolError("Option --describe does not take a value for --state")
    if action == "delete":
        if not args.group and not args.all_groups:
            raise ToolError("Option --delete takes the options --group or --all-groups")
        if args.group and args.all_groups:
            raise ToolError("Option --delete takes either --group or --all-groups, not both.")
        if args.topic:
            raise ToolError("Option --delete does not take the option: --topic")
    if action == "delete_offsets":
        if not args.group or not args.topic:
            raise ToolError("Option --delete-offsets takes the following options: --group, --topic")
        if any(":" in t for t in args.topic):
            raise ToolError("Option --delete-offsets deletes a share group's state of whole "
                            "topics: --topic TOPIC, without partitions")  # fmt: skip
    if action == "reset_offsets":
        if args.execute and args.dry_run:
            raise ToolError("Option --reset-offsets only accepts one of --execute and --dry-run")
        if not args.execute and not args.dry_run:
            raise ToolError("Option --reset-offsets takes the option: --execute or --dry-run")
        if not args.group:
            raise ToolError("Option --reset-offsets takes the option: --group")
        if not args.topic:  # (Kafka's: every partition the group has state for)
            args.all_topics = True
        from keeperless.tools.group_offsets import check_reset_args

        check_reset_args(args)
    for opt in ("members", "offsets", "verbose"):
        if getattr(args, opt, False) and action != "describe":
            raise ToolError(f"Option --{opt} is only valid with --describe")
    if args.state is not None and action not in ("describe", "list"):
        raise ToolError("Option --state is only valid with --describe or --list")
    if args.all_groups and action not in ("describe", "delete"):
        raise ToolError(f"Option {_flag(action)} does not take the option: --all-groups")
    if args.group and args.all_groups:
        raise ToolError("Option --group cannot be used with --all-groups")
    if args.group and action == "list":
        raise ToolError("Option --list does not take the option: --group")
    if args.topic and action in ("list", "describe"):
        raise ToolError(f"Option {_flag(action)} does not take the option: --topic")


def _start_offsets(coordinator: tuple[str, int], group: str) -> dict[tuple[str, int], int]:
    resp = _call([coordinator], ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0,
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

    coordinator = _coordinator(servers, group)[:2]
    tool = _Tool(args, {}, out)
    tool.committed = lambda gid: _start_offsets(coordinator, gid)  # type: ignore[method-assign]
    new = reset_spec(tool, group)
    if args.execute and new:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (t, p), o in sorted(new.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "start_offset": o})
        topics = [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]
        resp = _call([coordinator], ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0,
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
    resp = _call([_coordinator(servers, group)[:2]], ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0,
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
    """Delete share groups as Kafka's ShareGroupCommand does: a group that is not listed
    as a share group (none, or a consumer group of the name: DeleteGroups would delete
    any type), is Dead or has members is refused before anything is deleted; the others
    go with DeleteGroups. Failures are reported per group, the exit status stays 0 (as
    Kafka's tool)."""
    listed = dict(_list(servers))
    failures: dict[str, str] = {}
    wanted = []
    for g in dict.fromkeys(groups):
        state = listed.get(g)
        if state is None:
            failures[g] = (f"org.apache.kafka.common.errors.GroupIdNotFoundException: "
                           f"Group '{g}' is not a share group.")  # fmt: skip
        elif state == "Dead":
            failures[g] = (f"java.lang.IllegalStateException: Share group '{g}' group state "
                           "is DEAD.")  # fmt: skip
        elif state != "Empty":
            failures[g] = (f"org.apache.kafka.common.errors.GroupNotEmptyException: "
                           f"Share group '{g}' is not EMPTY.")  # fmt: skip
        else:
            wanted.append(g)
    deleted = []
    for g in wanted:
        host, port, _ = _coordinator(servers, g)
        resp = _call([(host, port)], ApiKey.DELETE_GROUPS, 2, {"groups_names": [g]})
        code = int(resp.results[0].error_code)
        if code != 0:
            failures[g] = exception_class(code)
        else:
            deleted.append(g)
    names = ", ".join(f"'{g}'" for g in deleted)
    if not failures:
        print(f"Deletion of requested share groups ({names}) was successful.", file=out)
        return 0
    print("\nError: Deletion of some share groups failed:", file=out)
    for g, why in failures.items():
        print(f"* Group '{g}' could not be deleted due to: {why}", file=out)
    if deleted:
        print(f"\nThese share groups were deleted successfully: {names}", file=out)
    return 0


def run_share_groups(args: Any, servers: Servers, out: TextIO) -> int:
    check_args(args)
    _TIMEOUT_S[0] = (args.timeout or 30000) / 1000
    if args.reset_offsets:
        for group in args.group:
            _reset(args, servers, group, out)
        return 0
    if args.delete_offsets:
        return _delete_offsets(args, servers, args.group[0], out)
    if args.delete:
        groups = [g for g, _ in _list(servers)] if args.all_groups else args.group
        return _delete(servers, groups, out)
    if args.list:
        groups_listed = _list(servers)
        if args.state is None:
            for g, _ in groups_listed:
                print(g, file=out)
            return 0
        wanted = _states(args.state)
        rows = [(g, s) for g, s in groups_listed if not wanted or s.lower() in wanted]
        width = max([15, *(len(g) for g, _ in rows)])
        print(f"{'GROUP':<{width}} STATE", file=out)
        for g, s in rows:
            print(f"{g:<{width}} {s}", file=out)
        return 0
    groups = [g for g, _ in _list(servers)] if args.all_groups else args.group
    failed = 0
    for group in sorted(dict.fromkeys(groups)):
        desc, (host, port, node) = _describe(servers, group)
        if int(desc.error_code) != 0:
            print(f"\nError: Share group '{group}' does not exist."
                  if int(desc.error_code) == 69 else
                  f"\nError: {desc.error_message or desc.error_code.name}", file=out)  # fmt: skip
            failed = 1
            continue
        if args.state is not None:
            _print_state(group, desc, f"{host}:{port}  ({node})", args.verbose, out)
        elif args.members:
            _print_members(group, desc, args.verbose, out)
        else:
            _print_offsets(group, (host, port), args.verbose, out)
    return failed


def _table(rows: list[list[str]], widths: list[int], out: TextIO) -> None:
    """Kafka's printf tables: a blank line, then each row, columns left-aligned and
    padded (the last one not)."""
    print(file=out)
    for row in rows:
        cells = [f"{c:<{w}}" for c, w in zip(row, widths, strict=False)]
        print(" ".join([*cells, *row[len(widths) :]]), file=out)


def _print_state(group: str, desc: Any, coordinator: str, verbose: bool, out: TextIO) -> None:
    if desc.group_state == "Empty":
        print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
    widths = [max(15, len(group)), max(25, len(coordinator)), 15]
    head = ["GROUP", "COORDINATOR (ID)", "STATE"]
    row = [group, coordinator, desc.group_state]
    if verbose:  # the epochs (Kafka's GROUP-EPOCH, ASSIGNMENT-EPOCH)
        widths += [12, 17]
        head += ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
        row += [str(desc.group_epoch), str(desc.assignment_epoch)]
    _table([[*head, "#MEMBERS"], [*row, str(len(desc.members))]], widths, out)


def _print_members(group: str, desc: Any, verbose: bool, out: TextIO) -> None:
    if not desc.members:
        print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
        return
    members = sorted(desc.members, key=lambda m: m.member_id)
    rows = [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            + (["MEMBER-EPOCH"] if verbose else []) + ["ASSIGNMENT"]]  # fmt: skip
    for m in members:
        count, text = _assignment(m)
        rows.append([group, m.member_id, m.client_host, m.client_id, str(count)]
                    + ([str(m.member_epoch)] if verbose else []) + [text])  # fmt: skip
    widths = [max(15, len(group))] + [max(15, *(len(r[i]) for r in rows)) for i in (1, 2, 3)]
    _table(rows, widths + [12] + ([13] if verbose else []), out)


def _print_offsets(group: str, coordinator: tuple[str, int], verbose: bool, out: TextIO) -> None:
    """Each share-partition's start offset and lag (and with --verbose the leader epoch
    that last wrote it), as Kafka's ShareGroupCommand prints them ('-' where unknown)."""
    resp = _call([coordinator], ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1,
                 {"groups": [{"group_id": group, "topics": None}]})  # fmt: skip
    g = resp.groups[0]
    if int(g.error_code) != 0:
        raise ToolError(f"describe offsets of {group}: {g.error_message or g.error_code.name}")
    found = []
    for t in g.topics:
        for p in t.partitions:
            if int(p.error_code) != 0:
                why = p.error_message or p.error_code.name
                raise ToolError(
                    f"describe offsets of {group} on {t.topic_name}-{p.partition_index}: {why}"
                )
            found.append((t.topic_name, p.partition_index, p.leader_epoch, p.start_offset, p.lag))
    if not found:
        print(f"\nShare group '{group}' has no offset information.", file=out)
        return
    found.sort()

    def known(n: int) -> str:
        return str(n) if n >= 0 else "-"

    rows = [["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else [])
            + ["START-OFFSET", "LAG"]]  # fmt: skip
    for topic, idx, epoch, start, lag in found:
        rows.append([group, topic, str(idx)] + ([known(epoch)] if verbose else [])
                    + [known(start), known(lag)])  # fmt: skip
    widths = [max(15, len(group)), max(15, *(len(r[1]) for r in rows)), 10, 13]
    _table(rows, widths + ([13] if verbose else []), out)
