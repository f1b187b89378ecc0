"""`delete-records`: Kafka's kafka-delete-records.sh. Moves the log start offset of the
partitions an --offset-json-file names (DeleteRecords, API 21, sent to each partition's
leader) and prints each one's new low watermark, as Kafka's tool does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from keeperless.tools.errors import ToolError
from keeperless.tools.rdkafka import Session, kafka_error_text

__all__ = ["parse_offsets", "run_delete_records"]


def parse_offsets(text: str, source: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of Kafka's offset JSON:
    {"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}
    (offset -1: up to the high watermark)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolError(f"{source}: not JSON ({e.msg} at line {e.lineno})") from None
    version = doc.get("version", 1) if isinstance(doc, dict) else None
    if version != 1:
        raise ToolError(f"{source}: Not supported version field value {version}")
    rows = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ToolError(f'{source}: expected {{"partitions": [{{"topic": ..., "partition": ..., '
                        '"offset": ...}], "version": 1}')  # fmt: skip
    out = []
    seen = set()
    for i, row in enumerate(rows):
        try:
            topic, partition, offset = row["topic"], int(row["partition"]), int(row["offset"])
        except (KeyError, TypeError, ValueError):
            raise ToolError(
                f"{source}: partitions[{i}] needs a topic, a partition and an offset"
            ) from None
        if not isinstance(topic, str) or not topic or partition < 0 or offset < -1:
            raise ToolError(f"{source}: partitions[{i}] is not a valid topic/partition/offset")
        if (topic, partition) in seen:
            raise ToolError(f"{source}: offset json file contains duplicate topic partitions: "
                            f"{topic}-{partition}")  # fmt: skip
        seen.add((topic, partition))
        out.append((topic, partition, offset))
    return out


def run_delete_records(args: Any, extra: dict[str, str], out: TextIO) -> int:
    from confluent_kafka import KafkaException, TopicPartition

    path = Path(args.offset_json_file)
    try:
        text = path.read_text()
    except OSError as e:
        raise ToolError(f"--offset-json-file {path}: {e.strerror}") from None
    wanted = parse_offsets(text, str(path))
    session = Session(args.bootstrap_server, extra)
    admin = session.admin()
    print("Executing records delete operation", file=out)
    # partitions the cluster does not have are named as Kafka names them (librdkafka's
    # own answer for them is "No leaders found" for the whole request)
    known = admin.list_topics(timeout=10).topics
    missing = [(t, p) for t, p, _o in wanted if t not in known or p not in known[t].partitions]
    present = [(t, p, o) for t, p, o in wanted if (t, p) not in missing]
    futures = (
        admin.delete_records([TopicPartition(t, p, o) for t, p, o in present]) if present else {}
    )
    print("Records delete operation completed:", file=out)
    failed = 0
    for t, p in missing:
        failed += 1
        print(f"partition: {t}-{p}\terror: org.apache.kafka.common.errors."
              "UnknownTopicOrPartitionException: This server does not host this "
              "topic-partition.", file=out)  # fmt: skip
    for t, p, _o in present:
        fut = futures[TopicPartition(t, p)]
        try:
            res = session.wait(admin, fut)
        except ToolError as e:
            failed += 1
            print(f"partition: {t}-{p}\terror: {e}", file=out)
            continue
        except KafkaException as e:
            failed += 1
            print(f"partition: {t}-{p}\terror: {kafka_error_text(e)}", file=out)
            continue
        print(f"partition: {t}-{p}\tlow_watermark: {res.low_watermark}", file=out)
    return 1 if failed else 0
