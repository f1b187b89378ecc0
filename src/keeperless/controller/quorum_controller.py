"""The quorum controller: the single writer of cluster metadata (KIP-631), sans-I/O.

Every operation validates against the controller's latest image (which includes records
appended but not yet committed, so that pipelined operations see each other) and returns
``Result(records, response)`` without changing state. State changes only when the driver
``replay``s the records, in log order.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.eligible import min_isr_of
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import (
    ApiError,
    CreatePartitionsRequest,
    CreateTopicResult,
    NewTopic,
    validate_topic_name,
)
from keeperless.metadata.features import (
    METADATA_VERSION_FEATURE,
    SUPPORTED_FEATURES,
    directory_assignment,
    elr_enabled,
)
from keeperless.metadata.image import (
    BROKER_RESOURCE,
    MIGRATING,
    TOPIC_RESOURCE,
    UNASSIGNED,
    MetadataDelta,
    MetadataImage,
    PartitionInfo,
)
from keeperless.metadata.topic_configs import TopicConfigError, validate_topic_configs

__all__ = ["PartitionKey", "QuorumController", "Result"]

log = logging.getLogger(__name__)

T = TypeVar("T")
PartitionKey = tuple[UUID, int]
PRODUCER_ID_BLOCK = 1000


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    records: list[Any]
    response: T
    # Atomic results go into one batch: all of them commit or none (a topic and its
    # partitions). Others are independent changes (leader moves of a fenced broker) that
    # may be appended in several batches, as Kafka does for big non-atomic operations.
    atomic: bool = True
    # Further records of a non-atomic result, generated as the earlier ones are appended
    # (from the image as it was when the operation ran): a broker of a million partitions
    # is fenced without computing a million changes in one block of the event loop.
    more: Iterable[Any] = ()

    def all_records(self) -> list[Any]:
        """``records`` and then ``more``, which this consumes."""
        return [*self.records, *self.more]


class QuorumController:
    def __init__(self, node_id: int, rng: random.Random, defaults: Mapping[str, int]) -> None:
        self.node_id = node_id
        self.rng = rng
        self.defaults = defaults  # num.partitions, default.replication.factor
        self.image = MetadataImage()  # the latest state, including uncommitted records
        self.committed = MetadataImage()  # what the log has committed
        self.session_timeout_ms = 9000
        self._last_heartbeat_ms: dict[int, int] = {}  # in memory only, like Kafka's
        self.broker_offsets: dict[int, int] = {}  # metadata offset in the last heartbeat
        # where each broker's InControlledShutdown change is in the log
        self.shutdown_offsets: dict[int, int] = {}
        self.partitions_by_broker: dict[int, set[PartitionKey]] = {}
        # index changes made by records not yet committed, newest last, so that losing
        # the leadership (or a failed append) undoes them instead of re-deriving the index
        # from every partition: (image offset, [(broker, partition, added)])
        self._journal: deque[tuple[int, list[tuple[int, PartitionKey, bool]]]] = deque()

    # -- state --------------------------------------------------------------------------

    def elr_min_isr(self, image: MetadataImage | None = None) -> Callable[[str], int] | None:
        """Each topic's effective min.insync.replicas (in ``image``, by default the
        controller's) while eligible leader replicas (KIP-966) are on; None while they
        are off."""
        image = self.image if image is None else image
        if not elr_enabled(image.features):
            return None
        static = {"min.insync.replicas": str(self.defaults.get("min.insync.replicas", 1))}
        return min_isr_of(image, static)

    def cluster_min_isr_records(self, features: Mapping[str, int] | None = None) -> list[Any]:
        """Kafka 4.1 with eligible leader replicas: min.insync.replicas is written as a
        cluster-level config (the controller's own value) when none is set, so that every
        broker and DescribeConfigs agree on it (DYNAMIC_DEFAULT_BROKER_CONFIG)."""
        if not elr_enabled(self.image.features if features is None else features):
            return []
        if "min.insync.replicas" in self.image.configs.get((BROKER_RESOURCE, ""), {}):
            return []
        value = str(self.defaults.get("min.insync.replicas", 1))
        return [
            r.ConfigRecord(
                resource_type=BROKER_RESOURCE,
                resource_name="",
                name="min.insync.replicas",
                value=value,
            )
        ]

    @property
    def directory_assignment(self) -> bool:
        """Replicas are assigned to log directories (KIP-858, metadata.version 3.7-IV2)."""
        return directory_assignment(self.metadata_version)

    def default_dir(self, broker_id: int) -> UUID:
        """Kafka's defaultDir: the directory a new replica on ``broker_id`` starts in -
        its only one; UNASSIGNED with several (the broker chooses and tells us);
        MIGRATING when it named none."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            return UNASSIGNED
        if not b.log_dirs:
            return MIGRATING
        return b.log_dirs[0] if len(b.log_dirs) == 1 else UNASSIGNED

    def new_directories(self, replicas: Sequence[int], old: PartitionInfo | None = None) -> Any:
        """The directories of ``replicas`` in a record that sets them: a replica kept
        keeps its directory, a new one starts in its broker's default; None before
        directory assignment (the record version has no such field)."""
        if not self.directory_assignment:
            return None
        return tuple(
            old.directory(b) if old is not None and b in old.replicas else self.default_dir(b)
            for b in replicas
        )

    @property
    def metadata_version(self) -> int | None:
        """The finalized metadata.version: which record versions this controller writes."""
        return self.image.features.get(METADATA_VERSION_FEATURE)

    def replay(self, records: Sequence[Any], last_offset: int) -> None:
        delta = MetadataDelta(self.image)
        for rec in records:
            delta.replay(rec)
        delta.offset = last_offset
        old, self.image = self.image, delta.apply()
        self._index(old, delta)
        self._note_shutdowns(old)

    def replay_committed(self, records: Sequence[Any], last_offset: int) -> None:
        """Committed records from the log. The active controller already applied its own
        as it appended them; a standby (or a restarted node) catches up here."""
        if last_offset <= self.committed.offset:
            return
        delta = MetadataDelta(self.committed)
        for rec in records:
            delta.replay(rec)
        delta.offset = last_offset
        old_committed = self.committed
        self.committed = delta.apply()
        if last_offset > self.image.offset:
            if self.image is not old_committed:  # ours were not what the log committed
                self._undo_to(old_committed.offset)
            old = self.image
            self.image = self.committed
            self._index(old_committed, delta)
            self._note_shutdowns(old)
        while self._journal and self._journal[0][0] <= self.committed.offset:
            self._journal.popleft()

    def load_image(self, image: MetadataImage) -> None:
        """A snapshot's image replaces everything (a controller that fell behind)."""
        self.committed = self.image = image
        self._journal.clear()
        self._reindex()

    def renounce(self) -> None:
        """Leadership lost: forget records that were appended but may never commit."""
        if self.image is not self.committed:
            self._undo_to(self.committed.offset)
            self.image = self.committed
        self._last_heartbeat_ms.clear()

    def rollback(self, image: MetadataImage) -> None:
        """Records applied as appended could not be appended after all (those of them
        that committed meanwhile stay)."""
        if image.offset < self.committed.offset:
            image = self.committed
        self._undo_to(image.offset)
        self.image = image

    def _note_shutdowns(self, old: MetadataImage) -> None:
        """Remember the offset at which a broker entered controlled shutdown (its change
        comes last in its operation, so this is the operation's end)."""
        if old.brokers is self.image.brokers:
            return
        for b in self.image.brokers.values():
            if not b.in_controlled_shutdown:
                self.shutdown_offsets.pop(b.broker_id, None)
            elif b.broker_id not in self.shutdown_offsets:
                prev = old.brokers.get(b.broker_id)
                if prev is None or not prev.in_controlled_shutdown:
                    self.shutdown_offsets[b.broker_id] = self.image.offset

    # -- which partitions each broker holds, so that fencing a broker costs its partitions

    def _index(self, old: MetadataImage, delta: MetadataDelta) -> None:
        idx = self.partitions_by_broker
        new = self.image
        changes: list[tuple[int, PartitionKey, bool]] = []

        def drop(b: int, key: PartitionKey) -> None:
            keys = idx.get(b)
            if keys is not None and key in keys:
                keys.discard(key)
                changes.append((b, key, False))

        for tid, p in delta.changed_partitions:
            ot = old.topics.get(tid)
            before = ot.partitions.get(p) if ot is not None else None
            nt = new.topics.get(tid)
            after = nt.partitions.get(p) if nt is not None else None
            if before is not None and (after is None or before.replicas != after.replicas):
                for b in before.replicas:
                    drop(b, (tid, p))
            if after is not None:
                for b in after.replicas:
                    keys = idx.setdefault(b, set())
                    if (tid, p) not in keys:
                        keys.add((tid, p))
                        changes.append((b, (tid, p), True))
        for tid, t in delta.deleted_topics.items():
            for p, info in t.partitions.items():
                for b in info.replicas:
                    drop(b, (tid, p))
        if changes and new.offset > self.committed.offset:
            self._journal.append((new.offset, changes))

    def _undo_to(self, offset: int) -> None:
        """Undo the index changes of records after ``offset``."""
        idx = self.partitions_by_broker
        while self._journal and self._journal[-1][0] > offset:
            for b, key, added in reversed(self._journal.pop()[1]):
                if added:
                    idx[b].discard(key)
                else:
                    idx.setdefault(b, set()).add(key)

    def _reindex(self) -> None:
        idx: dict[int, set[PartitionKey]] = {}
        for t in self.image.topics.values():
            for p, info in t.partitions.items():
                for b in info.replicas:
                    idx.setdefault(b, set()).add((t.topic_id, p))
        self.partitions_by_broker = idx

    def _uuid(self) -> UUID:
        while True:
            u = UUID(int=self.rng.getrandbits(128), version=4)
            if u.int > 100 and u not in self.image.topics:
                return u

    # -- brokers ------------------------------------------------------------------------

    def register_broker(
        self,
        broker_id: int,
        incarnation_id: UUID,
        endpoints: Sequence[tuple[str, str, int]],
        rack: str | None,
        next_offset: int,
        now_ms: int,
        features: Mapping[str, tuple[int, int]] | None = None,
        log_dirs: Sequence[UUID] = (),
    ) -> Result[tuple[ApiError, int]]:
        features = SUPPORTED_FEATURES if features is None else features
        for name, level in sorted(self.image.features.items()):
            # every finalized feature (metadata.version first among equals): a broker
            # that cannot run at its level would misread what the cluster writes
            lo, hi = features.get(name, (0, 0))
            if not lo <= level <= hi:
                return Result(
                    [],
                    (
                        ApiError(
                            ErrorCode.unsupported_version,
                            f"Unable to register because the broker does not support finalized "
                            f"version {level} of {name}. The broker wants a version between "
                            f"{lo} and {hi}, inclusive.",
                        ),
                        -1,
                    ),
                )
        existing = self.image.brokers.get(broker_id)
        last = self._last_heartbeat_ms.get(broker_id)
        live = last is not None and now_ms - last < self.session_timeout_ms
        if existing and existing.incarnation_id == incarnation_id:
            # the same process again: a copy of its request that arrived late (a TCP
            # retransmission after a partition healed, or the broker's retry after a
            # timeout). Registering it again gave it a new epoch the process never
            # heard of, and its heartbeats with the old one kept it fenced for good
            # (fault harness, seed 12001): answer with the epoch it has.
            self._last_heartbeat_ms[broker_id] = now_ms
            return Result([], (ApiError.none(), existing.epoch))
        if existing and existing.incarnation_id != incarnation_id and live:
            return Result(
                [],
                (
                    ApiError(
                        ErrorCode.duplicate_broker_registration,
                        f"Another broker is registered with id {broker_id}",
                    ),
                    -1,
                ),
            )
        epoch = next_offset
        self._last_heartbeat_ms[broker_id] = now_ms
        rec = r.RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=epoch,
            end_points=tuple(
                r.RegisterBrokerRecordBrokerEndpoint(name=n, host=h, port=p, security_protocol=0)
                for n, h, p in endpoints
            ),
            features=tuple(
                r.RegisterBrokerRecordBrokerFeature(
                    name=name, min_supported_version=fmin, max_supported_version=fmax
                )
                for name, (fmin, fmax) in sorted(features.items())
            ),
            rack=rack,
            fenced=True,
            log_dirs=tuple(sorted(log_dirs)) if self.directory_assignment else (),
        )
        log.info(
            "[node %d] Registering broker %d with epoch %d (%s, rack %s); fenced until it "
            "catches up with the metadata log",
            self.node_id,
            broker_id,
            epoch,
            "a new incarnation" if existing else "new",
            rack,
        )
        return Result([rec], (ApiError.none(), epoch))

    def steady_heartbeat(
        self,
        broker_id: int,
        epoch: int,
        want_fence: bool,
        now_ms: int,
        *,
        want_shut_down: bool = False,
        metadata_offset: int = -1,
        offline_dirs: Sequence[UUID] = (),
    ) -> tuple[ApiError, bool, bool] | None:
        """The answer to a heartbeat that changes nothing (an active broker of the current
        epoch that wants to stay), or None if it needs the full operation. Such heartbeats
        are answered at once and keep the session from their arrival, never waiting
        behind a long operation (moving a million leaderships) — otherwise every other
        broker would miss its session behind it."""
        b = self.image.brokers.get(broker_id)
        if b is None or b.epoch != epoch or not b.active or want_fence or want_shut_down:
            return None
        if any(d in b.log_dirs for d in offline_dirs):
            return None  # a directory newly offline: its replicas' leaderships move
        self._last_heartbeat_ms[broker_id] = now_ms
        self.broker_offsets[broker_id] = metadata_offset
        return ApiError.none(), False, False

    def broker_heartbeat(
        self,
        broker_id: int,
        epoch: int,
        want_fence: bool,
        caught_up: bool,
        now_ms: int,
        *,
        want_shut_down: bool = False,
        metadata_offset: int = -1,
        offline_dirs: Sequence[UUID] = (),
    ) -> Result[tuple[ApiError, bool, bool]]:
        """(error, is fenced, should shut down): see fencing.broker_heartbeat."""
        from keeperless.controller.fencing import broker_heartbeat

        return broker_heartbeat(
            self,
            broker_id,
            epoch,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
            caught_up=caught_up,
            metadata_offset=metadata_offset,
            now_ms=now_ms,
            offline_dirs=offline_dirs,
        )

    def unregister_broker(self, broker_id: int) -> Result[ApiError]:
        """Remove a broker's registration for good (it must be stopped: fenced)."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            return Result(
                [],
                ApiError(
                    ErrorCode.broker_id_not_registered, f"Broker {broker_id} is not registered"
                ),
            )
        if not b.fenced:
            return Result(
                [],
                ApiError(
                    ErrorCode.invalid_request, f"Broker {broker_id} is still active; stop it first"
                ),
            )
        self._last_heartbeat_ms.pop(broker_id, None)
        log.info("[node %d] Unregistering broker %d", self.node_id, broker_id)
        return Result(
            [r.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=b.epoch)], ApiError.none()
        )

    def allocate_producer_ids(
        self, broker_id: int, epoch: int
    ) -> Result[tuple[ApiError, int, int]]:
        start = self.image.next_producer_id
        rec = r.ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=epoch, next_producer_id=start + PRODUCER_ID_BLOCK
        )
        return Result([rec], (ApiError.none(), start, PRODUCER_ID_BLOCK))

    # -- topics -------------------------------------------------------------------------

    def _rack_striped(self, ids: list[int]) -> list[int]:
        """Brokers ordered so that neighbours sit on different racks (when racks are set)."""
        by_rack: dict[str, list[int]] = {}
        for b in sorted(ids):
            by_rack.setdefault(self.image.brokers[b].rack or "", []).append(b)
        if len(by_rack) <= 1:
            return sorted(ids)
        queues = [by_rack[k] for k in sorted(by_rack)]
        out: list[int] = []
        while any(queues):
            for q in queues:
                if q:
                    out.append(q.pop(0))
        return out

    def _manual_assignment_error(self, index: int, reps: list[int], rf: int) -> str | None:
        """Why a partition's manual replica list is refused, in Kafka's words
        (ReplicationControlManager.validateManualPartitionAssignment)."""
        if not reps:
            return "The manual partition assignment includes an empty replica list."
        for b in sorted(set(reps)):
            if b not in self.image.brokers:
                return (f"The manual partition assignment includes broker {b}, but no such "
                        "broker is registered.")  # fmt: skip
        for b in sorted(reps):
            if reps.count(b) > 1:
                return f"The manual partition assignment includes the broker {b} more than once."
        if len(reps) != rf:
            return (f"The manual partition assignment includes a partition with {len(reps)} "
                    "replica(s), but this is not consistent with previous partitions, which "
                    f"have {rf} replica(s).")  # fmt: skip
        if not any(self.image.brokers[b].active for b in reps):
            return (f"All brokers specified in the manual partition assignment for partition "
                    f"{index} are fenced or in controlled shutdown.")  # fmt: skip
        return None

    def _place(
        self, num_partitions: int, rf: int, start_partition: int = 0
    ) -> list[list[int]] | ApiError:
        """Replica placement as Kafka's StripedReplicaPlacer: unfenced brokers first,
        striped across racks; a registered broker that is fenced or in controlled shutdown
        (down for a rolling restart) is used only when the replication factor needs it,
        and never as the leader (the first replica)."""
        regs = list(self.image.brokers.values())
        live = self._rack_striped(
            [b.broker_id for b in regs if not b.fenced and not b.in_controlled_shutdown]
        )
        brokers = live
        if rf > len(live):
            resting = [b.broker_id for b in regs if b.fenced or b.in_controlled_shutdown]
            brokers = live + self._rack_striped(resting)
        if not live:
            return ApiError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {rf} time(s): All brokers are currently "
                "fenced.",
            )
        if rf > len(brokers):
            return ApiError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {rf} time(s): The target replication factor "
                f"of {rf} cannot be reached because only {len(brokers)} broker(s) are registered.",
            )
        racks = {self.image.brokers[b].rack for b in brokers}
        n = len(brokers)
        start = self.rng.randrange(len(live))
        # with racks, consecutive striped brokers spread a partition across racks
        shift = 0 if len(racks) > 1 else self.rng.randrange(max(n - 1, 1))
        out = []
        for p in range(start_partition, start_partition + num_partitions):
            first = (start + p) % len(live)
            replicas = [brokers[first]]
            for k in range(1, rf):
                replicas.append(brokers[(first + (shift + k - 1) % (n - 1) + 1) % n])
            out.append(replicas)
        return out

    def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> Result[list[CreateTopicResult]]:
        records: list[Any] = []
        results: list[CreateTopicResult] = []
        seen: set[str] = set()
        for t in topics:
            res = self._create_topic(t, t.name in seen)
            seen.add(t.name)
            results.append(res.response)
            records.extend(res.records)
        return Result([] if validate_only else records, results)

    def _create_topic(self, t: NewTopic, duplicate: bool) -> Result[CreateTopicResult]:
        def fail(code: ErrorCode, msg: str) -> Result[CreateTopicResult]:
            return Result([], CreateTopicResult(t.name, ApiError(code, msg)))

        if duplicate:
            return fail(ErrorCode.invalid_request, f"Duplicate topic name {t.name} in request")
        bad = validate_topic_name(t.name)
        if bad:
            return fail(ErrorCode.invalid_topic_exception, bad)
        if t.name in self.image.topic_ids:
            return fail(ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
        try:
            configs = validate_topic_configs(t.configs)
        except TopicConfigError as e:
            return fail(ErrorCode.invalid_config, str(e))
        if t.assignments:
            for field, given in (("replication factor", t.replication_factor),
                                 ("numPartitions", t.num_partitions)):  # fmt: skip
                if given != -1:
                    return fail(ErrorCode.invalid_request, "A manual partition assignment was "
                                f"specified, but {field} was not set to -1.")  # fmt: skip
            keys = sorted(t.assignments)
            assigned = [list(t.assignments[k]) for k in keys]
            placement: list[list[int]] | ApiError = assigned
            for k, reps in zip(keys, assigned, strict=True):
                why = self._manual_assignment_error(k, reps, len(assigned[0]))
                if why is not None:
                    return fail(ErrorCode.invalid_replica_assignment, why)
            if keys != list(range(len(keys))):
                why = "partitions should be a consecutive 0-based integer sequence"
                return fail(ErrorCode.invalid_replica_assignment, why)
        else:
            n = self.defaults["num.partitions"] if t.num_partitions == -1 else t.num_partitions
            rf = (
                self.defaults["default.replication.factor"]
                if t.replication_factor == -1
                else t.replication_factor
            )
            if n <= 0:
                return fail(
                    ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
                )
            if rf <= 0:
                return fail(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0.",
                )
            placement = self._place(n, rf)
        if isinstance(placement, ApiError):
            return Result([], CreateTopicResult(t.name, placement))
        tid = self._uuid()
        records: list[Any] = [r.TopicRecord(name=t.name, topic_id=tid)]
        for key, value in configs.items():
            records.append(
                r.ConfigRecord(
                    resource_type=TOPIC_RESOURCE, resource_name=t.name, name=key, value=value
                )
            )
        for p, reps in enumerate(placement):
            records.append(self._partition_record(tid, p, reps))
        return Result(
            records,
            CreateTopicResult(
                t.name, ApiError.none(), tid, len(placement), len(placement[0]), configs
            ),
        )

    def _partition_record(self, tid: UUID, p: int, reps: Sequence[int]) -> r.PartitionRecord:
        brokers = self.image.brokers
        live = [
            b
            for b in reps
            if b in brokers and not brokers[b].fenced and not brokers[b].in_controlled_shutdown
        ]
        leader = live[0] if live else -1
        # A new partition is empty everywhere: every active replica is in sync. Fenced ones
        # and those shutting down (a rolling restart) join the ISR once they have caught up.
        isr = tuple(live) if live else tuple(reps)
        return r.PartitionRecord(
            partition_id=p,
            topic_id=tid,
            replicas=tuple(reps),
            isr=isr,
            leader=leader,
            leader_epoch=0,
            partition_epoch=0,
            directories=self.new_directories(reps) or (),
        )

    def delete_topics(
        self, names: Sequence[str], ids: Sequence[UUID]
    ) -> Result[list[tuple[str | None, UUID | None, ApiError]]]:
        records: list[Any] = []
        out: list[tuple[str | None, UUID | None, ApiError]] = []
        done: set[UUID] = set()
        for name in names:
            tid = self.image.topic_ids.get(name)
            if tid is None:
                out.append(
                    (
                        name,
                        None,
                        ApiError(
                            ErrorCode.unknown_topic_or_partition,
                            "This server does not host this topic.",
                        ),
                    )
                )
                continue
            if tid not in done:
                records.append(r.RemoveTopicRecord(topic_id=tid))
                done.add(tid)
            out.append((name, tid, ApiError.none()))
        for tid in ids:
            topic = self.image.topics.get(tid)
            if topic is None:
                out.append((None, tid, ApiError(ErrorCode.unknown_topic_id, "Unknown topic id")))
                continue
            if tid not in done:
                records.append(r.RemoveTopicRecord(topic_id=tid))
                done.add(tid)
            out.append((topic.name, tid, ApiError.none()))
        return Result(records, out)

    def create_partitions(
        self, reqs: Sequence[CreatePartitionsRequest], validate_only: bool
    ) -> Result[list[tuple[str, ApiError]]]:
        records: list[Any] = []
        out: list[tuple[str, ApiError]] = []
        for req in reqs:
            topic = self.image.topic(req.name)
            if topic is None:
                out.append(
                    (
                        req.name,
                        ApiError(
                            ErrorCode.unknown_topic_or_partition,
                            f"The topic '{req.name}' does not exist.",
                        ),
                    )
                )
                continue
            current = len(topic.partitions)
            if req.count <= current:
                out.append(
                    (
                        req.name,
                        ApiError(
                            ErrorCode.invalid_partitions,
                            f"Topic currently has {current} partitions, which is higher than or "
                            f"equal to the requested {req.count}.",
                        ),
                    )
                )
                continue
            rf = len(topic.partitions[0].replicas)
            if req.assignments:
                placement: list[list[int]] | ApiError = [list(a) for a in req.assignments]
            else:
                placement = self._place(req.count - current, rf, current)
            if isinstance(placement, ApiError):
                out.append((req.name, placement))
                continue
            if not validate_only:
                for i, reps in enumerate(placement):
                    records.append(self._partition_record(topic.topic_id, current + i, reps))
            out.append((req.name, ApiError.none()))
        return Result(records, out)
