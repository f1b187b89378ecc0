"""The transaction coordinator (Kafka's design): the coordinator of a transactional id is
the leader of its `__transaction_state` partition, where every state change of the id's
transaction is written (acks=all) before it is answered; on a new leader the partition's
records are read again and unfinished commits and aborts are carried on.

States (Kafka's numbers): Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7. Records: key version 0
(transactional id), value version 0 (producer id, epoch, timeout, state, partitions,
last update and start times)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.group_coordinator import find_coordinator_response, partition_for_group
from keeperless.broker.partitions import NotLeaderError
from keeperless.broker.txn_markers import OFFSETS_TOPIC, TxnMarkerWriter
from keeperless.metadata.admin import NewTopic
from keeperless.metadata.image import MetadataImage
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.protocol.records import build_batch, decode_records

__all__ = ["TXN_TOPIC", "TxnCoordinator", "TxnSettings", "TxnStatus"]

log = logging.getLogger(__name__)
_PEER_TIMEOUT_S = 30.0  # a marker write or a verification, to another broker
TXN_TOPIC = "__transaction_state"
_S16 = struct.Struct(">h")
_VALUE_HEAD = struct.Struct(">hqhib")
_MAX_EPOCH = 32767 - 1  # past it the producer gets a new id (Kafka's rule)
_RETRY_S = (0.1, 0.2, 0.5, 1.0)


class TxnStatus(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


_PREPARING = (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT, TxnStatus.PREPARE_EPOCH_FENCE)
_IDLE = (TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class TxnSettings:
    """The broker's transaction.* keys (Kafka's names and defaults)."""

    partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104857600
    max_timeout_ms: int = 900000
    abort_interval_ms: int = 10000
    id_expiration_ms: int = 604800000
    # transaction.remove.expired.transaction.cleanup.interval.ms: how often idle ids
    # are looked for (the abort sweep's interval bounds it from below)
    remove_interval_ms: int = 3600000
    write_timeout_ms: int = 5000


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnStatus
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    busy: bool = False  # a state write or the markers in flight: others wait
    prev_epoch: int = -1  # before the coordinator bumped it to abort (in memory only)


def _str(s: str) -> bytes:
    b = s.encode()
    return _S16.pack(len(b)) + b


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _S16.unpack_from(buf, pos)
    return buf[pos + 2 : pos + 2 + max(n, 0)].decode(), pos + 2 + max(n, 0)


def txn_key(transactional_id: str) -> bytes:
    return _S16.pack(0) + _str(transactional_id)


def txn_value(md: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(md.partitions):
        by_topic.setdefault(topic, []).append(index)
    out = bytearray(_VALUE_HEAD.pack(0, md.producer_id, md.producer_epoch, md.timeout_ms, md.state))
    out += struct.pack(">i", len(by_topic))
    for topic, indexes in by_topic.items():
        out += _str(topic) + struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
    out += struct.pack(">qq", md.update_ms, md.start_ms)
    return bytes(out)


def parse_txn_record(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None] | None:
    """(transactional id, its state; None for a tombstone), or None if not a txn record."""
    (version,) = _S16.unpack_from(key, 0)
    if version != 0:
        return None
    tid, _ = _read_str(key, 2)
    if value is None:
        return tid, None
    _v, pid, epoch, timeout, state = _VALUE_HEAD.unpack_from(value, 0)
    pos = _VALUE_HEAD.size
    (n,) = struct.unpack_from(">i", value, pos)
    pos += 4
    parts: set[tuple[str, int]] = set()
    for _ in range(max(n, 0)):
        topic, pos = _read_str(value, pos)
        (m,) = struct.unpack_from(">i", value, pos)
        parts.update((topic, i) for i in struct.unpack_from(f">{m}i", value, pos + 4))
        pos += 4 + 4 * m
    update_ms, start_ms = struct.unpack_from(">qq", value, pos)
    return tid, TxnMetadata(tid, pid, epoch, timeout, TxnStatus(state), parts, start_ms, update_ms)


def _now_ms() -> int:
    return int(time.time() * 1000)


class TxnCoordinator:
    def __init__(
        self,
        broker: Broker,
        settings: TxnSettings,
        markers: TxnMarkerWriter,
        find_group_coordinator: Callable[[RequestHeader, Any], Awaitable[Any]],
        ensure_offsets_topic: Callable[[], ErrorCode] | None = None,
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.markers = markers
        self._find_group = find_group_coordinator
        # AddOffsetsToTxn may be a group's first use of __consumer_offsets: create it
        self._ensure_offsets = ensure_offsets_topic
        self.txns: dict[str, TxnMetadata] = {}
        self._loaded: dict[int, int] = {}  # partition -> leader epoch (coordinator epoch)
        self._last_removal = _now_ms()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        broker.on_image.append(self._on_image)

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
            ApiKey.WRITE_TXN_MARKERS: self.markers.handle,
        }

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._abort_timed_out())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()

    async def _peer_request(
        self, host: str, port: int, api_key: ApiKey, version: int, body: dict[str, Any]
    ) -> Any:
        """A request to another broker (markers, verification) on the broker's network
        client; OSError (TimeoutError included) when it cannot be answered in time."""
        return await self.broker.peers.request(
            (host, port), api_key, version, body, timeout_s=_PEER_TIMEOUT_S, lane="txn"
        )

    # -- placement and loading -----------------------------------------------------------

    def _partition_of(self, transactional_id: str) -> int | None:
        t = self.broker.image.topic(TXN_TOPIC)
        return None if t is None else partition_for_group(transactional_id, len(t.partitions))

    def _on_image(self, image: MetadataImage) -> None:
        t = image.topic(TXN_TOPIC)
        led = (
            {}
            if t is None
            else {
                i: info.leader_epoch
                for i, info in t.partitions.items()
                if info.leader == self.broker.node_id
            }
        )
        n = len(t.partitions) if t is not None else 0
        for idx, epoch in list(self._loaded.items()):
            if led.get(idx) != epoch:
                del self._loaded[idx]
                for tid in [k for k in self.txns if n == 0 or partition_for_group(k, n) == idx]:
                    del self.txns[tid]
        resumed = 0
        for idx, epoch in led.items():
            if idx not in self._loaded:
                self._loaded[idx] = epoch
                resumed += self._load(idx)
        if resumed:
            log.info(
                "[node %d] Completing %d transaction(s) found prepared in %s",
                self.broker.node_id,
                resumed,
                TXN_TOPIC,
            )

    def _load(self, idx: int) -> int:
        """Read one partition's transactions; carry on their prepared commits and aborts."""
        p = self.broker.partitions.get(TXN_TOPIC, idx)
        if p is None:
            return 0
        found: dict[str, TxnMetadata | None] = {}
        for _, batch in p.log.batches(p.log.log_start_offset):
            for rec in decode_records(batch):
                parsed = parse_txn_record(rec.key, rec.value) if rec.key else None
                if parsed is not None:
                    found[parsed[0]] = parsed[1]
        resumed = 0
        for tid, md in found.items():
            if md is None:
                continue
            self.txns[tid] = md
            if md.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT):
                self._complete_later(md, md.state == TxnStatus.PREPARE_COMMIT)
                resumed += 1
        return resumed

    def _ensure_topic(self) -> bool:
        if self.broker.image.topic(TXN_TOPIC) is not None:
            return True
        s = self.settings
        self.broker.auto_create.create(
            [
                NewTopic(
                    TXN_TOPIC,
                    s.partitions,
                    s.replication_factor,
                    configs={
                        "cleanup.policy": "compact",
                        "segment.bytes": str(s.segment_bytes),
                        "min.insync.replicas": str(s.min_isr),
                        "unclean.leader.election.enable": "false",
                    },
                )
            ]
        )
        return False

    def _coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        if not transactional_id:
            return ErrorCode.invalid_request
        if not self._ensure_topic():
            return ErrorCode.coordinator_not_available
        idx = self._partition_of(transactional_id)
        if idx is None or idx not in self._loaded:
            return ErrorCode.not_coordinator
        return None

    # -- FindCoordinator -----------------------------------------------------------------

    async def find_coordinator(self, header: RequestHeader, req: Any) -> Any:
        """FindCoordinator for every key type, as Kafka's KafkaApis answers it: a
        transactional id's coordinator here, a group's from the group coordinator."""
        if getattr(req, "key_type", 0) != 1:
            return await self._find_group(header, req)
        ready = self._ensure_topic()
        return find_coordinator_response(header, req, self.broker.image, TXN_TOPIC, ready)

    # -- writing the state ---------------------------------------------------------------

    async def _persist(self, md: TxnMetadata, tombstone: bool = False) -> ErrorCode:
        """Write the transaction's new state (or, expired, its tombstone) and wait for
        the partition's ISR."""
        idx = self._partition_of(md.transactional_id)
        p = self.broker.partitions.get(TXN_TOPIC, idx) if idx is not None else None
        if p is None or p.info is None or not p.is_leader or idx not in self._loaded:
            return ErrorCode.not_coordinator
        now = _now_ms()
        value = None if tombstone else txn_value(md)
        batch = build_batch([(txn_key(md.transactional_id), value, ())], timestamp_ms=now)
        res = p.append(batch, p.info.leader_epoch, 2**31 - 1, now)
        if res.error != ErrorCode.none:
            return ErrorCode.coordinator_not_available
        self.broker.partitions.notify_append()
        try:
            ok = await p.wait_for_hw(
                p.log.log_end_offset, self.settings.write_timeout_ms / 1000, p.info.leader_epoch
            )
        except NotLeaderError:
            return ErrorCode.not_coordinator
        return ErrorCode.none if ok else ErrorCode.coordinator_not_available

    async def _transition(self, md: TxnMetadata, **changes: Any) -> ErrorCode:
        """Persist ``md`` with ``changes``; apply them in memory once written."""
        new = dataclasses.replace(md, **changes, update_ms=_now_ms())
        md.busy = True
        try:
            err = await self._persist(new)
        finally:
            md.busy = False
        if err == ErrorCode.none:
            for k, v in changes.items():
                setattr(md, k, v)
            md.update_ms = new.update_ms
        return err

    # -- InitProducerId ------------------------------------------------------------------

    async def init_producer_id(self, header: RequestHeader, req: Any) -> Any:
        def reply(err: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
            return build(
                response_class(ApiKey.INIT_PRODUCER_ID, header.api_version),
                {"throttle_time": 0, "error_code": err, "producer_id": pid,
                 "producer_epoch": epoch},
            )  # fmt: skip

        tid = req.transactional_id
        if tid is None:
            err, pid = await self.broker.allocate_producer_id()
            return reply(err, pid, 0 if err == ErrorCode.none else -1)
        coord_err = self._coordinator_error(tid)
        if coord_err is not None:
            return reply(coord_err)
        timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return reply(ErrorCode.invalid_transaction_timeout)
        md = self.txns.get(tid)
        if md is None:
            err, pid = await self.broker.allocate_producer_id()
            if err != ErrorCode.none:
                return reply(err)
            if tid in self.txns:  # another request got there meanwhile
                return reply(ErrorCode.concurrent_transactions)
            md = TxnMetadata(tid, pid, -1, timeout_ms, TxnStatus.EMPTY)
            self.txns[tid] = md
        if md.busy or md.state in _PREPARING:
            return reply(ErrorCode.concurrent_transactions)
        hint_pid = getattr(req, "producer_id", -1)
        hint_epoch = getattr(req, "producer_epoch", -1)
        # KIP-360: a producer naming its id and epoch bumps them (after an abortable
        # error), also when the coordinator aborted its transaction with the next epoch
        if hint_pid >= 0 and (
            hint_pid != md.producer_id or hint_epoch not in (md.producer_epoch, md.prev_epoch)
        ):
            return reply(ErrorCode.producer_fenced)
        if md.state == TxnStatus.ONGOING:
            # the previous producer's transaction is aborted first (fencing it); the new
            # one asks again until that is done
            err = await self._begin_end(md, commit=False, bump=True)
            return reply(err if err != ErrorCode.none else ErrorCode.concurrent_transactions)
        pid, epoch = md.producer_id, md.producer_epoch + 1
        if epoch > _MAX_EPOCH:
            err, pid = await self.broker.allocate_producer_id()
            if err != ErrorCode.none:
                return reply(err)
            epoch = 0
        err = await self._transition(
            md, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
            state=TxnStatus.EMPTY, partitions=set(), start_ms=-1,
        )  # fmt: skip
        if err != ErrorCode.none:
            if md.producer_epoch < 0:
                self.txns.pop(tid, None)
            return reply(err)
        log.info(
            "[node %d] Transactional id %s: producer %d epoch %d",
            self.broker.node_id, tid, pid, epoch,
        )  # fmt: skip
        return reply(ErrorCode.none, pid, epoch)

    # -- adding partitions ---------------------------------------------------------------

    def _producer_error(self, tid: str, pid: int, epoch: int) -> tuple[ErrorCode | None, Any]:
        err = self._coordinator_error(tid)
        if err is not None:
            return err, None
        md = self.txns.get(tid)
        if md is None or md.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping, None
        if md.producer_epoch != epoch:
            return ErrorCode.producer_fenced, None
        if md.busy or md.state in _PREPARING:
            return ErrorCode.concurrent_transactions, None
        return None, md

    async def _add(self, md: TxnMetadata, parts: set[tuple[str, int]]) -> ErrorCode:
        if md.state == TxnStatus.ONGOING and parts <= md.partitions:
            return ErrorCode.none
        start = md.start_ms if md.state == TxnStatus.ONGOING else _now_ms()
        return await self._transition(
            md, state=TxnStatus.ONGOING, partitions=md.partitions | parts, start_ms=start
        )

    async def add_partitions_to_txn(self, header: RequestHeader, req: Any) -> Any:
        if header.api_version >= 4:
            return await self._add_partitions_batched(header, req)
        _err, results = await self._add_partitions(
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            [(t.name, tuple(t.partitions)) for t in req.v3_and_below_topics],
            verify_only=False,
        )
        return build(
            response_class(ApiKey.ADD_PARTITIONS_TO_TXN, header.api_version),
            {"throttle_time": 0, "results_by_topic_v3_and_below": results},
        )

    async def _add_partitions_batched(self, header: RequestHeader, req: Any) -> Any:
        """v4+: brokers verifying (KIP-890) or adding for several transactions."""
        out = []
        for txn in req.transactions:
            _err, results = await self._add_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch,
                [(t.name, tuple(t.partitions)) for t in txn.topics], txn.verify_only,
            )  # fmt: skip
            out.append({"transactional_id": txn.transactional_id, "topic_results": results})
        return build(
            response_class(ApiKey.ADD_PARTITIONS_TO_TXN, header.api_version),
            {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": out},
        )

    async def _add_partitions(
        self,
        tid: str,
        pid: int,
        epoch: int,
        topics: list[tuple[str, tuple[int, ...]]],
        verify_only: bool,
    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        wanted = [(name, i) for name, idxs in topics for i in idxs]
        err, md = self._producer_error(tid, pid, epoch)
        errors: dict[tuple[str, int], ErrorCode] = {}
        if err is None:
            for name, i in wanted:
                t = self.broker.image.topic(name)
                if t is None or i not in t.partitions:
                    errors[(name, i)] = ErrorCode.unknown_topic_or_partition
            if errors:
                err = ErrorCode.operation_not_attempted
            elif verify_only:
                ongoing = md.partitions if md.state == TxnStatus.ONGOING else set()
                missing = [k for k in wanted if k not in ongoing]
                errors = {k: ErrorCode.transaction_abortable for k in missing}
                err = ErrorCode.none
            else:
                err = await self._add(md, set(wanted))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for key in wanted:
            code = errors.get(key, err or ErrorCode.none)
            by_topic.setdefault(key[0], []).append(
                {"partition_index": key[1], "partition_error_code": code}
            )
        results = [{"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]
        return err or ErrorCode.none, results

    async def verify(
        self, tid: str, pid: int, epoch: int, parts: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1, for a partition leader about to append a producer's first
        transactional batch there: does the coordinator of ``tid`` (here or on another
        broker) have these partitions in the producer's ongoing transaction? A write that
        arrives after its transaction ended (a late retry, a zombie) must not open a
        transaction no coordinator will ever end."""
        by_topic: dict[str, list[int]] = {}
        for name, i in parts:
            by_topic.setdefault(name, []).append(i)
        idx = self._partition_of(tid)
        t = self.broker.image.topic(TXN_TOPIC)
        leader = -1 if idx is None or t is None else t.partitions[idx].leader
        reg = self.broker.image.brokers.get(leader)
        unknown = dict.fromkeys(parts, ErrorCode.coordinator_not_available)
        if leader == self.broker.node_id:
            topics = [(n, tuple(i)) for n, i in by_topic.items()]
            _err, results = await self._add_partitions(tid, pid, epoch, topics, True)
            return {
                (r["name"], pr["partition_index"]): pr["partition_error_code"]
                for r in results
                for pr in r["results_by_partition"]
            }
        found = reg.endpoint(self.broker.inter_broker_listener) if reg is not None else None
        if found is None:
            return unknown
        body = {
            "transactions": [
                {
                    "transactional_id": tid,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": True,
                    "topics": [{"name": n, "partitions": i} for n, i in by_topic.items()],
                }
            ]
        }
        host, port = found
        try:
            resp = await self._peer_request(host, port, ApiKey.ADD_PARTITIONS_TO_TXN, 4, body)
        except OSError as e:
            log.debug(
                "[node %d] Verifying %s with broker %d: %s", self.broker.node_id, tid, leader, e
            )
            return unknown
        out = dict.fromkeys(parts, ErrorCode(resp.error_code) if resp.error_code else None)
        for txn in resp.results_by_transaction:
            for tr in txn.topic_results:
                for pr in tr.results_by_partition:
                    out[(tr.name, pr.partition_index)] = ErrorCode(pr.partition_error_code)
        return {
            k: v if v is not None else ErrorCode.coordinator_not_available for k, v in out.items()
        }

    async def add_offsets_to_txn(self, header: RequestHeader, req: Any) -> Any:
        err, md = self._producer_error(req.transactional_id, req.producer_id, req.producer_epoch)
        if err is None:
            t = self.broker.image.topic(OFFSETS_TOPIC)
            if t is None:
                if self._ensure_offsets is not None:
                    self._ensure_offsets()  # in the background; the client asks again
                err = ErrorCode.coordinator_not_available
            else:
                idx = partition_for_group(req.group_id, len(t.partitions))
                err = await self._add(md, {(OFFSETS_TOPIC, idx)})
        return build(
            response_class(ApiKey.ADD_OFFSETS_TO_TXN, header.api_version),
            {"throttle_time": 0, "error_code": err or ErrorCode.none},
        )

    # -- ending ----------------------------------------------------------------------------

    async def end_txn(self, header: RequestHeader, req: Any) -> Any:
        def reply(err: ErrorCode) -> Any:
            return build(
                response_class(ApiKey.END_TXN, header.api_version),
                {"throttle_time": 0, "error_code": err, "producer_id": -1, "producer_epoch": -1},
            )

        tid, commit = req.transactional_id, req.committed
        err = self._coordinator_error(tid)
        if err is not None:
            return reply(err)
        md = self.txns.get(tid)
        if md is None or md.producer_id != req.producer_id:
            return reply(ErrorCode.invalid_producer_id_mapping)
        aborted_for_it = (
            not commit
            and req.producer_epoch == md.prev_epoch
            and md.state in (TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_ABORT)
        )
        if aborted_for_it:  # the coordinator aborted it already (its timeout)
            ok = md.state == TxnStatus.COMPLETE_ABORT
            return reply(ErrorCode.none if ok else ErrorCode.concurrent_transactions)
        if md.producer_epoch != req.producer_epoch:
            return reply(ErrorCode.producer_fenced)
        if md.busy:
            return reply(ErrorCode.concurrent_transactions)
        done = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
        preparing = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        if md.state == done:
            return reply(ErrorCode.none)  # a retry of what is done
        if md.state == preparing:
            return reply(ErrorCode.concurrent_transactions)
        if md.state != TxnStatus.ONGOING:
            return reply(ErrorCode.invalid_txn_state)
        return reply(await self._begin_end(md, commit, bump=False))

    async def _begin_end(self, md: TxnMetadata, commit: bool, bump: bool) -> ErrorCode:
        """Write PrepareCommit/PrepareAbort (with a bumped epoch when the coordinator
        aborts on its own, fencing the producer), then complete in the background."""
        state = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        epoch = md.producer_epoch + 1 if bump else md.producer_epoch
        prev = md.producer_epoch if bump else md.prev_epoch
        err = await self._transition(md, state=state, producer_epoch=epoch, prev_epoch=prev)
        if err == ErrorCode.none:
            self._complete_later(md, commit)
        return err

    def _complete_later(self, md: TxnMetadata, commit: bool) -> None:
        task = asyncio.get_running_loop().create_task(self._complete(md, commit))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, md: TxnMetadata, commit: bool) -> None:
        """Markers on every partition of the transaction, then CompleteCommit/Abort."""
        md.busy = True
        tid = md.transactional_id
        idx = self._partition_of(tid)
        coordinator_epoch = self._loaded.get(idx, -1) if idx is not None else -1
        remaining = set(md.partitions)
        attempt = 0
        try:
            while remaining:
                if idx is None or self._loaded.get(idx) != coordinator_epoch:
                    return  # no longer the coordinator: the new one carries on
                remaining = await self._send_markers(md, commit, coordinator_epoch, remaining)
                if remaining:
                    await asyncio.sleep(_RETRY_S[min(attempt, len(_RETRY_S) - 1)])
                    attempt += 1
                    if attempt % 20 == 0:
                        log.warning(
                            "[node %d] Transaction of %s: markers not written yet on %s",
                            self.broker.node_id, tid, sorted(remaining),
                        )  # fmt: skip
            state = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
            md.busy = False
            while await self._transition(md, state=state, partitions=set()) != ErrorCode.none:
                if idx is None or self._loaded.get(idx) != coordinator_epoch:
                    return
                await asyncio.sleep(0.5)
        finally:
            md.busy = False

    async def _send_markers(
        self, md: TxnMetadata, commit: bool, coordinator_epoch: int, parts: set[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        """One round: the partitions still to do (topics deleted meanwhile are done)."""
        image = self.broker.image
        by_leader: dict[int, list[tuple[str, int]]] = {}
        left: set[tuple[str, int]] = set()
        for topic, index in parts:
            t = image.topic(topic)
            if t is None or index not in t.partitions:
                continue  # deleted: nothing to end there
            leader = t.partitions[index].leader
            if leader < 0:
                left.add((topic, index))
            else:
                by_leader.setdefault(leader, []).append((topic, index))
        for leader, group in by_leader.items():
            pid, epoch = md.producer_id, md.producer_epoch
            if leader == self.broker.node_id:
                results = await self.markers.write(pid, epoch, commit, coordinator_epoch, group)
            else:
                results = await self._remote_markers(leader, md, commit, coordinator_epoch, group)
            for key, err in results.items():
                if err not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
                    left.add(key)
        return left

    async def _remote_markers(
        self,
        leader: int,
        md: TxnMetadata,
        commit: bool,
        coordinator_epoch: int,
        group: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        reg = self.broker.image.brokers.get(leader)
        failed = {key: ErrorCode.not_leader_or_follower for key in group}
        found = reg.endpoint(self.broker.inter_broker_listener) if reg is not None else None
        if found is None:
            return failed
        by_topic: dict[str, list[int]] = {}
        for topic, index in group:
            by_topic.setdefault(topic, []).append(index)
        body = {
            "markers": [
                {
                    "producer_id": md.producer_id,
                    "producer_epoch": md.producer_epoch,
                    "transaction_result": commit,
                    "topics": [{"name": n, "partition_indexes": i} for n, i in by_topic.items()],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        }
        host, port = found
        try:
            resp = await self._peer_request(host, port, ApiKey.WRITE_TXN_MARKERS, 1, body)
        except OSError as e:
            log.debug("[node %d] WriteTxnMarkers to %d: %s", self.broker.node_id, leader, e)
            return failed
        out: dict[tuple[str, int], ErrorCode] = {}
        for m in resp.markers:
            for t in m.topics:
                for pr in t.partitions:
                    out[(t.name, pr.partition_index)] = ErrorCode(pr.error_code)
        return {key: out.get(key, ErrorCode.not_leader_or_follower) for key in group}

    # -- timeouts ------------------------------------------------------------------------

    async def _abort_timed_out(self) -> None:
        """Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: abort (and
        fence) transactions open longer than their producer's transaction.timeout.ms."""
        while True:
            await asyncio.sleep(self.settings.abort_interval_ms / 1000)
            try:
                await self._sweep(_now_ms())
            except Exception:  # the next sweep tries again; the timer must not die
                log.exception("[node %d] Transaction timeout sweep failed", self.broker.node_id)

    async def _sweep(self, now: int) -> None:
        expired = []
        removing = now - self._last_removal >= self.settings.remove_interval_ms
        if removing:
            self._last_removal = now
        for md in list(self.txns.values()):
            if md.busy:
                continue
            if md.state == TxnStatus.ONGOING and now - md.start_ms > md.timeout_ms:
                log.info(
                    "[node %d] Aborting the transaction of %s (producer %d epoch %d): "
                    "open for %d ms, longer than its timeout of %d ms",
                    self.broker.node_id, md.transactional_id, md.producer_id,
                    md.producer_epoch, now - md.start_ms, md.timeout_ms,
                )  # fmt: skip
                await self._begin_end(md, commit=False, bump=True)
            elif (
                removing
                and md.state in _IDLE
                and now - md.update_ms > self.settings.id_expiration_ms
                and self.txns.get(md.transactional_id) is md
            ):
                # transactional.id.expiration.ms: an id that did nothing that long goes
                # (a tombstone, removed by the cleaner); its next producer starts anew
                md.busy = True
                try:
                    err = await self._persist(md, tombstone=True)
                finally:
                    md.busy = False
                if err == ErrorCode.none:
                    self.txns.pop(md.transactional_id, None)
                    expired.append(md.transactional_id)
        if expired:
            log.info(
                "[node %d] Expired %d transactional id(s) idle longer than "
                "transactional.id.expiration.ms: %s",
                self.broker.node_id, len(expired), ", ".join(sorted(expired)[:10]),
            )  # fmt: skip
