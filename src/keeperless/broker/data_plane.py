"""Produce, Fetch, ListOffsets and InitProducerId: the data-plane request handlers."""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.partitions import AppendResult, NotLeaderError
from keeperless.broker.txn_verify import (
    TxnOwners,
    Verify,
    still_verified,
    verify_produce,
)
from keeperless.metadata.admin import INTERNAL_TOPICS
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.context import listener_of
from keeperless.protocol.fetch_response import (
    FetchPartition,
    NodeEndpoint,
    RecordsSource,
    encode_fetch_response,
    fetch_replica_id,
)
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.protocol.records import CorruptBatchError, decode_records, iter_batches
from keeperless.security.authz import AclOp, Resource
from keeperless.storage.dir_failure import LogDirFailure
from keeperless.storage.log import FileSlice

__all__ = ["DataPlane"]

# acks=all answers, one line each, for the fault harness (KEEPERLESS_TRACE=acks)
trace = logging.getLogger("keeperless.trace.acks")

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405 (ListOffsets v8+)
LATEST_TIERED = -5  # KIP-1005 (ListOffsets v9+)
_AWAIT_ERRORS = {
    ErrorCode.request_timed_out: "The in-sync replicas did not acknowledge the records in time",
    ErrorCode.not_leader_or_follower: "Leadership moved before the in-sync replicas acknowledged",
    ErrorCode.not_enough_replicas_after_append: "The records are written, but the in-sync "
    "replicas fell below min.insync.replicas before they were acknowledged",
}


def _epoch_error(fp: Any, leader_epoch: int) -> ErrorCode | None:
    """A reader's current_leader_epoch against this node's (KIP-320)."""
    if fp.current_leader_epoch < 0 or fp.current_leader_epoch == leader_epoch:
        return None
    if fp.current_leader_epoch < leader_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


# errors after which a client needs the partition's new leader (KIP-951: told at once)
_APPEND_STEP = 1 << 20  # record bytes appended before the loop runs other work
_NEW_LEADER_ERRORS = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)
# the client id with which Kafka lets a produce write to an internal topic
ADMIN_CLIENT_ID = "__admin_client"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _utc(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _td_ms(v: Any) -> int:
    return int(v.total_seconds() * 1000) if hasattr(v, "total_seconds") else int(v)


def _keyless(records: bytes, topic: str, index: int) -> list[dict[str, Any]]:
    """Kafka's RecordErrors for the records without a key (a compacted topic refuses
    them): their index in the request's records."""
    out: list[dict[str, Any]] = []
    i = 0
    try:
        for pos, h in iter_batches(records):
            for rec in decode_records(memoryview(records)[pos : pos + h.size]):
                if rec.key is None:
                    out.append(
                        {
                            "batch_index": i,
                            "batch_index_error_message": "Compacted topic cannot accept a "
                            f"record without key in topic partition {topic}-{index}.",
                        }
                    )
                i += 1
    except (CorruptBatchError, ValueError):
        return []  # the append that follows says what is wrong with the batch
    return out


class DataPlane:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        # the transaction coordinator's verification (KIP-890 part 1); None: disabled
        # (transaction.partition.verification.enable=false)
        self.verify_txn: Verify | None = None
        self.txn_owners = TxnOwners()  # producer id -> transactional id, as verified

    def _partition_error(
        self, topic: str, index: int, follower_read: bool = False
    ) -> ErrorCode | None:
        """None if this node serves the partition: its leader, or (``follower_read``: a
        consumer's Fetch v11+, KIP-392) any of its replicas."""
        t = self.broker.image.topic(topic)
        if t is None or index not in t.partitions:
            return ErrorCode.unknown_topic_or_partition
        info = t.partitions[index]
        if info.leader == self.broker.node_id:
            return None
        if follower_read and self.broker.node_id in info.replicas and info.leader >= 0:
            return None
        return ErrorCode.not_leader_or_follower

    def _preferred_read_replica(self, p: Any, fetch_offset: int, rack: str) -> int:
        """Kafka's RackAwareReplicaSelector, as the leader runs it for a consumer in
        ``rack``: the leader itself if it is there, else the in-sync live replica there
        that has ``fetch_offset`` and most of the log; -1 (read here) when none is."""
        image = self.broker.image
        me = image.brokers.get(self.broker.node_id)
        if me is not None and me.rack == rack:
            return -1
        best, best_end = -1, -1
        for r in p.info.isr:
            b = image.brokers.get(r)
            f = p.followers.get(r)
            if r == self.broker.node_id or b is None or b.fenced or b.rack != rack or f is None:
                continue
            if (
                f.log_start_offset <= fetch_offset <= f.log_end_offset
                and f.log_end_offset > best_end
            ):
                best, best_end = r, f.log_end_offset
        return best

    # -- Produce --------------------------------------------------------------------------

    async def produce(self, header: RequestHeader, req: Any) -> Any:
        now = _now_ms()
        version = header.api_version
        appended: list[tuple[str, int]] = []
        responses: list[dict[str, Any]] = []
        waits: list[tuple[str, int, Any, int, int, int]] = []
        leaders: set[int] = set()
        image = self.broker.image
        named = []
        for td in req.topic_data:
            if version >= 13:  # KIP-516: topics named by id
                t_img = image.topics.get(td.topic_id)
                named.append((td, t_img.name if t_img is not None else None))
            else:
                named.append((td, td.name))
        authz = self.broker.authz
        # Kafka: transactional records need a transactional id the principal may write
        txn_denied = (
            authz.check(header, AclOp.WRITE, Resource.TRANSACTIONAL_ID, req.transactional_id)
            if req.transactional_id is not None
            else ErrorCode.transactional_id_authorization_failed
            if any(_transactional(pd.records) for td in req.topic_data
                   for pd in td.partition_data)
            else None
        )  # fmt: skip
        refused, verified = ({}, set()) if txn_denied else await self._verify(req, version, named)
        unyielded = 0
        for td, name in named:
            topic_denied = txn_denied or (
                name is not None and authz.check(header, AclOp.WRITE, Resource.TOPIC, name)
            )
            if (
                topic_denied is None
                and name in INTERNAL_TOPICS
                and header.client_id != ADMIN_CLIENT_ID
            ):
                # Kafka's ReplicaManager: "Cannot append to internal topic" (only its
                # coordinators write there, and an admin client that says it is one)
                topic_denied = ErrorCode.invalid_topic_exception
            parts = []
            for pd in td.partition_data:
                if unyielded >= _APPEND_STEP:
                    # the loop runs other work between a big request's partitions (a
                    # 1 MB batch's append is ~0.5 ms: six in one request held it ~3 ms)
                    unyielded = 0
                    await asyncio.sleep(0)
                unyielded += len(pd.records or b"")
                err = (
                    ErrorCode.unknown_topic_id
                    if name is None
                    else topic_denied or self._partition_error(name, pd.index)
                )
                p = self.broker.partitions.get(name, pd.index) if name is not None else None
                if err is None and p is None:
                    err = ErrorCode.not_leader_or_follower
                if err is not None or p is None or name is None:
                    entry: dict[str, Any] = {
                        "index": pd.index,
                        "error_code": err,
                        "base_offset": -1,
                        "record_errors": (),
                    }
                    if version >= 10 and err in _NEW_LEADER_ERRORS and name is not None:
                        current = self._current_leader(name, pd.index)
                        if current is not None:
                            entry["current_leader"] = {
                                "leader_id": current[0],
                                "leader_epoch": current[1],
                            }
                            if current[0] >= 0:
                                leaders.add(current[0])
                    parts.append(entry)
                    continue
                assert p.info is not None
                max_bytes, append_time, min_isr, compacted = self.broker.produce_settings(name)
                record_errors: list[dict[str, Any]] = []
                if req.acks == -1 and len(p.info.isr) < min_isr:
                    res = AppendResult(
                        ErrorCode.not_enough_replicas,
                        message=f"The in-sync replicas ({len(p.info.isr)}) of {name}-"
                        f"{pd.index} are fewer than min.insync.replicas ({min_isr})",
                    )
                elif (name, pd.index) in refused:
                    res = refused[(name, pd.index)]
                elif (name, pd.index) in verified and not still_verified(p, pd.records):
                    res = AppendResult(
                        ErrorCode.invalid_txn_state,
                        message=f"The transaction ended on {name}-{pd.index} while its "
                        "write was being verified",
                    )
                elif compacted and (record_errors := _keyless(pd.records or b"", name, pd.index)):
                    res = AppendResult(
                        ErrorCode.invalid_record,
                        message=f"{len(record_errors)} record(s) without a key rejected: "
                        f"{name} is a compacted topic (cleanup.policy=compact), where every "
                        "record needs a key",
                    )
                else:
                    try:
                        res = p.append(
                            pd.records or b"", p.info.leader_epoch, max_bytes, now, append_time
                        )
                    except LogDirFailure as e:
                        # its log directory failed (KIP-858): it goes offline here
                        res = AppendResult(ErrorCode.kafka_storage_error, message=str(e))
                if res.error == ErrorCode.none:
                    appended.append((name, pd.index))
                if res.error == ErrorCode.none and self.broker.metrics is not None:
                    self.broker.metrics.produced(
                        name, p.log.log_end_offset - res.base_offset, len(pd.records or b"")
                    )
                if res.error == ErrorCode.none and req.acks == -1:
                    end = p.log.log_end_offset
                    waits.append((name, pd.index, p, end, min_isr, p.info.leader_epoch))
                parts.append(
                    {
                        "index": pd.index,
                        "error_code": res.error,
                        "base_offset": res.base_offset,
                        "log_append_time": _utc(now) if append_time else None,
                        "log_start_offset": p.log.log_start_offset,
                        "record_errors": record_errors,
                        "error_message": res.message,
                    }
                )
            key = {"topic_id": td.topic_id} if version >= 13 else {"name": td.name}
            responses.append({**key, "_name": name, "partition_responses": parts})
        if appended:
            self.broker.partitions.notify_append(*appended)
            if self.broker.metrics is not None:
                self.broker.metrics.bytes_in.inc(
                    sum(len(pd.records or b"") for td in req.topic_data for pd in td.partition_data)
                )
        if req.acks == -1 and waits:
            await self._await_isr(waits, _td_ms(req.timeout) / 1000, responses)
        if req.acks == 0:
            return None
        body: dict[str, Any] = {"responses": responses, "throttle_time": 0}
        if leaders:
            body["node_endpoints"] = [
                {"node_id": e.node_id, "host": e.host, "port": e.port, "rack": e.rack}
                for e in self._endpoints(header, leaders)
            ]
        return build(response_class(ApiKey.PRODUCE, version), body)

    async def _verify(
        self, req: Any, version: int, named: list[tuple[Any, str | None]]
    ) -> tuple[dict[tuple[str, int], AppendResult], set[tuple[str, int]]]:
        """(the partitions refused, those to check again before appending)."""
        if self.verify_txn is None:
            return {}, set()
        wanted = []
        for td, name in named:
            if name is None:
                continue
            for pd in td.partition_data:
                p = self.broker.partitions.get(name, pd.index)
                if p is not None and p.is_leader and self._partition_error(name, pd.index) is None:
                    wanted.append((name, pd.index, p, pd.records))
        if not wanted:
            return {}, set()
        return await verify_produce(
            self.verify_txn, req.transactional_id, version, wanted, self.txn_owners
        )

    async def _await_isr(
        self,
        waits: list[tuple[str, int, Any, int, int, int]],
        timeout_s: float,
        responses: list[dict[str, Any]],
    ) -> None:
        """acks=all: answer once every ISR member has the appended records, and only if
        the ISR still has min.insync.replicas members then (Kafka's
        NOT_ENOUGH_REPLICAS_AFTER_APPEND): an ISR that shrank to the leader alone while
        the write waited would otherwise acknowledge what one broker has."""

        async def one(p: Any, end: int, min_isr: int, epoch: int) -> ErrorCode:
            try:
                ok = await p.wait_for_hw(end, timeout_s, epoch)
            except NotLeaderError:
                return ErrorCode.not_leader_or_follower
            if not ok:
                return ErrorCode.request_timed_out
            if p.info is None or len(p.info.isr) < min_isr:
                return ErrorCode.not_enough_replicas_after_append
            if trace.isEnabledFor(logging.INFO):
                trace.info(
                    "[node %d] acked %s-%d below %d: epoch %d hw %d isr %s pending %s followers %s",
                    self.broker.node_id,
                    p.topic,
                    p.index,
                    end,
                    p.info.leader_epoch,
                    p.high_watermark,
                    list(p.info.isr),
                    p.pending_isr,
                    {r: f.log_end_offset for r, f in p.followers.items()},
                )
            return ErrorCode.none

        codes = await asyncio.gather(*(one(p, end, m, e) for _, _, p, end, m, e in waits))
        failed = {(t, i): c for (t, i, *_), c in zip(waits, codes, strict=True) if c}
        if not failed:
            return
        for r in responses:
            for part in r["partition_responses"]:
                code = failed.get((r["_name"], part["index"]))
                if code is not None:
                    part["error_code"] = code
                    part["error_message"] = _AWAIT_ERRORS[code]

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
            p.record_follower_fetch(replica, fp.fetch_offset, _now_ms(), fp.log_start_offset)
            if p.high_watermark > before:
                self.broker.partitions.notify_append((p.topic, p.index))  # consumers' polls
            hook = self.broker.partitions.on_follower_fetch
            if hook is not None:
                hook(p, replica)
        return None, None

    def _fetch_once(
        self, header: RequestHeader, req: Any, version: int, budget: int, first: bool
    ) -> tuple[list[tuple[str | UUID, list[FetchPartition]]], int, bool, set[int], int]:
        """One pass over the partitions: (topics, bytes, whether to answer at once, the
        leaders named in current_leader fields, bytes of replicas under a replication
        throttle)."""
        total = 0
        throttled_bytes = 0
        errors = False
        replica = fetch_replica_id(req)
        # KIP-392: a consumer's Fetch v11+ may be served by any replica, and a leader with
        # replica.selector.class sends a consumer with a rack to a replica in that rack
        consumer_v11 = replica < 0 and version >= 11
        committed = replica < 0 and getattr(req, "isolation_level", 0) == 1
        rack = (req.rack_id or "") if consumer_v11 and self.broker.settings.rack_aware_reads else ""
        image = self.broker.image
        leaders: set[int] = set()
        out: list[tuple[str | UUID, list[FetchPartition]]] = []
        authz = self.broker.authz
        # a follower's fetch needs CLUSTER_ACTION; a consumer's, READ on each topic
        cluster_denied = replica >= 0 and authz.check(
            header, AclOp.CLUSTER_ACTION, Resource.CLUSTER
        )
        # a reassignment's catch-up held to leader.replication.throttled.rate
        quota = self.broker.replication_quotas.leader if replica >= 0 else None
        if quota is not None and not quota.active:
            quota = None
        over_quota = quota is not None and quota.exceeded(time.monotonic())
        for t in req.topics:
            parts = []
            if version >= 13:  # KIP-516: topics named by id
                key: str | UUID = t.topic_id
                t_img = image.topics.get(t.topic_id)
                name = t_img.name if t_img is not None else None
            else:
                key = name = t.topic
            read_denied = (
                replica < 0
                and name is not None
                and authz.check(header, AclOp.READ, Resource.TOPIC, name)
            )
            for fp in t.partitions:
                if name is None:
                    code = ErrorCode.unknown_topic_id
                    parts.append(FetchPartition(fp.partition, code.value, -1, -1, -1, b""))
                    errors = True
                    continue
                err = (
                    cluster_denied
                    or read_denied
                    or self._partition_error(name, fp.partition, follower_read=consumer_v11)
                )
                p = self.broker.partitions.get(name, fp.partition)
                diverging = None
                if err is None and p is not None and replica >= 0 and first:
                    err, diverging = self._replica_check(p, replica, fp)
                elif err is None and p is not None and p.info is not None:
                    led_here = p.info.leader == self.broker.node_id
                    err = None if led_here else _epoch_error(fp, p.info.leader_epoch)
                    if err is None and led_here and rack:
                        preferred = self._preferred_read_replica(p, fp.fetch_offset, rack)
                        if preferred >= 0:  # KIP-392: no records; read from that replica
                            hw, start = p.high_watermark, p.log.log_start_offset
                            parts.append(
                                FetchPartition(fp.partition, 0, hw, hw, start, b"",
                                               preferred_read_replica=preferred)
                            )  # fmt: skip
                            errors = True  # answer at once
                            continue
                if err is not None or p is None:
                    code = err or ErrorCode.not_leader_or_follower
                    current = None
                    if version >= 16 and code in _NEW_LEADER_ERRORS:
                        current = self._current_leader(name, fp.partition)
                        if current is not None and current[0] >= 0:
                            leaders.add(current[0])
                    parts.append(
                        FetchPartition(fp.partition, code.value, -1, -1, -1, b"", None, current)
                    )
                    errors = True
                    continue
                hw = p.high_watermark
                lso = p.last_stable_offset
                start = p.log.log_start_offset
                records: FileSlice | bytes = b""
                code = ErrorCode.none
                aborted = None
                if diverging is not None:
                    errors = True  # answer at once: the follower must truncate
                elif fp.fetch_offset < start or fp.fetch_offset > p.log.log_end_offset:
                    # as Kafka: out of range only outside the log; between the high
                    # watermark and the log end (a new leader's, or a follower's, high
                    # watermark can lag what a consumer saw) a consumer gets no records yet
                    code = ErrorCode.offset_out_of_range
                    errors = True
                elif budget - total > 0 or total == 0:
                    throttled = quota is not None and quota.is_throttled(name, fp.partition)
                    if throttled and over_quota and replica not in _isr(p):
                        pass  # Kafka's shouldLeaderThrottle: no records this time
                    else:
                        try:
                            sl = p.read(fp.fetch_offset,
                                        min(fp.partition_max_bytes, max(budget - total, 1)),
                                        replica >= 0, committed)  # fmt: skip
                        except LogDirFailure:
                            # its directory failed (KIP-858): it goes offline here
                            code, sl, errors = ErrorCode.kafka_storage_error, None, True
                            hw = lso = start = -1
                        if sl is not None:
                            records = sl
                            total += sl.length
                            if throttled:
                                throttled_bytes += sl.length
                    if committed and code == ErrorCode.none:  # what to skip (up to the LSO)
                        aborted = p.txns.aborted_between(fp.fetch_offset, lso)
                parts.append(
                    FetchPartition(fp.partition, code.value, hw, lso, start, records, diverging,
                                   aborted=aborted)
                )  # fmt: skip
            out.append((key, parts))
        return out, total, errors, leaders, throttled_bytes

    def _wait_keys(self, req: Any, version: int) -> list[tuple[str, int]]:
        """The partitions a fetch reads, by name: what it waits on."""
        out: list[tuple[str, int]] = []
        for t in req.topics:
            if version >= 13:
                t_img = self.broker.image.topics.get(t.topic_id)
                if t_img is None:
                    continue
                name = t_img.name
            else:
                name = t.topic
            out.extend((name, fp.partition) for fp in t.partitions)
        return out

    def _current_leader(self, topic: str, index: int) -> tuple[int, int] | None:
        t = self.broker.image.topic(topic)
        if t is None or index not in t.partitions:
            return None
        info = t.partitions[index]
        return (info.leader, info.leader_epoch)

    def _endpoints(self, header: RequestHeader, nodes: set[int]) -> list[NodeEndpoint]:
        out = []
        for n in sorted(nodes):
            b = self.broker.image.brokers.get(n)
            found = b.endpoint(listener_of(header)) if b is not None and not b.fenced else None
            if b is not None and found is not None:
                out.append(NodeEndpoint(n, found[0], found[1], b.rack))
        return out

    async def fetch(self, header: RequestHeader, req: Any) -> list[bytes | RecordsSource]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _td_ms(req.max_wait) / 1000
        budget = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
        first = True
        version = header.api_version
        keys: list[tuple[str, int]] | None = None
        while True:
            topics, total, errors, leaders, throttled = self._fetch_once(
                header, req, version, budget, first
            )
            first = False
            remaining = deadline - loop.time()
            if total >= max(req.min_bytes, 1) or remaining <= 0 or errors:
                break
            if keys is None:
                keys = self._wait_keys(req, version)
            await self.broker.partitions.wait_for_data(remaining, keys)
        if self.broker.metrics is not None and total:
            self.broker.metrics.bytes_out.inc(total)
            self.broker.metrics.fetched(topics, self.broker.image)
        if throttled:
            self.broker.replication_quotas.leader.record(time.monotonic(), throttled)
        # Encoded by hand: record data goes from the segment file to the socket
        # (sendfile) without passing through Python objects.
        return encode_fetch_response(
            version,
            header.correlation_id,
            topics,
            node_endpoints=self._endpoints(header, leaders) if leaders else (),
        )

    # -- ListOffsets ----------------------------------------------------------------------

    async def list_offsets(self, header: RequestHeader, req: Any) -> Any:
        topics = []
        for t in req.topics:
            parts = []
            for lp in t.partitions:
                err = self.broker.authz.check(
                    header, AclOp.DESCRIBE, Resource.TOPIC, t.name
                ) or self._partition_error(t.name, lp.partition_index)
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
                    if ts == LATEST:  # read_committed: the last stable offset
                        committed = getattr(req, "isolation_level", 0) == 1
                        entry["offset"] = p.last_stable_offset if committed else p.high_watermark
                    elif ts in (EARLIEST, EARLIEST_LOCAL):  # all of the log is local
                        entry["offset"] = p.log.log_start_offset
                    elif ts == LATEST_TIERED:  # nothing is tiered: Kafka answers -1
                        entry["leader_epoch"] = -1
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
        return build(
            response_class(ApiKey.LIST_OFFSETS, header.api_version),
            {"throttle_time": 0, "topics": topics},
        )

    # -- DeleteRecords --------------------------------------------------------------------

    async def delete_records(self, header: RequestHeader, req: Any) -> Any:
        """Kafka's DeleteRecords (API 21): move the log start offset of each partition
        to the offset asked (-1: the high watermark), then wait, up to the request's
        timeout, until every live replica's start has followed (the low watermark)."""
        moved: list[tuple[dict[str, Any], Any, int, int]] = []
        topics = []
        now = _now_ms()
        for t in req.topics:
            parts = []
            for dp in t.partitions:
                entry: dict[str, Any] = {
                    "partition_index": dp.partition_index,
                    "low_watermark": -1,
                    "error_code": ErrorCode.none,
                }
                parts.append(entry)
                err = self.broker.authz.check(
                    header, AclOp.DELETE, Resource.TOPIC, t.name
                ) or self._partition_error(t.name, dp.partition_index)
                p = self.broker.partitions.get(t.name, dp.partition_index)
                if err is None and p is None:
                    err = ErrorCode.not_leader_or_follower
                if err is None and p is not None:
                    policy = self.broker.topic_config(t.name).get("cleanup.policy", "delete")
                    target = p.high_watermark if dp.offset == -1 else dp.offset
                    if "delete" not in policy.split(","):
                        err = ErrorCode.policy_violation
                    elif target < 0 or target > p.high_watermark:
                        err = ErrorCode.offset_out_of_range
                    elif p.info is None or not p.is_leader:
                        err = ErrorCode.not_leader_or_follower
                    else:
                        try:
                            self.broker.partitions.advance_start(p, target, now)
                        except LogDirFailure:  # its directory failed (KIP-858)
                            err = ErrorCode.kafka_storage_error
                        else:
                            moved.append((entry, p, target, p.info.leader_epoch))
                if err is not None:
                    entry["error_code"] = err
            topics.append({"name": t.name, "partitions": parts})
        deadline = time.monotonic() + max(_td_ms(req.timeout), 0) / 1000

        def alive(node: int) -> bool:
            b = self.broker.image.brokers.get(node)
            return b is not None and not b.fenced

        while True:
            waiting = False
            for entry, part, target, epoch in moved:
                if (
                    part.log.closed
                    or id(self.broker.partitions.get(part.topic, part.index)) != id(part)
                    or not part.is_leader
                    or part.info is None
                    or part.info.leader_epoch != epoch
                ):
                    # deleted, this broker stopped, or the leadership moved while the
                    # request waited: only the leader of that epoch may say the replicas
                    # deleted (Kafka's lowWatermarkIfLeader; fault harness seed 8422)
                    entry["error_code"] = ErrorCode.not_leader_or_follower
                    continue
                entry["low_watermark"] = low = part.low_watermark(alive)
                waiting = waiting or low < target
            if not waiting or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.02)  # followers move their start as they fetch
        for entry, _p, target, _epoch in moved:
            if entry["error_code"] == ErrorCode.none and entry["low_watermark"] < target:
                entry["error_code"] = ErrorCode.request_timed_out
        return build(
            response_class(ApiKey.DELETE_RECORDS, header.api_version),
            {"throttle_time": 0, "topics": topics},
        )

    # -- OffsetForLeaderEpoch -------------------------------------------------------------

    async def offset_for_leader_epoch(self, header: RequestHeader, req: Any) -> Any:
        """Where a leader epoch ends in the leader's log (KIP-101/KIP-320): a consumer
        that saw a leader change checks its position has not been truncated away."""
        topics = []
        authz = self.broker.authz
        # as Kafka's KafkaApis: CLUSTER_ACTION (followers) covers every topic, else
        # DESCRIBE on each
        replica = authz.allowed(header, AclOp.CLUSTER_ACTION, Resource.CLUSTER)
        for t in req.topics:
            parts = []
            denied = not replica and authz.check(header, AclOp.DESCRIBE, Resource.TOPIC, t.topic)
            for op in t.partitions:
                entry: dict[str, Any] = {"partition": op.partition, "error_code": ErrorCode.none}
                err = denied or self._partition_error(t.topic, op.partition)
                p = self.broker.partitions.get(t.topic, op.partition)
                if err is None and p is None:
                    err = ErrorCode.not_leader_or_follower
                if err is None and p is not None:
                    assert p.info is not None
                    current = op.current_leader_epoch
                    if 0 <= current < p.info.leader_epoch:
                        err = ErrorCode.fenced_leader_epoch
                    elif current > p.info.leader_epoch:
                        err = ErrorCode.unknown_leader_epoch
                    else:
                        entry["leader_epoch"], entry["end_offset"] = p.end_offset_for_epoch(
                            op.leader_epoch
                        )
                if err is not None:
                    entry.update(error_code=err, leader_epoch=-1, end_offset=-1)
                parts.append(entry)
            topics.append({"topic": t.topic, "partitions": parts})
        return build(
            response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, header.api_version),
            {"throttle_time": 0, "topics": topics},
        )


def _isr(p: Any) -> tuple[int, ...]:
    return p.info.isr if p.info is not None else ()


def _transactional(records: bytes | None) -> bool:
    """The transactional flag of the first batch: its attributes' bit 4 (byte 22), read
    without parsing the header (asked of every produce without a transactional id)."""
    return records is not None and len(records) > 22 and bool(records[22] & 0x10)
