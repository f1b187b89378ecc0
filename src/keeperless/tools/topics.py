"""`topics`: Kafka's kafka-topics.sh (--create, --list, --describe, --alter, --delete),
over a real Kafka client (confluent-kafka), printing what Kafka prints."""

from __future__ import annotations

import uuid
from typing import Any, TextIO

from keeperless.storage.meta_properties import uuid_to_kafka
from keeperless.tools.client import ToolError
from keeperless.tools.rdkafka import TIMEOUT_S, Session

__all__ = ["run_topics"]


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


def run_topics(args: Any, extra: dict[str, str], out: TextIO) -> int:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    session = Session(args.bootstrap_server, extra)
    admin = session.admin()

    def _result(fut: Any) -> Any:
        return session.wait(admin, fut)

    if args.list:
        md = admin.list_topics(timeout=TIMEOUT_S)
        for name in sorted(md.topics):
            print(name, file=out)
        return 0
    if args.create:
        if not args.topic:
            raise ToolError("--create needs --topic")
        nt = NewTopic(
            args.topic,
            args.partitions or -1,
            args.replication_factor or -1,
            config=_configs(args.config),
        )
        _result(admin.create_topics([nt], request_timeout=TIMEOUT_S)[args.topic])
        print(f"Created topic {args.topic}.", file=out)
        return 0
    if args.delete:
        if not args.topic:
            raise ToolError("--delete needs --topic")
        _result(admin.delete_topics([args.topic], request_timeout=TIMEOUT_S)[args.topic])
        return 0
    if args.alter:
        if not args.topic or not args.partitions:
            raise ToolError("--alter needs --topic and --partitions")
        _result(
            admin.create_partitions(
                [NewPartitions(args.topic, args.partitions)], request_timeout=TIMEOUT_S
            )[args.topic]
        )
        return 0
    if args.describe:
        md = admin.list_topics(timeout=TIMEOUT_S)
        names = [args.topic] if args.topic else sorted(md.topics)
        if args.topic and args.topic not in md.topics:
            raise ToolError(f"Topic '{args.topic}' does not exist as expected")
        if not names:
            return 0
        descs = admin.describe_topics(TopicCollection(names))
        cfgs = admin.describe_configs([ConfigResource("topic", n) for n in names])
        explicit = {}
        for res, fut in cfgs.items():
            entries = _result(fut)
            explicit[res.name] = ",".join(
                f"{k}={e.value}"
                for k, e in sorted(entries.items())
                if not e.is_default and e.value is not None
            )
        for name in names:
            d = _result(descs[name])
            parts = sorted(d.partitions, key=lambda p: p.id)
            rf = len(parts[0].replicas) if parts else 0
            rows = []
            for p in parts:
                leader = p.leader.id if p.leader is not None else -1
                replicas = [r.id for r in p.replicas]
                isr = [r.id for r in p.isr]
                if args.under_replicated_partitions and len(isr) >= len(replicas):
                    continue
                if args.unavailable_partitions and leader >= 0:
                    continue
                rows.append(
                    f"\tTopic: {name}\tPartition: {p.id}\tLeader: "
                    f"{leader if leader >= 0 else 'none'}\tReplicas: "
                    f"{','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}"
                )
            if (args.under_replicated_partitions or args.unavailable_partitions) and not rows:
                continue
            print(
                f"Topic: {name}\tTopicId: {_topic_id(d.topic_id)}\tPartitionCount: "
                f"{len(parts)}\tReplicationFactor: {rf}\tConfigs: {explicit.get(name, '')}",
                file=out,
            )
            for row in rows:
                print(row, file=out)
        return 0
    raise ToolError("one of --list, --create, --describe, --alter, --delete is required")
