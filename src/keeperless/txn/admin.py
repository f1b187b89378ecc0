"""The transaction admin APIs (KIP-664): ListTransactions and DescribeTransactions on the
coordinators, DescribeProducers on partition leaders - what `kafka-transactions.sh`
uses to find and abort hanging transactions."""

from __future__ import annotations

import datetime
import re
import time
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.coordinator.txn_records import TxnStatus
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.txn.coordinator import TxnCoordinator

__all__ = ["STATE_NAMES", "TxnAdmin"]

STATE_NAMES = {
    TxnStatus.EMPTY: "Empty",
    TxnStatus.ONGOING: "Ongoing",
    TxnStatus.PREPARE_COMMIT: "PrepareCommit",
    TxnStatus.PREPARE_ABORT: "PrepareAbort",
    TxnStatus.COMPLETE_COMMIT: "CompleteCommit",
    TxnStatus.COMPLETE_ABORT: "CompleteAbort",
    TxnStatus.DEAD: "Dead",
    TxnStatus.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


def _utc(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(max(ms, 0) / 1000, datetime.UTC)


class TxnAdmin:
    def __init__(self, broker: Broker, coordinator: TxnCoordinator) -> None:
        self.broker = broker
        self.tc = coordinator

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.DESCRIBE_PRODUCERS: self.describe_producers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
        }

    async def list_transactions(self, header: RequestHeader, req: Any) -> Any:
        known = set(STATE_NAMES.values())
        wanted = set(req.state_filters)
        unknown = sorted(wanted - known)
        pids = set(req.producer_id_filters)
        min_ms = getattr(req, "duration_filter", -1)
        pattern = getattr(req, "transactional_id_pattern", None)
        try:
            matcher = re.compile(pattern) if pattern else None
        except re.error:
            return build(
                response_class(ApiKey.LIST_TRANSACTIONS, header.api_version),
                {"throttle_time": 0, "error_code": ErrorCode.invalid_regular_expression,
                 "unknown_state_filters": (), "transaction_states": ()},
            )  # fmt: skip
        now = int(time.time() * 1000)
        states = []
        for tid, md in sorted(self.tc.txns.items()):
            name = STATE_NAMES[md.state]
            if wanted and name not in wanted:
                continue
            if pids and md.producer_id not in pids:
                continue
            if min_ms >= 0 and now - md.start_ms < min_ms:
                continue
            if matcher is not None and not matcher.fullmatch(tid):
                continue
            states.append(
                {"transactional_id": tid, "producer_id": md.producer_id, "transaction_state": name}
            )
        return build(
            response_class(ApiKey.LIST_TRANSACTIONS, header.api_version),
            {"throttle_time": 0, "error_code": ErrorCode.none, "unknown_state_filters": unknown,
             "transaction_states": states},
        )  # fmt: skip

    async def describe_transactions(self, header: RequestHeader, req: Any) -> Any:
        out = []
        for tid in req.transactional_ids:
            err = self.tc._coordinator_error(tid)
            md = self.tc.txns.get(tid) if err is None else None
            if err is None and md is None:
                err = ErrorCode.transactional_id_not_found
            if md is None:
                out.append({"error_code": err, "transactional_id": tid, "transaction_state": "",
                            "transaction_timeout": 0, "transaction_start_time": _utc(0),
                            "producer_id": -1, "producer_epoch": -1, "topics": ()})  # fmt: skip
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(md.partitions):
                by_topic.setdefault(topic, []).append(index)
            out.append(
                {
                    "error_code": ErrorCode.none,
                    "transactional_id": tid,
                    "transaction_state": STATE_NAMES[md.state],
                    "transaction_timeout": datetime.timedelta(milliseconds=md.timeout_ms),
                    "transaction_start_time": _utc(md.start_ms if md.start_ms > 0 else -1),
                    "producer_id": md.producer_id,
                    "producer_epoch": md.producer_epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                }
            )
        return build(
            response_class(ApiKey.DESCRIBE_TRANSACTIONS, header.api_version),
            {"throttle_time": 0, "transaction_states": out},
        )

    async def describe_producers(self, header: RequestHeader, req: Any) -> Any:
        topics = []
        for t in req.topics:
            parts = []
            for index in t.partition_indexes:
                img = self.broker.image.topic(t.name)
                p = self.broker.partitions.get(t.name, index)
                err = ErrorCode.none
                if img is None or index not in img.partitions:
                    err = ErrorCode.unknown_topic_or_partition
                elif p is None or not p.is_leader:
                    err = ErrorCode.not_leader_or_follower
                producers = []
                if err == ErrorCode.none and p is not None:
                    for pid, e in sorted(p.producers.items()):
                        producers.append(
                            {"producer_id": pid, "producer_epoch": e.epoch,
                             "last_sequence": e.last_seq, "last_timestamp": e.last_ts,
                             "coordinator_epoch": e.coordinator_epoch,
                             "current_txn_start_offset": p.txns.ongoing.get(pid, -1)}
                        )  # fmt: skip
                parts.append({"partition_index": index, "error_code": err,
                              "error_message": None, "active_producers": producers})  # fmt: skip
            topics.append({"name": t.name, "partitions": parts})
        return build(
            response_class(ApiKey.DESCRIBE_PRODUCERS, header.api_version),
            {"throttle_time": 0, "topics": topics},
        )
