"""`transactions`: Kafka's kafka-transactions.sh (KIP-664). list, describe,
describe-producers, abort and find-hanging, over ListTransactions, DescribeTransactions,
DescribeProducers and WriteTxnMarkers."""

from __future__ import annotations

import time
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from keeperless.tools.errors import ToolError

__all__ = ["run_transactions"]

Servers = list[tuple[str, int]]


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _metadata(servers: Servers, topics: list[str] | None) -> Any:
    body = {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    return call(servers, ApiKey.METADATA, 12, body)


def _brokers(md: Any) -> dict[int, tuple[str, int]]:
    return {b.node_id: (b.host, b.port) for b in md.brokers}


def _leader(servers: Servers, topic: str, partition: int) -> tuple[int, tuple[str, int]]:
    md = _metadata(servers, [topic])
    for t in md.topics:
        if int(t.error_code) != 0:
            raise ToolError(f"Topic '{topic}' does not exist")
        for p in t.partitions:
            if p.partition_index == partition:
                brokers = _brokers(md)
                if p.leader_id not in brokers:
                    raise ToolError(f"{topic}-{partition} has no leader now")
                return p.leader_id, brokers[p.leader_id]
    raise ToolError(f"Partition {topic}-{partition} does not exist")


def _producers(server: tuple[str, int], topic: str, partition: int) -> list[Any]:
    resp = call(
        [server],
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": topic, "partition_indexes": [partition]}]},
    )
    p = resp.topics[0].partitions[0]
    if int(p.error_code) != 0:
        raise ToolError(f"describe-producers {topic}-{partition}: {p.error_code.name}")
    return list(p.active_producers)


def _list(
    servers: Servers,
    producer_ids: list[int] | None = None,
    duration_ms: int = -1,
    pattern: str | None = None,
) -> list[tuple[int, Any]]:
    """(coordinator, transaction) of every coordinator's transactions."""
    out: list[tuple[int, Any]] = []
    for node, server in sorted(_brokers(_metadata(servers, [])).items()):
        body = {"state_filters": [], "producer_id_filters": producer_ids or [],
                "duration_filter": duration_ms, "transactional_id_pattern": pattern}  # fmt: skip
        resp = call([server], ApiKey.LIST_TRANSACTIONS, 2, body)
        if int(resp.error_code) != 0:
            raise ToolError(f"list: {resp.error_code.name} from broker {node}")
        out.extend((node, t) for t in resp.transaction_states)
    return out


def _coordinator(servers: Servers, tid: str) -> tuple[int, tuple[str, int]]:
    for _ in range(20):  # the coordinator's partition may be created by this question
        resp = call(servers, ApiKey.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
        if int(resp.error_code) == 0:
            return resp.node_id, (resp.host, resp.port)
        time.sleep(0.25)
    raise ToolError(f"no coordinator for transactional id {tid}: {resp.error_code.name}")


def run_transactions(args: Any, servers: Servers, out: TextIO) -> int:
    cmd = args.txn_cmd
    if cmd == "list":
        rows = [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
        for node, t in _list(servers, None, args.duration_filter, args.transactional_id_pattern):
            rows.append([t.transactional_id, str(node), str(t.producer_id), t.transaction_state])
        _table(rows, out)
        return 0
    if cmd == "describe":
        node, server = _coordinator(servers, args.transactional_id)
        resp = call(
            [server],
            ApiKey.DESCRIBE_TRANSACTIONS,
            0,
            {"transactional_ids": [args.transactional_id]},
        )
        s = resp.transaction_states[0]
        if int(s.error_code) != 0:
            raise ToolError(f"transactional id {args.transactional_id}: {s.error_code.name}")
        start = int(s.transaction_start_time.timestamp() * 1000)
        started = start > 0 and s.transaction_state == "Ongoing"
        duration = str(int(time.time() * 1000) - start) if started else "None"
        parts = ",".join(f"{t.topic}-{p}" for t in s.topics for p in t.partitions)
        _table(
            [
                ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                 "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                 "TransactionDurationMs", "TopicPartitions"],
                [str(node), s.transactional_id, str(s.producer_id), str(s.producer_epoch),
                 s.transaction_state, str(int(s.transaction_timeout.total_seconds() * 1000)),
                 str(start) if started else "None", duration, parts],
            ],
            out,
        )  # fmt: skip
        return 0
    if cmd == "describe-producers":
        _node, server = _leader(servers, args.topic, args.partition)
        rows = [["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                 "LastTimestamp", "CurrentTransactionStartOffset"]]  # fmt: skip
        for p in _producers(server, args.topic, args.partition):
            start = p.current_txn_start_offset
            rows.append([str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                         str(p.last_sequence), str(p.last_timestamp),
                         str(start) if start >= 0 else "None"])  # fmt: skip
        _table(rows, out)
        return 0
    if cmd == "abort":
        return _abort(args, servers, out)
    if cmd == "find-hanging":
        return _find_hanging(args, servers, out)
    raise ToolError(f"unknown action {cmd}")


def _abort(args: Any, servers: Servers, out: TextIO) -> int:
    _node, server = _leader(servers, args.topic, args.partition)
    if args.start_offset is not None:
        found = [p for p in _producers(server, args.topic, args.partition)
                 if p.current_txn_start_offset == args.start_offset]  # fmt: skip
        if not found:
            raise ToolError(
                f"Could not find any open transactions starting at offset {args.start_offset} "
                f"on partition {args.topic}-{args.partition}"
            )
        pid, epoch, coord = found[0].producer_id, found[0].producer_epoch, -1
    elif args.producer_id is not None and args.producer_epoch is not None:
        pid, epoch = args.producer_id, args.producer_epoch
        coord = args.coordinator_epoch if args.coordinator_epoch is not None else -1
    else:
        raise ToolError("abort needs --start-offset, or --producer-id and --producer-epoch")
    marker = {
        "producer_id": pid,
        "producer_epoch": epoch,
        "transaction_result": False,
        "topics": [{"name": args.topic, "partition_indexes": [args.partition]}],
        "coordinator_epoch": coord,
    }
    resp = call([server], ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [marker]})
    code = resp.markers[0].topics[0].partitions[0].error_code
    if int(code) != 0:
        raise ToolError(f"aborting the transaction of producer {pid}: {code.name}")
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) on "
          f"{args.topic}-{args.partition}", file=out)  # fmt: skip
    return 0


def _find_hanging(args: Any, servers: Servers, out: TextIO) -> int:
    """Open transactions on partitions whose coordinator does not know them as ongoing,
    or open longer than --max-transaction-timeout minutes."""
    md = _metadata(servers, [args.topic] if args.topic else None)
    brokers = _brokers(md)
    targets: list[tuple[str, int, int]] = []  # topic, partition, leader
    for t in md.topics:
        if args.topic and int(t.error_code) != 0:
            raise ToolError(f"Topic '{args.topic}' does not exist")
        for p in t.partitions:
            if args.partition is not None and p.partition_index != args.partition:
                continue
            if args.broker_id is not None and p.leader_id != args.broker_id:
                continue
            targets.append((t.name, p.partition_index, p.leader_id))
    now = int(time.time() * 1000)
    limit_ms = args.max_transaction_timeout * 60_000
    rows = [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
             "StartOffset", "LastTimestamp", "Duration(min)"]]  # fmt: skip
    open_ones: list[tuple[str, int, Any]] = []
    for topic, index, leader in targets:
        if leader in brokers:
            for p in _producers(brokers[leader], topic, index):
                if p.current_txn_start_offset >= 0:
                    open_ones.append((topic, index, p))
    ongoing = {t.producer_id for _node, t in _list(servers, [p.producer_id for *_, p in open_ones])
               if t.transaction_state in ("Ongoing", "PrepareCommit", "PrepareAbort")}  # fmt: skip
    for topic, index, p in open_ones:
        # hanging: open longer than the largest timeout, and no coordinator carries it on
        age = now - p.last_timestamp if p.last_timestamp >= 0 else 0
        if p.producer_id in ongoing or age <= limit_ms:
            continue
        rows.append([topic, str(index), str(p.producer_id), str(p.producer_epoch),
                     str(p.coordinator_epoch), str(p.current_txn_start_offset),
                     str(p.last_timestamp), str(age // 60_000)])  # fmt: skip
    _table(rows, out)
    return 0
