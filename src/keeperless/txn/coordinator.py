"""The transaction coordinator (Kafka's design): the coordinator of a transactional id is
the leader of its ``__transaction_state`` partition, where every state change of the id's
transaction is written (acks=all) before it is answered; on a new leader the partition's
records are read again and unfinished commits and aborts are carried on.

The rules are coordinator/txn_shard.py's shard, hosted by the coordinator runtime (one
shard per partition led here); this module is their I/O: the requests' coordinator
checks, producer ids from the controller, verification with a coordinator on another
broker (KIP-890), the markers of a transaction prepared to end, and the timers."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.coordinator_log import BrokerPartitionLog
from keeperless.broker.txn_markers import OFFSETS_TOPIC, TxnMarkerWriter
from keeperless.coordinator.outcome import Outcome
from keeperless.coordinator.runtime import CoordinatorRuntime
from keeperless.coordinator.txn_records import TxnMetadata, TxnStatus
from keeperless.coordinator.txn_shard import Reply, TxnRules, TxnShard
from keeperless.group.coordinator import find_coordinator_response, partition_for_group
from keeperless.metadata.admin import NewTopic
from keeperless.metadata.features import TRANSACTION_VERSION_FEATURE
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["TXN_TOPIC", "TxnCoordinator", "TxnSettings"]

log = logging.getLogger(__name__)
_PEER_TIMEOUT_S = 30.0  # a marker write or a verification, to another broker
TXN_TOPIC = "__transaction_state"
_RETRY_S = (0.1, 0.2, 0.5, 1.0)
T = TypeVar("T")


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


def _now_ms() -> int:
    return int(time.time() * 1000)


def _call(
    op: Callable[..., Outcome[T]], /, *args: Any, **kw: Any
) -> Callable[[TxnShard], Outcome[T]]:
    """``op`` (a TxnShard method) bound to its arguments, for the runtime to run."""
    return lambda shard: op(shard, *args, **kw)


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
        rules = TxnRules(settings.max_timeout_ms, settings.id_expiration_ms)
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            "transaction coordinator",
            TXN_TOPIC,
            BrokerPartitionLog(broker),
            lambda: TxnShard(rules),
            settings.write_timeout_ms / 1000,
            broker.node_id,
            on_load=self._loaded,
        )
        self._last_removal = _now_ms()
        self._tasks: set[asyncio.Task[None]] = set()
        # transactions being ended: (partition, coordinator epoch, id, offset of the
        # record that prepared it)
        self._ending: set[tuple[int, int, str, int]] = set()
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
        self.runtime.close()

    @property
    def txns(self) -> dict[str, TxnMetadata]:
        """Every transactional id coordinated here, with its state (the admin APIs')."""
        return {
            tid: md for shard in self.runtime.shards().values() for tid, md in shard.txns.items()
        }

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

    def _on_image(self, _image: Any) -> None:
        """Follow the leadership of __transaction_state once this broker's partitions
        are live (the images of the metadata log's replay at start are past ones)."""
        if self.broker.partitions_live:
            self.runtime.on_leadership()

    def _loaded(self, index: int, shard: TxnShard) -> None:
        """A shard read from the log: carry on the commits and aborts it has prepared."""
        prepared = shard.preparing()
        for md in prepared:
            self._end_later(index, md.transactional_id)
        if prepared:
            log.info("[node %d] Completing %d transaction(s) found prepared in %s-%d",
                     self.broker.node_id, len(prepared), TXN_TOPIC, index)  # fmt: skip

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
        if idx is not None and self.runtime.loading(idx):
            return ErrorCode.coordinator_load_in_progress
        if idx is None or self.runtime.shard(idx) is None:
            return ErrorCode.not_coordinator
        return None

    def _finalized_tv(self) -> int:
        return self.broker.image.features.get(TRANSACTION_VERSION_FEATURE, 0)

    async def _write(
        self, tid: str, op: Callable[..., Outcome[Reply]], *args: Any, **kw: Any
    ) -> Reply:
        """Run a shard's operation on the id's partition (with a new producer id when the
        rule asks for one) and carry on the transaction it prepared to end."""
        idx = self._partition_of(tid)
        if idx is None:
            return Reply(ErrorCode.not_coordinator)
        pid: int | None = None
        for _ in range(2):
            given = {} if pid is None else {"new_producer_id": pid}
            got = await self.runtime.write(
                idx, _call(op, *args, now_ms=_now_ms(), finalized_tv=self._finalized_tv(),
                           **given, **kw),
            )  # fmt: skip
            if isinstance(got, ErrorCode):
                return Reply(got)
            if not got.need_producer_id:
                if got.end is not None:
                    self._end_later(idx, got.end)
                return got
            err, pid = await self.broker.allocate_producer_id()
            if err != ErrorCode.none:
                return Reply(err)
        return Reply(ErrorCode.concurrent_transactions)

    # -- FindCoordinator -----------------------------------------------------------------

    async def find_coordinator(self, header: RequestHeader, req: Any) -> Any:
        """FindCoordinator for every key type, as Kafka's KafkaApis answers it: a
        transactional id's coordinator here, a group's from the group coordinator."""
        if getattr(req, "key_type", 0) != 1:
            return await self._find_group(header, req)
        ready = self._ensure_topic()
        return find_coordinator_response(header, req, self.broker.image, TXN_TOPIC, ready)

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
        got = await self._write(
            tid, TxnShard.init_producer_id, tid, timeout_ms,
            getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1),
        )  # fmt: skip
        if got.error == ErrorCode.none:
            log.info("[node %d] Transactional id %s: producer %d epoch %d",
                     self.broker.node_id, tid, got.producer_id, got.producer_epoch)  # fmt: skip
        return reply(got.error, got.producer_id, got.producer_epoch)

    # -- adding partitions ---------------------------------------------------------------

    async def add_partitions_to_txn(self, header: RequestHeader, req: Any) -> Any:
        if header.api_version >= 4:
            return await self._add_partitions_batched(header, req)
        results = await self._add_partitions(
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
            results = await self._add_partitions(
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
    ) -> list[dict[str, Any]]:
        wanted = [(name, i) for name, idxs in topics for i in idxs]
        err = self._coordinator_error(tid)
        if err is None:
            image = self.broker.image
            unknown = [
                (n, i) for n, i in wanted
                if (t := image.topic(n)) is None or i not in t.partitions
            ]  # fmt: skip
            args = (tid, pid, epoch, wanted, unknown, verify_only, tv)
            if verify_only:  # KIP-890's check: a read, of committed state only
                idx = self._partition_of(tid)
                now, fin = _now_ms(), self._finalized_tv()
                read = (
                    await self.runtime.read_committed(
                        idx, lambda s: s.add_partitions(*args, now, fin).response
                    )
                    if idx is not None
                    else ErrorCode.not_coordinator
                )
                got = Reply(read) if isinstance(read, ErrorCode) else read
            else:
                got = await self._write(tid, TxnShard.add_partitions, *args)
            errors = dict(got.partition_errors) if got.partition_errors else {}
            err = got.error
        else:
            errors = {}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for key in wanted:
            code = errors.get(key, err)
            by_topic.setdefault(key[0], []).append(
                {"partition_index": key[1], "partition_error_code": code}
            )
        return [{"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]

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
            results = await self._add_partitions(tid, pid, epoch, topics, not add, 2 if add else 0)
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
        tid = req.transactional_id
        err = self._coordinator_error(tid)
        if err is None:
            t = self.broker.image.topic(OFFSETS_TOPIC)
            if t is None:
                if self._ensure_offsets is not None:
                    self._ensure_offsets()  # in the background; the client asks again
                err = ErrorCode.coordinator_not_available
            else:
                part = (OFFSETS_TOPIC, partition_for_group(req.group_id, len(t.partitions)))
                got = await self._write(
                    tid, TxnShard.add_offsets, tid, req.producer_id, req.producer_epoch, part
                )
                err = got.error
        return build(
            response_class(ApiKey.ADD_OFFSETS_TO_TXN, header.api_version),
            {"throttle_time": 0, "error_code": err},
        )

    # -- ending ----------------------------------------------------------------------------

    async def end_txn(self, header: RequestHeader, req: Any) -> Any:
        tid = req.transactional_id
        err = self._coordinator_error(tid)
        got = Reply(err) if err is not None else await self._write(
            tid, TxnShard.end_txn, tid, req.producer_id, req.producer_epoch, req.committed,
            2 if header.api_version >= 5 else 0,
        )  # fmt: skip
        # v5 (TV2): the producer id and epoch of the producer's next transaction
        ok = got.error == ErrorCode.none
        return build(
            response_class(ApiKey.END_TXN, header.api_version),
            {"throttle_time": 0, "error_code": got.error,
             "producer_id": got.producer_id if ok else -1,
             "producer_epoch": got.producer_epoch if ok else -1},
        )  # fmt: skip

    def _end_later(self, index: int, tid: str) -> None:
        """Write the markers of the transaction ``tid`` prepared to end, then complete
        it: one task per prepared transaction (the record that prepared it names it)."""
        shard = self.runtime.shard(index)
        epoch = self.runtime.epoch(index)
        md = shard.txns.get(tid) if shard is not None else None
        prepared = shard.prepared_at.get(tid) if shard is not None else None
        if md is None or prepared is None or epoch is None:
            return
        key = (index, epoch, tid, prepared)
        if key in self._ending:
            return
        self._ending.add(key)
        task = asyncio.get_running_loop().create_task(self._end(index, epoch, md, prepared, key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _end(
        self,
        index: int,
        coordinator_epoch: int,
        md: TxnMetadata,
        prepared: int,
        key: tuple[int, int, str, int],
    ) -> None:
        """Markers on every partition of the transaction, then CompleteCommit/Abort, for
        as long as this broker leads the partition in the epoch it was prepared in (its
        shard read again after a write not confirmed included)."""
        try:
            tid = md.transactional_id
            commit = md.state == TxnStatus.PREPARE_COMMIT
            remaining = set(md.partitions)
            attempt = 0
            while remaining:
                if not self.runtime.leads(index, coordinator_epoch):
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
            complete = functools.partial(
                TxnShard.complete, tid=tid, commit=commit, prepared_at=prepared
            )
            while self.runtime.leads(index, coordinator_epoch):
                got = await self.runtime.write(
                    index,
                    lambda s: complete(s, now_ms=_now_ms(), finalized_tv=self._finalized_tv()),
                )
                if not isinstance(got, ErrorCode):
                    return  # completed, or over already
                await asyncio.sleep(0.5)
        finally:
            self._ending.discard(key)

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
        for idx, shard in self.runtime.shards().items():
            for tid in shard.timed_out(now):
                md = shard.txns[tid]
                log.info(
                    "[node %d] Aborting the transaction of %s (producer %d epoch %d): "
                    "open for %d ms, longer than its timeout of %d ms",
                    self.broker.node_id, tid, md.producer_id, md.producer_epoch,
                    now - md.start_ms, md.timeout_ms,
                )  # fmt: skip
                await self._write(tid, TxnShard.abort_timed_out, tid)
            if not removing:
                continue
            for tid in shard.expired(now):
                # transactional.id.expiration.ms: an id that did nothing that long goes
                # (a tombstone, removed by the cleaner); its next producer starts anew
                got = await self.runtime.write(idx, _call(TxnShard.expire, tid, now_ms=now))
                if got is True:
                    expired.append(tid)
        if expired:
            log.info(
                "[node %d] Expired %d transactional id(s) idle longer than "
                "transactional.id.expiration.ms: %s",
                self.broker.node_id, len(expired), ", ".join(sorted(expired)[:10]),
            )  # fmt: skip
