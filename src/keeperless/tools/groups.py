"""`consumer-groups`: Kafka's kafka-consumer-groups.sh over confluent-kafka."""

from __future__ import annotations

from typing import Any, TextIO

from keeperless.tools.client import ToolError
from keeperless.tools.rdkafka import TIMEOUT_S, Session

__all__ = ["run_consumer_groups"]


def run_consumer_groups(args: Any, extra: dict[str, str], out: TextIO) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    session = Session(args.bootstrap_server, extra)
    admin = session.admin()

    def _result(fut: Any) -> Any:
        return session.wait(admin, fut)

    if args.list:
        res = _result(admin.list_consumer_groups(request_timeout=TIMEOUT_S))
        for g in sorted(res.valid, key=lambda g: g.group_id):
            print(g.group_id, file=out)
        return 0
    if not args.group:
        raise ToolError("--group is required")
    if args.delete:
        _result(admin.delete_consumer_groups([args.group], request_timeout=TIMEOUT_S)[args.group])
        print(f"Deletion of requested consumer groups ('{args.group}') was successful.", file=out)
        return 0
    offsets = _result(
        admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(args.group)])[args.group]
    )
    tps = [tp for tp in offsets.topic_partitions if tp.offset >= 0]
    from confluent_kafka import Consumer

    probe = Consumer(
        session.conf(**{"group.id": f"{args.group}-probe", "enable.auto.commit": False})
    )
    try:
        ends = {
            (tp.topic, tp.partition): probe.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=10
            )
            for tp in tps
        }
        if args.reset_offsets:
            topic_tps = [(t, p) for (t, p) in ends if not args.topic or t == args.topic]
            if args.topic and not topic_tps:
                md = probe.list_topics(args.topic, timeout=10)
                topic_tps = [(args.topic, p) for p in md.topics[args.topic].partitions]
                for t, p in topic_tps:
                    ends[(t, p)] = probe.get_watermark_offsets(TopicPartition(t, p), timeout=10)
            new = []
            for t, p in sorted(topic_tps):
                lo, hi = ends[(t, p)]
                target = lo if args.to_earliest else hi if args.to_latest else args.to_offset
                if target is None:
                    raise ToolError("one of --to-earliest, --to-latest, --to-offset is required")
                new.append(TopicPartition(t, p, max(lo, min(int(target), hi))))
            print(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':<10} NEW-OFFSET", file=out)
            for tp in new:
                print(f"{args.group:<20} {tp.topic:<20} {tp.partition:<10} {tp.offset}", file=out)
            if args.execute:
                _result(
                    admin.alter_consumer_group_offsets(
                        [ConsumerGroupTopicPartitions(args.group, new)]
                    )[args.group]
                )
            return 0
    finally:
        probe.close()
    # --describe
    desc = _result(admin.describe_consumer_groups([args.group])[args.group])
    owners = {}
    for member in desc.members:
        for tp in member.assignment.topic_partitions if member.assignment else ():
            owners[(tp.topic, tp.partition)] = member
    print(
        f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':<10} {'CURRENT-OFFSET':<15} "
        f"{'LOG-END-OFFSET':<15} {'LAG':<8} {'CONSUMER-ID':<40} {'HOST':<15} CLIENT-ID",
        file=out,
    )
    for tp in sorted(tps, key=lambda t: (t.topic, t.partition)):
        hi = ends[(tp.topic, tp.partition)][1]
        m = owners.get((tp.topic, tp.partition))
        print(
            f"{args.group:<20} {tp.topic:<20} {tp.partition:<10} {tp.offset:<15} {hi:<15} "
            f"{hi - tp.offset:<8} {m.member_id if m else '-':<40} {m.host if m else '-':<15} "
            f"{m.client_id if m else '-'}",
            file=out,
        )
    return 0
