"""Produce, Fetch, ListOffsets and InitProducerId: the data-plane request handlers."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.partitions import AppendResult, NotLeaderError
from keeperless.protocol.build import build
from keeperless.protocol.fetch_response import (
    FetchPartition,
    RecordsSource,
    encode_fetch_response,
)
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.storage.log import FileSlice

__all__ = ["DataPlane"]

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


def _now_ms() -> int:
    return int(time.time() * 1000)


def _utc(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


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
        responses: list[dict[str, Any]] = []
        waits: list[tuple[str, int, Any, int]] = []
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
                max_bytes, append_time, min_isr = self.broker.produce_settings(td.name)
                if req.acks == -1 and len(p.info.isr) < min_isr:
                    res = AppendResult(
                        ErrorCode.not_enough_replicas,
                        message=f"The in-sync replicas ({len(p.info.isr)}) of {td.name}-"
                        f"{pd.index} are fewer than min.insync.replicas ({min_isr})",
                    )
                else:
                    res = p.append(
                        pd.records or b"", p.info.leader_epoch, max_bytes, now, append_time
                    )
                appended = appended or res.error == ErrorCode.none
                if res.error == ErrorCode.none and req.acks == -1:
                    waits.append((td.name, pd.index, p, p.log.log_end_offset))
                parts.append(
                    {
                        "index": pd.index,
                        "error_code": res.error,
                        "base_offset": res.base_offset,
                        "log_append_time": _utc(now) if append_time else None,
                        "log_start_offset": p.log.log_start_offset,
                        "record_errors": (),
                        "error_message": res.message,
                    }
                )
            responses.append({"name": td.name, "partition_responses": parts})
        if appended:
            self.broker.partitions.notify_append()
            if self.broker.metrics is not None:
                self.broker.metrics.bytes_in.inc(
                    sum(len(pd.records or b"") for td in req.topic_data for pd in td.partition_data)
                )
        if req.acks == -1 and waits:
            await self._await_isr(waits, _td_ms(req.timeout) / 1000, responses)
        if req.acks == 0:
            return None
        return build(
            response_class(0, header.api_version), {"responses": responses, "throttle_time": 0}
        )

    async def _await_isr(
        self,
        waits: list[tuple[str, int, Any, int]],
        timeout_s: float,
        responses: list[dict[str, Any]],
    ) -> None:
        """acks=all: answer once every ISR member has the appended records."""

        async def one(p: Any, end: int) -> ErrorCode:
            try:
                ok = await p.wait_for_hw(end, timeout_s)
            except NotLeaderError:
                return ErrorCode.not_leader_or_follower
            return ErrorCode.none if ok else ErrorCode.request_timed_out

        codes = await asyncio.gather(*(one(p, end) for _, _, p, end in waits))
        failed = {(t, i): c for (t, i, _, _), c in zip(waits, codes, strict=True) if c}
        if not failed:
            return
        for r in responses:
            for part in r["partition_responses"]:
                code = failed.get((r["name"], part["index"]))
                if code is not None:
                    part["error_code"] = code
                    part["error_message"] = (
                        "The in-sync replicas did not acknowledge the records in time"
                        if code == ErrorCode.request_timed_out
                        else "Leadership moved before the in-sync replicas acknowledged"
                    )

    # -- Fetch ----------------------------------------------------------------------------

    def _replica_check(self, p: Any, replica: int, fp: Any) -> tuple[ErrorCode | None, Any]:
        """A follower's fetch: (error, diverging epoch) after checking its leader epoch and
        where its log diverged; records what it has (raising the HW)."""
        info = p.info
        if replica not in info.replicas:
            return ErrorCode.not_leader_or_follower, None
        if fp.current_leader_epoch >= 0 and fp.current_leader_epoch != info.leader_epoch:
            if fp.current_leader_epoch < info.leader_epoch:
                return ErrorCode.fenced_leader_epoch, None
            return ErrorCode.unknown_leader_epoch, None
        if fp.last_fetched_epoch >= 0:
            epoch, end = p.end_offset_for_epoch(fp.last_fetched_epoch)
            if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
                return None, (epoch, end)
        if fp.fetch_offset <= p.log.log_end_offset:
            before = p.high_watermark
            p.record_follower_fetch(replica, fp.fetch_offset, _now_ms())
            if p.high_watermark > before:
                self.broker.partitions.notify_append()  # wake consumers' long polls
            hook = self.broker.partitions.on_follower_fetch
            if hook is not None:
                hook(p, replica)
        return None, None

    def _fetch_once(
        self, req: Any, budget: int, first: bool
    ) -> tuple[list[tuple[str, list[FetchPartition]]], int, bool]:
        total = 0
        errors = False
        replica = getattr(req, "replica_id", -1)
        out: list[tuple[str, list[FetchPartition]]] = []
        for t in req.topics:
            parts = []
            for fp in t.partitions:
                err = self._partition_error(t.topic, fp.partition)
                p = self.broker.partitions.get(t.topic, fp.partition)
                diverging = None
                if err is None and p is not None and replica >= 0 and first:
                    err, diverging = self._replica_check(p, replica, fp)
                if err is not None or p is None:
                    code = err or ErrorCode.not_leader_or_follower
                    parts.append(FetchPartition(fp.partition, code.value, -1, -1, -1, b""))
                    errors = True
                    continue
                hw = p.high_watermark
                start = p.log.log_start_offset
                records: FileSlice | bytes = b""
                code = ErrorCode.none
                end = p.log.log_end_offset if replica >= 0 else hw
                if diverging is not None:
                    errors = True  # answer at once: the follower must truncate
                elif fp.fetch_offset < start or fp.fetch_offset > end:
                    code = ErrorCode.offset_out_of_range
                    errors = True
                elif budget - total > 0 or total == 0:
                    want = min(fp.partition_max_bytes, max(budget - total, 1))
                    sl = p.read(fp.fetch_offset, want, for_replica=replica >= 0)
                    if sl is not None:
                        records = sl
                        total += sl.length
                parts.append(
                    FetchPartition(fp.partition, code.value, hw, hw, start, records, diverging)
                )
            out.append((t.topic, parts))
        return out, total, errors

    async def fetch(self, header: RequestHeader, req: Any) -> list[bytes | RecordsSource]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _td_ms(req.max_wait) / 1000
        budget = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
        first = True
        while True:
            topics, total, errors = self._fetch_once(req, budget, first)
            first = False
            remaining = deadline - loop.time()
            if total >= max(req.min_bytes, 1) or remaining <= 0 or errors:
                break
            await self.broker.partitions.wait_for_data(remaining)
        if self.broker.metrics is not None and total:
            self.broker.metrics.bytes_out.inc(total)
        # Encoded by hand: record data goes from the segment file to the socket
        # (sendfile) without passing through Python objects.
        return encode_fetch_response(header.api_version, header.correlation_id, topics)

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
                    else:
                        found = (
                            p.log.offset_of_max_timestamp()
                            if ts == MAX_TIMESTAMP
                            else p.log.offset_for_timestamp(ts)
                        )
                        # only what is committed is visible to readers
                        if found is not None and found[0] < p.high_watermark:
                            entry["offset"], entry["timestamp"] = found
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return build(response_class(2, header.api_version), {"throttle_time": 0, "topics": topics})
