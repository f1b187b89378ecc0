"""The transaction coordinator (Kafka's design): the coordinator of a transactional id is
the leader of its `__transaction_state` partition, where every state change of the id's
transaction is written (acks=all) before it is answered; on a new leader the partition's
records are read again and unfinished commits and aborts are carried on.

States (Kafka's numbers): Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7; the records are in
``txn_records``.

Transaction version 2 (KIP-890 part 2), chosen per request as Kafka does (EndTxn v5,
AddPartitionsToTxn v5 from a partition leader adding for a Produce v12+): every
transaction ends with an epoch bump, its markers carry the bumped epoch, and EndTxn
answers the producer id and epoch of the next transaction; a late write or marker of an
ended transaction is then older than the producer's epoch everywhere and refused."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.group_coordinator import find_coordinator_response, partition_for_group
from keeperless.broker.partitions import NotLeaderError
from keeperless.broker.txn_markers import OFFSETS_TOPIC, TxnMarkerWriter
from keeperless.broker.txn_records import (
    TxnMetadata,
    TxnStatus,
    parse_txn_record,
    txn_key,
    txn_value,
    valid_transition,
    value_version,
)
from keeperless.metadata.admin import NewTopic
from keeperless.metadata.features import TRANSACTION_VERSION_FEATURE
from keeperless.metadata.image import MetadataImage
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.protocol.records import build_batch, decode_records

__all__ = ["TXN_TOPIC", "TxnCoordinator", "TxnSettings"]

log = logging.getLogger(__name__)
_PEER_TIMEOUT_S = 30.0  # a marker write or a verification, to another broker
TXN_TOPIC = "__transaction_state"
_MAX_EPOCH = 32767 - 1  # past it the producer gets a new id (Kafka's rule)
_RETRY_S = (0.1, 0.2, 0.5, 1.0)


_PREPARING = (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT, TxnStatus.PREPARE_EPOCH_FENCE)
_IDLE = (TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT)
# a transaction ending or ended (EndTxn's retries)
_ENDING = (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_COMMIT,
           TxnStatus.COMPLETE_ABORT)  # fmt: skip


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


_MARKER_DONE = (
    ErrorCode.none,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.invalid_producer_epoch,
)


def _fresh_epoch(md: TxnMetadata) -> bool:
    """No transaction ended in the producer's current epoch: it was just given (Empty),
    or the last transaction was a TV2 one, whose end bumped it."""
    return md.state == TxnStatus.EMPTY or md.client_tv >= 2


def _next_ids(md: TxnMetadata) -> tuple[int, int]:
    """The producer id and epoch a producer uses after an EndTxn v5."""
    return (
        (md.next_producer_id, 0)
        if md.next_producer_id != -1
        else (md.producer_id, md.producer_epoch)
    )


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

    def _finalized_tv(self) -> int:
        return self.broker.image.features.get(TRANSACTION_VERSION_FEATURE, 0)

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
        value = None if tombstone else txn_value(md, value_version(md, self._finalized_tv()))
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
        """Persist ``md`` with ``changes``; apply them in memory once written. A state
        change outside Kafka's table of valid transitions is refused, not written."""
        state = changes.get("state", md.state)
        if not valid_transition(md.state, state):
            log.error(
                "[node %d] Refused an invalid transition of %s from %s to %s",
                self.broker.node_id, md.transactional_id, md.state.name, state.name,
            )  # fmt: skip
            return ErrorCode.invalid_txn_state
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
        if md is not None and pid == md.next_producer_id and md.state in _PREPARING:
            return ErrorCode.concurrent_transactions, None  # TV2: its epoch ran out
        if md is None or md.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping, None
        if md.producer_epoch != epoch:
            return ErrorCode.producer_fenced, None
        if md.busy or md.state in _PREPARING:
            return ErrorCode.concurrent_transactions, None
        return None, md

    async def _add(self, md: TxnMetadata, parts: set[tuple[str, int]], tv: int = 0) -> ErrorCode:
        """Add ``parts`` to the producer's transaction, beginning one if none is open
        (``tv`` 2: a partition leader adding for a TV2 producer's Produce, KIP-890)."""
        if md.state == TxnStatus.ONGOING and parts <= md.partitions and md.client_tv == tv:
            return ErrorCode.none
        start = md.start_ms if md.state == TxnStatus.ONGOING else _now_ms()
        return await self._transition(
            md, state=TxnStatus.ONGOING, partitions=md.partitions | parts, start_ms=start,
            client_tv=tv,
        )  # fmt: skip

    async def add_partitions_to_txn(self, header: RequestHeader, req: Any) -> Any:
        if header.api_version >= 4:
            return await self._add_partitions_batched(header, req)
        _err, results = await self._add_partitions(
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            [(t.name, tuple(t.partitions)) for t in req.v3_and_below_topics],
            verify_only=False,
            tv=0,
        )
        return build(
            response_class(ApiKey.ADD_PARTITIONS_TO_TXN, header.api_version),
            {"throttle_time": 0, "results_by_topic_v3_and_below": results},
        )

    async def _add_partitions_batched(self, header: RequestHeader, req: Any) -> Any:
        """v4+: brokers verifying (KIP-890) or adding for several transactions; an add
        by v5 is a partition leader's for a TV2 producer's Produce."""
        out = []
        tv = 2 if header.api_version >= 5 else 0
        for txn in req.transactions:
            _err, results = await self._add_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch,
                [(t.name, tuple(t.partitions)) for t in txn.topics], txn.verify_only, tv,
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
        tv: int,
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
            elif verify_only or (tv >= 2 and md.state in _IDLE and not _fresh_epoch(md)):
                # (a TV2 add begins a transaction only with an epoch no transaction
                # ended in: else a late write of a TV1 transaction, same epoch, would
                # open one; a producer moving to TV2 aborts once to get a new epoch)
                ongoing = md.partitions if md.state == TxnStatus.ONGOING else set()
                missing = [k for k in wanted if k not in ongoing]
                errors = {k: ErrorCode.transaction_abortable for k in missing}
                err = ErrorCode.none
            else:
                err = await self._add(md, set(wanted), tv)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for key in wanted:
            code = errors.get(key, err or ErrorCode.none)
            by_topic.setdefault(key[0], []).append(
                {"partition_index": key[1], "partition_error_code": code}
            )
        results = [{"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]
        return err or ErrorCode.none, results

    async def verify(
        self, tid: str, pid: int, epoch: int, parts: list[tuple[str, int]], add: bool = False
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1, for a partition leader about to append a producer's first
        transactional batch there: does the coordinator of ``tid`` (here or on another
        broker) have these partitions in the producer's ongoing transaction? A write that
        arrives after its transaction ended (a late retry, a zombie) must not open a
        transaction no coordinator will ever end. ``add`` (part 2, a TV2 producer, which
        sends no AddPartitionsToTxn): add them instead, as AddPartitionsToTxn v5 does;
        a late write then carries an epoch the coordinator has bumped, and is fenced."""
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
            _err, results = await self._add_partitions(
                tid, pid, epoch, topics, not add, 2 if add else 0
            )
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
                    "verify_only": not add,
                    "topics": [{"name": n, "partitions": i} for n, i in by_topic.items()],
                }
            ]
        }
        host, port = found
        try:
            version = 5 if add else 4
            resp = await self._peer_request(host, port, ApiKey.ADD_PARTITIONS_TO_TXN, version, body)
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
        def reply(err: ErrorCode, md: TxnMetadata | None = None) -> Any:
            # v5 (TV2): the producer id and epoch of the producer's next transaction
            pid, epoch = _next_ids(md) if md is not None and err == ErrorCode.none else (-1, -1)
            return build(
                response_class(ApiKey.END_TXN, header.api_version),
                {"throttle_time": 0, "error_code": err, "producer_id": pid,
                 "producer_epoch": epoch},
            )  # fmt: skip

        tid, commit, pid, epoch = (
            req.transactional_id,
            req.committed,
            req.producer_id,
            req.producer_epoch,
        )
        tv = 2 if header.api_version >= 5 else 0
        err = self._coordinator_error(tid)
        if err is not None:
            return reply(err)
        md = self.txns.get(tid)
        if md is None:
            return reply(ErrorCode.invalid_producer_id_mapping)
        # TV2 retries: the epoch was bumped at the end (or ran out: a new producer id)
        overflowed = (
            md.client_tv >= 2 and pid == md.prev_producer_id and epoch == _MAX_EPOCH
            and md.producer_epoch == 0
        )  # fmt: skip
        if md.producer_id != pid and not overflowed:
            return reply(ErrorCode.invalid_producer_id_mapping)
        done = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
        preparing = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        aborted_for_it = (
            not commit
            and epoch == md.prev_epoch
            and md.state in (TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_ABORT)
        )
        bumped = overflowed or (md.client_tv >= 2 and md.producer_epoch == epoch + 1)
        if aborted_for_it or (bumped and md.state in (done, preparing)):
            # a retry of what was ended (or the coordinator's abort at its timeout)
            ok = md.state == done
            return reply(ErrorCode.none if ok else ErrorCode.concurrent_transactions, md)
        if bumped and md.state not in (TxnStatus.ONGOING, TxnStatus.EMPTY):
            return reply(ErrorCode.invalid_txn_state)
        if md.producer_epoch != epoch:
            return reply(ErrorCode.producer_fenced)
        if md.busy:
            return reply(ErrorCode.concurrent_transactions)
        if tv >= 2 and not commit and not _fresh_epoch(md) and md.state in _IDLE:
            # a producer moving to TV2 after a TV1 transaction, refused its first write
            # (TRANSACTION_ABORTABLE), aborts: nothing is open, the epoch is bumped
            # (PrepareAbort, then CompleteAbort with no marker to write)
            return reply(await self._begin_end(md, commit=False, bump=True, tv=tv), md)
        if md.client_tv >= 2 and md.state in _ENDING:
            # TV2: the ended transaction's epoch is the next one's, with nothing added
            # (retries carry the epoch before the bump): Kafka says PRODUCER_FENCED
            return reply(ErrorCode.producer_fenced)
        if md.state == done:
            return reply(ErrorCode.none, md)  # a retry of what is done
        if md.state == preparing:
            return reply(ErrorCode.concurrent_transactions)
        if md.state != TxnStatus.ONGOING:
            return reply(ErrorCode.invalid_txn_state)
        err = await self._begin_end(md, commit, bump=tv >= 2, tv=tv)
        return reply(err, md)

    async def _begin_end(
        self, md: TxnMetadata, commit: bool, bump: bool, tv: int | None = None
    ) -> ErrorCode:
        """Write PrepareCommit/PrepareAbort, then complete in the background. The epoch
        is bumped when the coordinator aborts on its own (fencing the producer) and at
        the end of every TV2 transaction; a TV2 producer whose epoch runs out gets a new
        producer id once the transaction is complete."""
        state = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        epoch = md.producer_epoch + 1 if bump else md.producer_epoch
        prev = md.producer_epoch if bump else md.prev_epoch
        tv = md.client_tv if tv is None else tv
        next_pid = -1
        if bump and tv >= 2 and md.producer_epoch >= _MAX_EPOCH:
            err, next_pid = await self.broker.allocate_producer_id()
            if err != ErrorCode.none:
                return err
        err = await self._transition(
            md, state=state, producer_epoch=epoch, prev_epoch=prev, client_tv=tv,
            next_producer_id=next_pid,
        )  # fmt: skip
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
            done: dict[str, Any] = {
                "state": TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT,
                "partitions": set(),
            }
            if md.next_producer_id != -1:  # TV2, the epoch ran out: the next id
                done.update(
                    producer_id=md.next_producer_id, producer_epoch=0,
                    prev_producer_id=md.producer_id, next_producer_id=-1,
                )  # fmt: skip
            md.busy = False
            while await self._transition(md, **done) != ErrorCode.none:
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
                results = await self.markers.write(
                    pid, epoch, commit, coordinator_epoch, group, md.client_tv
                )
            else:
                results = await self._remote_markers(leader, md, commit, coordinator_epoch, group)
            for key, err in results.items():
                # a newer epoch of the producer there: this transaction is over there
                # (Kafka's marker handler stops sending on it too)
                if err not in _MARKER_DONE:
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
                    "transaction_version": md.client_tv,
                }
            ]
        }
        host, port = found
        try:
            resp = await self._peer_request(host, port, ApiKey.WRITE_TXN_MARKERS, 2, body)
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
