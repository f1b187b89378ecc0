"""`topics`: Kafka's kafka-topics.sh (--create, --list, --describe, --alter, --delete),
over a real Kafka client (confluent-kafka), printing what Kafka prints. As Kafka's,
--topic is a regular expression (matching whole names) for every action but --create."""

from __future__ import annotations

import re
import uuid
from typing import Any, TextIO

from keeperless.metadata.admin import INTERNAL_TOPICS
from keeperless.protocol.apis import ApiKey
from keeperless.storage.meta_properties import uuid_to_kafka
from keeperless.tools.client import ToolError
from keeperless.tools.rdkafka import TIMEOUT_S, Session

__all__ = ["check_topic_args", "run_topics"]

ACTIONS = ("list", "describe", "create", "alter", "delete")
INTERNAL = INTERNAL_TOPICS
PARTITION_FILTERS = (
    "under_replicated_partitions",
    "unavailable_partitions",
    "under_min_isr_partitions",
    "at_min_isr_partitions",
)


def _configs(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for p in pairs or ():
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ToolError(f"--config {p!r}: expected key=value")
        out[k] = v
    return out


def _topic_id(tid: Any) -> str:
    if tid is None:
        return ""
    hi = tid.get_most_significant_bits() & (2**64 - 1)
    lo = tid.get_least_significant_bits() & (2**64 - 1)
    return uuid_to_kafka(uuid.UUID(int=(hi << 64) | lo))


def parse_replica_assignment(text: str) -> list[list[int]]:
    """Kafka's --replica-assignment: partitions separated by commas, each partition's
    replicas by colons (0:1:2,1:2:0)."""
    out: list[list[int]] = []
    for i, part in enumerate(text.split(",")):
        try:
            replicas = [int(b) for b in part.split(":")]
        except ValueError:
            raise ToolError(f"--replica-assignment {text!r}: expected broker ids like "
                            "1:2:3,2:3:1") from None  # fmt: skip
        dups = sorted({b for b in replicas if replicas.count(b) > 1})
        if dups:
            raise ToolError("Partition replica lists may not contain duplicate entries: "
                            + ",".join(map(str, dups)))  # fmt: skip
        if out and len(replicas) != len(out[0]):
            raise ToolError(f"Partition {i} has different replication factor: {part}")
        out.append(replicas)
    return out


def check_topic_args(args: Any) -> None:
    """Kafka's option rules, checked before connecting."""
    given = [a for a in ACTIONS if getattr(args, a)]
    if len(given) != 1:
        raise ToolError(
            "Command must include exactly one action: --list, --describe, --create, --alter "
            "or --delete"
        )
    action = given[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise ToolError(f'Missing required argument "[topic]" for --{action}')
    if args.partitions is not None and args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise ToolError("The replication factor must be between 1 and 32767 inclusive")
    if args.if_not_exists and action != "create":
        raise ToolError("Option --if-not-exists is only valid with --create")
    if args.if_exists and action not in ("alter", "delete", "describe"):
        raise ToolError("Option --if-exists is only valid with --alter, --delete or --describe")
    filters = [f for f in PARTITION_FILTERS if getattr(args, f)]
    if (filters or args.topics_with_overrides) and action != "describe":
        name = filters[0] if filters else "topics_with_overrides"
        raise ToolError(f"Option --{name.replace('_', '-')} is only valid with --describe")
    if len(filters) + bool(args.topics_with_overrides) > 1:
        raise ToolError(
            "Options --topics-with-overrides, --under-replicated-partitions, "
            "--unavailable-partitions, --under-min-isr-partitions and "
            "--at-min-isr-partitions may not be combined"
        )
    if getattr(args, "replica_assignment", None) is not None:
        if action != "create":
            raise ToolError("Option --replica-assignment is only valid with --create here")
        for other in ("partitions", "replication_factor"):
            if getattr(args, other) is not None:
                raise ToolError(f'Option "[replica-assignment]" can\'t be used with option '
                                f'"[{other.replace("_", "-")}]"')  # fmt: skip
        parse_replica_assignment(args.replica_assignment)
    if action == "alter" and args.partitions is None:
        raise ToolError("--alter needs --partitions (change configs with kafka-configs.sh)")
    if action != "create" and args.topic is not None:
        try:
            re.compile(args.topic)
        except re.error as e:
            raise ToolError(
                f"--topic {args.topic!r} is not a valid regular expression: {e}"
            ) from None


class _Topics:
    def __init__(self, args: Any, extra: dict[str, str], out: TextIO) -> None:
        self.args = args
        self.out = out
        self.extra = extra
        self.session = Session(args.bootstrap_server, extra)
        self.admin = self.session.admin()

    def result(self, fut: Any) -> Any:
        return self.session.wait(self.admin, fut)

    def matching(self, exists_required: bool) -> list[str]:
        """The topics --topic names (a regular expression), or every topic without it;
        internal topics left out with --exclude-internal."""
        md = self.admin.list_topics(timeout=TIMEOUT_S)
        names = sorted(md.topics)
        if self.args.exclude_internal:
            names = [n for n in names if n not in INTERNAL]
        if self.args.topic is None:
            return names
        pattern = re.compile(self.args.topic)
        found = [n for n in names if pattern.fullmatch(n)]
        if not found and exists_required and not self.args.if_exists:
            raise ToolError(f"Topic '{self.args.topic}' does not exist as expected")
        return found

    def create(self) -> None:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        a = self.args
        if getattr(a, "replica_assignment", None) is not None:
            placed = parse_replica_assignment(a.replica_assignment)
            # librdkafka wants the partition count with an assignment (not -1)
            nt = NewTopic(a.topic, len(placed), -1, replica_assignment=placed,
                          config=_configs(a.config))  # fmt: skip
        else:
            nt = NewTopic(
                a.topic, a.partitions or -1, a.replication_factor or -1, config=_configs(a.config)
            )
        try:
            self.result(self.admin.create_topics([nt], request_timeout=TIMEOUT_S)[a.topic])
        except ToolError as e:
            if a.if_not_exists and "already exists" in str(e):
                return
            raise
        print(f"Created topic {a.topic}.", file=self.out)

    def delete(self) -> None:
        names = self.matching(exists_required=True)
        internal = [n for n in names if n in INTERNAL]
        if internal:
            raise ToolError(
                f"Topic {internal[0]} is a kafka internal topic and is not allowed to be marked "
                "for deletion."
            )
        if names:
            futs = self.admin.delete_topics(names, request_timeout=TIMEOUT_S)
            for n in names:
                self.result(futs[n])

    def alter(self) -> None:
        from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

        names = self.matching(exists_required=True)
        if not names:
            return
        futs = self.admin.create_partitions(
            [NewPartitions(n, self.args.partitions) for n in names], request_timeout=TIMEOUT_S
        )
        for n in names:
            self.result(futs[n])

    def describe(self) -> None:
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

        a = self.args
        names = self.matching(exists_required=True)
        if not names:
            return
        descs = self.admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        cfgs = self.admin.describe_configs(
            [ConfigResource("topic", n) for n in names], request_timeout=TIMEOUT_S
        )
        explicit: dict[str, str] = {}
        min_isr: dict[str, int] = {}
        for res, fut in cfgs.items():
            entries = self.result(fut)
            explicit[res.name] = ",".join(
                f"{k}={e.value}"
                for k, e in sorted(entries.items())
                if not e.is_default and e.value is not None
            )
            entry = entries.get("min.insync.replicas")
            min_isr[res.name] = int(entry.value) if entry is not None and entry.value else 1
        filters = [f for f in PARTITION_FILTERS if getattr(a, f)]
        moving = self.reassignments(names)
        eligible = self.eligible(names)
        for name in names:
            d = self.result(descs[name])
            parts = sorted(d.partitions, key=lambda p: p.id)
            if a.topics_with_overrides and not explicit.get(name):
                continue
            if not filters:
                rf = len(parts[0].replicas) if parts else 0
                print(
                    f"Topic: {name}\tTopicId: {_topic_id(d.topic_id)}\tPartitionCount: "
                    f"{len(parts)}\tReplicationFactor: {rf}\tConfigs: {explicit.get(name, '')}",
                    file=self.out,
                )
            if a.topics_with_overrides:
                continue
            for p in parts:
                leader = p.leader.id if p.leader is not None else -1
                replicas = [r.id for r in p.replicas]
                isr = [r.id for r in p.isr]
                if not _shown(filters, leader, replicas, isr, min_isr.get(name, 1)):
                    continue
                line = (
                    f"\tTopic: {name}\tPartition: {p.id}\tLeader: "
                    f"{leader if leader >= 0 else 'none'}\tReplicas: "
                    f"{','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}"
                )
                move = moving.get((name, p.id))
                if move is not None:  # as Kafka's TopicCommand shows a reassignment
                    line += (f"\tAdding Replicas: {','.join(map(str, move[0]))}"
                             f"\tRemoving Replicas: {','.join(map(str, move[1]))}")  # fmt: skip
                elr, last_known = eligible.get((name, p.id), (None, None))
                line += "\tElr: " + ("N/A" if elr is None else ",".join(map(str, elr)))
                line += "\tLastKnownElr: " + (
                    "N/A" if last_known is None else ",".join(map(str, last_known))
                )
                print(line, file=self.out)

    def reassignments(self, names: list[str]) -> dict[tuple[str, int], tuple[Any, Any]]:
        """(adding, removing) of the partitions being reassigned (ListPartitionReassignments
        through the tools' own client: librdkafka has no call for it); none when it
        cannot be asked."""
        from keeperless.tools.client import call, parse_servers, security_of

        try:
            servers = parse_servers(self.args.bootstrap_server, "--bootstrap-server")
            body = {"timeout": 10_000, "topics": None}  # all: few run at once
            resp = call(servers, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, body,
                        security=security_of(self.extra, "--command-config"))  # fmt: skip
        except (ToolError, OSError):
            return {}
        return {(t.name, p.partition_index): (p.adding_replicas, p.removing_replicas)
                for t in resp.topics if t.name in names for p in t.partitions}  # fmt: skip

    def eligible(self, names: list[str]) -> dict[tuple[str, int], tuple[Any, Any]]:
        """(ELR, last known ELR) of each partition (KIP-966), from DescribeTopicPartitions
        through the tools' own client (librdkafka does not show them); none when it
        cannot be asked (Kafka's tool then prints N/A)."""
        from keeperless.tools.client import call, parse_servers, security_of

        out: dict[tuple[str, int], tuple[Any, Any]] = {}
        try:
            servers = parse_servers(self.args.bootstrap_server, "--bootstrap-server")
            cursor = None
            while True:
                body = {"topics": [{"name": n} for n in names],
                        "response_partition_limit": 2000, "cursor": cursor}  # fmt: skip
                resp = call(servers, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body,
                            security=security_of(self.extra, "--command-config"))  # fmt: skip
                for t in resp.topics:
                    for p in t.partitions:
                        out[(t.name, p.partition_index)] = (p.eligible_leader_replicas,
                                                            p.last_known_elr)  # fmt: skip
                nxt = resp.next_cursor
                if nxt is None:
                    return out
                cursor = {"topic_name": nxt.topic_name, "partition_index": nxt.partition_index}
        except (ToolError, OSError):
            return out


def _shown(filters: list[str], leader: int, replicas: list[int], isr: list[int], mi: int) -> bool:
    if not filters:
        return True
    kind = filters[0]
    if kind == "under_replicated_partitions":
        return len(isr) < len(replicas)
    if kind == "unavailable_partitions":
        return leader < 0
    if kind == "under_min_isr_partitions":
        return len(isr) < mi
    return len(isr) == mi  # at_min_isr_partitions


def run_topics(args: Any, extra: dict[str, str], out: TextIO) -> int:
    check_topic_args(args)
    tool = _Topics(args, extra, out)
    if args.list:
        for name in tool.matching(exists_required=False):
            print(name, file=out)
    elif args.create:
        tool.create()
    elif args.delete:
        tool.delete()
    elif args.alter:
        tool.alter()
    else:
        tool.describe()
    return 0
