"""`consumer-groups`: Kafka's kafka-consumer-groups.sh over confluent-kafka: --list
[--state], --describe [--offsets | --members [--verbose] | --state], --delete,
--reset-offsets and --delete-offsets, for --group G (repeatable) or --all-groups."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import ToolError, call
from keeperless.tools.group_offsets import (
    SPEC_FLAGS,
    check_reset_args,
    parse_topic_scopes,
    reset_spec,
)
from keeperless.tools.rdkafka import TIMEOUT_S, Session

__all__ = ["run_consumer_groups"]

MISSING = "-"


@dataclass(frozen=True)
class _Epochs:
    group: int
    assignment: int
    members: dict[str, int]


ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
# confluent-kafka's ConsumerGroupState values -> Kafka's names
STATE_NAMES = {
    0: "Unknown",
    1: "PreparingRebalance",
    2: "CompletingRebalance",
    3: "Stable",
    4: "Dead",
    5: "Empty",
}
EMPTY, DEAD, STABLE = "Empty", "Dead", "Stable"


def _state(desc: Any) -> str:
    value = getattr(desc.state, "value", desc.state)
    return STATE_NAMES.get(int(value), str(desc.state)) if value is not None else "Unknown"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_args(args: Any) -> None:
    """Kafka's option rules, checked before any connection."""
    given = [a for a in ACTIONS if getattr(args, a, False)]
    if len(given) != 1:
        raise ToolError(
            "Command must include exactly one action: " + ", ".join(_flag(a) for a in ACTIONS)
        )
    action = given[0]
    groups = args.group or []
    if groups and args.all_groups:
        raise ToolError("Option --group may not be combined with --all-groups")
    if action in ("describe", "delete", "reset_offsets") and not (groups or args.all_groups):
        raise ToolError(f"Option {_flag(action)} takes one of these options: --all-groups, --group")
    if action == "delete_offsets" and (len(groups) != 1 or not args.topic):
        raise ToolError("Option --delete-offsets takes the following options: --group, --topic")
    views = [f for f in ("members", "offsets") if getattr(args, f)]
    views += ["state"] if args.state is not None else []
    if views and action != "describe" and not (action == "list" and views == ["state"]):
        raise ToolError(f"Option {_flag(views[0])} is only valid with --describe")
    if len(views) > 1:
        raise ToolError("Options --members, --offsets and --state may not be combined")
    if args.verbose and action != "describe":
        raise ToolError("Option --verbose is only valid with --describe")
    if action == "reset_offsets":
        check_reset_args(args)
    elif (
        args.all_topics
        or args.execute
        or args.dry_run
        or any(getattr(args, f) not in (None, False) for f in SPEC_FLAGS)
    ):
        raise ToolError(
            "--all-topics, --execute, --dry-run and the --to-*/--shift-by/--by-duration "
            "options are only valid with --reset-offsets"
        )
    if args.topic and action not in ("reset_offsets", "delete_offsets"):
        raise ToolError("Option --topic is only valid with --reset-offsets or --delete-offsets")


@dataclass
class _Row:
    topic: str
    partition: int
    offset: int | None
    member: Any | None


class _Tool:
    def __init__(self, args: Any, extra: dict[str, str], out: TextIO) -> None:
        self.args = args
        self.out = out
        self.session = Session(args.bootstrap_server, extra)
        self.admin = self.session.admin()
        self.failed = False

    def wait(self, fut: Any) -> Any:
        return self.session.wait(self.admin, fut)

    def error(self, message: str) -> None:
        """Kafka's 'Error: ...' for one group; the command goes on and exits 1."""
        print(f"Error: {message}", file=sys.stderr)
        self.failed = True

    # --- listing and describing ---------------------------------------------------------

    def listings(self) -> list[Any]:
        res = self.wait(self.admin.list_consumer_groups(request_timeout=TIMEOUT_S))
        return sorted(res.valid, key=lambda g: g.group_id)

    def group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g.group_id for g in self.listings()]
        return list(dict.fromkeys(self.args.group))

    def list_groups(self) -> None:
        listings = self.listings()
        if self.args.state is None:
            for g in listings:
                print(g.group_id, file=self.out)
            return
        wanted = {s.strip().lower() for s in self.args.state.split(",") if s.strip()}
        known = {n.lower() for n in STATE_NAMES.values()}
        bad = wanted - known
        if bad:
            raise ToolError(
                f"Invalid state list '{self.args.state}'. Valid states are: "
                + ", ".join(n for n in STATE_NAMES.values() if n != "Unknown")
            )
        rows = [(g.group_id, _state(g)) for g in listings]
        rows = [r for r in rows if not wanted or r[1].lower() in wanted]
        width = max([15, *(len(g) for g, _ in rows)]) + 10
        print(f"{'GROUP':<{width}} {'STATE':<20}".rstrip(), file=self.out)
        for g, s in rows:
            print(f"{g:<{width}} {s:<20}".rstrip(), file=self.out)

    def describe(self) -> None:
        ids = self.group_ids()
        if not ids:
            return
        futs = self.admin.describe_consumer_groups(ids, request_timeout=TIMEOUT_S)
        for gid in ids:
            desc = self.wait(futs[gid])
            state = _state(desc)
            if not self._announce(gid, state):
                continue
            if self.args.members:
                self.print_members(gid, desc)
            elif self.args.state is not None:
                self.print_state(gid, desc, state)
            else:
                self.print_offsets(gid, desc)

    def _announce(self, gid: str, state: str) -> bool:
        if state == DEAD:
            self.error(f"Consumer group '{gid}' does not exist.")
            return False
        if state == EMPTY:
            print(f"Consumer group '{gid}' has no active members.", file=sys.stderr)
        elif state != STABLE:
            print(f"Warning: Consumer group '{gid}' is rebalancing.", file=sys.stderr)
        return True

    def committed(self, gid: str) -> dict[tuple[str, int], int]:
        return {tp: offset for tp, (offset, _) in self.committed_with_epochs(gid).items()}

    def committed_with_epochs(self, gid: str) -> dict[tuple[str, int], tuple[int, int | None]]:
        """(offset, leader epoch or None) of each partition the group committed."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        res = self.wait(
            self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(gid)], request_timeout=TIMEOUT_S
            )[gid]
        )
        return {
            (tp.topic, tp.partition): (tp.offset, getattr(tp, "leader_epoch", None))
            for tp in res.topic_partitions
            if tp.offset >= 0
        }

    def log_offsets(self, tps: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
        """The offsets ``spec`` (OffsetSpec) names, per partition; a partition whose topic
        is gone (or has no leader) is left out rather than failing the whole command."""
        from confluent_kafka import KafkaException, TopicPartition

        out: dict[tuple[str, int], int] = {}
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        for topic, parts in sorted(by_topic.items()):
            try:
                futs = self.admin.list_offsets(
                    {TopicPartition(topic, p): spec for p in parts}, request_timeout=TIMEOUT_S
                )
            except KafkaException:
                continue
            for tp, fut in futs.items():
                try:
                    out[(tp.topic, tp.partition)] = self.session.wait(self.admin, fut).offset
                except ToolError:
                    continue
        return out

    def print_offsets(self, gid: str, desc: Any) -> None:
        from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

        OffsetSpec: Any = _OffsetSpec

        with_epochs = self.committed_with_epochs(gid)
        committed = {tp: offset for tp, (offset, _) in with_epochs.items()}
        rows: list[_Row] = []
        assigned: set[tuple[str, int]] = set()
        members = [m for m in desc.members if m.assignment and m.assignment.topic_partitions]
        members.sort(key=lambda m: -len(m.assignment.topic_partitions))
        for m in members:
            for tp in sorted(m.assignment.topic_partitions, key=lambda t: (t.topic, t.partition)):
                key = (tp.topic, tp.partition)
                assigned.add(key)
                rows.append(_Row(tp.topic, tp.partition, committed.get(key), m))
        rows += [
            _Row(t, p, o, None) for (t, p), o in sorted(committed.items()) if (t, p) not in assigned
        ]
        if not rows:
            return
        ends = self.log_offsets([(r.topic, r.partition) for r in rows], OffsetSpec.latest())
        table = []
        for r in sorted(rows, key=lambda r: (r.topic, r.partition)):
            end = ends.get((r.topic, r.partition))
            lag = end - r.offset if end is not None and r.offset is not None else None
            epoch = with_epochs.get((r.topic, r.partition), (0, None))[1]
            verbose = [_opt(epoch if epoch is not None and epoch >= 0 else None)]
            table.append(
                [
                    gid,
                    r.topic,
                    str(r.partition),
                    *(verbose if self.args.verbose else []),
                    _opt(r.offset),
                    _opt(end),
                    _opt(lag),
                    r.member.member_id if r.member else MISSING,
                    r.member.host if r.member else MISSING,
                    r.member.client_id if r.member else MISSING,
                ]
            )
        header = ["GROUP", "TOPIC", "PARTITION"]
        header += ["LEADER-EPOCH"] if self.args.verbose else []
        header += ["CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        fixed = {2: 10, 3: 15, 4: 15, 5: 15} | ({6: 15} if self.args.verbose else {})
        _table(self.out, header, table, fixed)

    def print_members(self, gid: str, desc: Any) -> None:
        with_instance = any(getattr(m, "group_instance_id", None) for m in desc.members)
        header = ["GROUP", "CONSUMER-ID"]
        header += ["GROUP-INSTANCE-ID"] if with_instance else []
        header += ["HOST", "CLIENT-ID", "#PARTITIONS"]
        if self.args.verbose:
            header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        rows = []
        epochs = self._epochs(gid, desc) if self.args.verbose else None
        for m in sorted(desc.members, key=lambda m: m.member_id):
            parts = list(m.assignment.topic_partitions) if m.assignment else []
            row = [gid, m.member_id]
            row += [m.group_instance_id or MISSING] if with_instance else []
            row += [m.host, m.client_id, str(len(parts))]
            if self.args.verbose:
                target = getattr(m, "target_assignment", None)
                member_epoch = epochs.members.get(m.member_id) if epochs else None
                row += [
                    _opt(member_epoch),
                    _assignment(parts),
                    _opt(epochs.assignment if epochs else None),
                    _assignment(list(target.topic_partitions)) if target else MISSING,
                ]
            rows.append(row)
        _table(self.out, header, rows, {})

    def print_state(self, gid: str, desc: Any, state: str) -> None:
        c = desc.coordinator
        coordinator = f"{c.host}:{c.port}  ({c.id})" if c is not None else MISSING
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
        row = [gid, coordinator, desc.partition_assignor or MISSING, state]
        if self.args.verbose:  # a consumer-protocol group's epochs (KIP-848)
            epochs = self._epochs(gid, desc)
            header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
            row += [_opt(epochs.group if epochs else None),
                    _opt(epochs.assignment if epochs else None)]  # fmt: skip
        header.append("#MEMBERS")
        row.append(str(len(desc.members)))
        _table(self.out, header, [row], {1: 25, 2: 20, 3: 20})

    def _epochs(self, gid: str, desc: Any) -> _Epochs | None:
        """A consumer-protocol group's epochs, which the admin client does not give:
        ConsumerGroupDescribe (KIP-848) asked of its coordinator (None: a classic group,
        or no answer)."""
        from confluent_kafka import ConsumerGroupType

        c = desc.coordinator
        if getattr(desc, "type", None) != ConsumerGroupType.CONSUMER or c is None:
            return None
        try:
            resp = call([(c.host, c.port)], ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                        {"group_ids": [gid], "include_authorized_operations": False},
                        TIMEOUT_S)  # fmt: skip
        except ToolError:
            return None
        g = resp.groups[0]
        if int(g.error_code) != 0:
            return None
        return _Epochs(g.group_epoch, g.assignment_epoch,
                       {m.member_id: m.member_epoch for m in g.members})  # fmt: skip

    # --- changing -----------------------------------------------------------------------

    def delete(self) -> None:
        ids = self.group_ids()
        if not ids:
            print("No consumer groups to delete.", file=self.out)
            return
        futs = self.admin.delete_consumer_groups(ids, request_timeout=TIMEOUT_S)
        failures = []
        for gid in ids:
            try:
                self.wait(futs[gid])
            except ToolError as e:
                failures.append((gid, str(e)))
        done = [g for g in ids if g not in dict(failures)]
        if not failures:
            quoted = ", ".join(f"'{g}'" for g in done)
            print(
                f"Deletion of requested consumer groups ({quoted}) was successful.", file=self.out
            )
            return
        print("Deletion of some consumer groups failed:", file=self.out)
        for gid, why in failures:
            print(f"* Group '{gid}' could not be deleted due to: {why}", file=self.out)
        if done:
            quoted = ", ".join(f"'{g}'" for g in done)
            print(f"These consumer groups were deleted successfully: {quoted}", file=self.out)
        self.failed = True

    def reset_offsets(self) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        execute = bool(self.args.execute)
        ids = self.group_ids()
        futs = self.admin.describe_consumer_groups(ids, request_timeout=TIMEOUT_S) if ids else {}
        plans: list[tuple[str, dict[tuple[str, int], int]]] = []
        for gid in ids:
            state = _state(self.wait(futs[gid]))
            if state not in (EMPTY, DEAD):
                self.error(
                    f"Assignments can only be reset if the group '{gid}' is inactive, but the "
                    f"current state is {state}."
                )
                continue
            plan = reset_spec(self, gid)
            plans.append((gid, plan))
            if execute and plan:
                new = [TopicPartition(t, p, o) for (t, p), o in sorted(plan.items())]
                self.wait(
                    self.admin.alter_consumer_group_offsets(
                        [ConsumerGroupTopicPartitions(gid, new)], request_timeout=TIMEOUT_S
                    )[gid]
                )
        rows = [
            [gid, t, str(p), str(o)] for gid, plan in plans for (t, p), o in sorted(plan.items())
        ]
        if plans:
            _table(self.out, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, {2: 10})

    def partitions_of(self, topics: list[str]) -> dict[str, list[int]]:
        md = self.admin.list_topics(timeout=TIMEOUT_S)
        out = {}
        for t in topics:
            meta = md.topics.get(t)
            if meta is None or meta.error is not None:
                raise ToolError(f"Topic '{t}' does not exist")
            out[t] = sorted(meta.partitions)
        return out

    def delete_offsets(self) -> None:
        from keeperless.tools.group_offsets import delete_group_offsets

        gid = self.args.group[0]
        scopes = parse_topic_scopes(self.args.topic)
        whole = [t for t, parts in scopes.items() if parts is None]
        known = self.partitions_of(whole) if whole else {}
        wanted = {t: parts if parts is not None else known[t] for t, parts in scopes.items()}
        top, results = delete_group_offsets(self.args.bootstrap_server, gid, wanted)
        if top is None and any(err is not None for err in results.values()):
            top = "Encountered some partition-level error, see the follow-up details."
        if top is None:
            print(f"Request succeeded for deleting offsets from group {gid}.", file=self.out)
        else:
            self.error(top)
        rows = [
            [t, str(p), "Successful" if err is None else f"Error: {err}"]
            for (t, p), err in sorted(results.items())
        ]
        if any(r[2] != "Successful" for r in rows):
            self.failed = True
        _table(self.out, ["TOPIC", "PARTITION", "STATUS"], rows, {1: 10, 2: 15})


def _opt(v: int | None) -> str:
    return MISSING if v is None else str(v)


def _assignment(parts: list[Any]) -> str:
    if not parts:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for tp in parts:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))


def _table(out: TextIO, header: list[str], rows: list[list[str]], fixed: dict[int, int]) -> None:
    """Left-aligned columns as Kafka's tool prints them: a fixed width where Kafka has
    one, otherwise the longest value (at least 15); the last column is not padded."""
    widths = []
    for i, h in enumerate(header):
        if i in fixed:
            widths.append(max(fixed[i], len(h)))
        else:
            widths.append(max([15, len(h), *(len(r[i]) for r in rows)]))
    for r in [header, *rows]:
        cells = [f"{c:<{w}}" for c, w in zip(r[:-1], widths, strict=False)] + [r[-1]]
        print(" ".join(cells).rstrip(), file=out)


def run_consumer_groups(args: Any, extra: dict[str, str], out: TextIO) -> int:
    check_args(args)
    if args.reset_offsets and not (args.execute or args.dry_run):
        print(
            "WARN: No action will be performed as the --execute option is missing. In a future "
            "major release, the default behavior of this command will be to prompt the user "
            "before executing the reset rather than doing a dry run. You should add the "
            "--dry-run option explicitly if you are scripting this command and want to keep "
            "the current default behavior without prompting.",
            file=sys.stderr,
        )
    tool = _Tool(args, extra, out)
    if args.list:
        tool.list_groups()
    elif args.describe:
        tool.describe()
    elif args.delete:
        tool.delete()
    elif args.reset_offsets:
        tool.reset_offsets()
    else:
        tool.delete_offsets()
    return 1 if tool.failed else 0
