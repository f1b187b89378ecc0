"""Produce, Fetch, ListOffsets and InitProducerId: the data-plane request handlers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["DataPlane"]

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


def _now_ms() -> int:
    return int(time.time() * 1000)


def _td_ms(v: Any) -> int:
    return int(v.total_seconds() * 1000) if hasattr(v, "total_seconds") else int(v)


class DataPlane:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _partition_error(self, topic: str, index: int) -> ErrorCode | None:
        t = self.broker.image.topic(topic)
        if t is None or index not in t.partitions:
            return ErrorCode.unknown_topic_or_partition
        info = t.partitions[index]
        if info.leader != self.broker.node_id:
            return ErrorCode.not_leader_or_follower
        return None

    # -- Produce --------------------------------------------------------------------------

    async def produce(self, header: RequestHeader, req: Any) -> Any:
        now = _now_ms()
        appended = False
        responses = []
        for td in req.topic_data:
            parts = []
            for pd in td.partition_data:
                err = self._partition_error(td.name, pd.index)
                p = self.broker.partitions.get(td.name, pd.index)
                if err is None and p is None:
                    err = ErrorCode.not_leader_or_follower
                if req.transactional_id is not None and err is None:
                    err = ErrorCode.transactional_id_authorization_failed
                if err is not None or p is None:
                    parts.append(
                        {
                            "index": pd.index,
                            "error_code": err,
                            "base_offset": -1,
                            "record_errors": (),
                        }
                    )
                    continue
                assert p.info is not None
                res = p.append(
                    bytes(pd.records or b""),
                    p.info.leader_epoch,
                    self.broker.max_message_bytes(td.name),
                    now,
                )
                appended = appended or res.error == ErrorCode.none
                parts.append(
                    {
                        "index": pd.index,
                        "error_code": res.error,
                        "base_offset": res.base_offset,
                        "log_append_time": None,
                        "log_start_offset": p.log.log_start_offset,
                        "record_errors": (),
                        "error_message": res.message,
                    }
                )
            responses.append({"name": td.name, "partition_responses": parts})
        if appended:
            self.broker.partitions.notify_append()
        if req.acks == 0:
            return None
        return build(
            response_class(0, header.api_version), {"responses": responses, "throttle_time": 0}
        )

    # -- Fetch ----------------------------------------------------------------------------

    def _fetch_once(self, req: Any, budget: int) -> tuple[list[dict[str, Any]], int]:
        total = 0
        out = []
        for t in req.topics:
            parts = []
            for fp in t.partitions:
                err = self._partition_error(t.topic, fp.partition)
                p = self.broker.partitions.get(t.topic, fp.partition)
                entry: dict[str, Any] = {
                    "partition_index": fp.partition,
                    "error_code": ErrorCode.none,
                    "high_watermark": -1,
                    "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "aborted_transactions": None,
                    "preferred_read_replica": -1,
                    "records": b"",
                }
                if err is not None or p is None:
                    entry["error_code"] = err or ErrorCode.not_leader_or_follower
                    parts.append(entry)
                    continue
                hw = p.high_watermark
                entry.update(
                    high_watermark=hw,
                    last_stable_offset=hw,
                    log_start_offset=p.log.log_start_offset,
                )
                if fp.fetch_offset < p.log.log_start_offset or fp.fetch_offset > hw:
                    entry["error_code"] = ErrorCode.offset_out_of_range
                elif budget - total > 0 or total == 0:
                    sl = p.read(
                        fp.fetch_offset, min(fp.partition_max_bytes, max(budget - total, 1))
                    )
                    if sl is not None:
                        data = sl.read()
                        entry["records"] = data
                        total += len(data)
                parts.append(entry)
            out.append({"topic": t.topic, "partitions": parts})
        return out, total

    async def fetch(self, header: RequestHeader, req: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _td_ms(req.max_wait) / 1000
        budget = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
        while True:
            responses, total = self._fetch_once(req, budget)
            remaining = deadline - loop.time()
            errors = any(
                p["error_code"] != ErrorCode.none for t in responses for p in t["partitions"]
            )
            if total >= max(req.min_bytes, 1) or remaining <= 0 or errors:
                break
            await self.broker.partitions.wait_for_data(remaining)
        return build(
            response_class(1, header.api_version),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "session_id": 0,
                "responses": responses,
            },
        )

    # -- ListOffsets ----------------------------------------------------------------------

    async def list_offsets(self, header: RequestHeader, req: Any) -> Any:
        topics = []
        for t in req.topics:
            parts = []
            for lp in t.partitions:
                err = self._partition_error(t.name, lp.partition_index)
                p = self.broker.partitions.get(t.name, lp.partition_index)
                entry: dict[str, Any] = {
                    "partition_index": lp.partition_index,
                    "error_code": ErrorCode.none,
                    "timestamp": -1,
                    "offset": -1,
                    "leader_epoch": -1,
                    "old_style_offsets": (),
                }
                if err is not None or p is None:
                    entry["error_code"] = err or ErrorCode.not_leader_or_follower
                else:
                    assert p.info is not None
                    entry["leader_epoch"] = p.info.leader_epoch
                    ts = lp.timestamp
                    if ts == LATEST:
                        entry["offset"] = p.high_watermark
                    elif ts == EARLIEST:
                        entry["offset"] = p.log.log_start_offset
                    elif ts == MAX_TIMESTAMP:
                        found = p.log.offset_for_timestamp(0)
                        entry["offset"] = p.high_watermark - 1 if found else -1
                    else:
                        found = p.log.offset_for_timestamp(ts)
                        if found is not None:
                            entry["offset"], entry["timestamp"] = found
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return build(response_class(2, header.api_version), {"throttle_time": 0, "topics": topics})
