"""The quorum controller: the single writer of cluster metadata (KIP-631), sans-I/O.

Every operation validates against the controller's latest image (which includes records
appended but not yet committed, so that pipelined operations see each other) and returns
``Result(records, response)`` without changing state. State changes only when the driver
``replay``s the records, in log order.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.cluster_control import BrokerPartitions, ClusterControl
from keeperless.controller.eligible import min_isr_of
from keeperless.controller.fencing import broker_heartbeat
from keeperless.controller.result import PartitionKey, Result
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

PRODUCER_ID_BLOCK = 1000


class QuorumController:
    def __init__(self, node_id: int, rng: random.Random, defaults: Mapping[str, int]) -> None:
        self.node_id = node_id
        self.rng = rng
        self.defaults = defaults  # num.partitions, default.replication.factor
        self.image = MetadataImage()  # the latest state, including uncommitted records
        self.committed = MetadataImage()  # what the log has committed
        # the brokers: registrations, sessions, the partitions each holds
        self.cluster = ClusterControl(node_id)
        # the images replay() built from records appended but not yet committed, in
        # offset order, each with the offset of the image it was built on
        self._appended: collections.deque[tuple[int, MetadataImage]] = collections.deque()

    @property
    def partitions_by_broker(self) -> dict[int, BrokerPartitions]:
        return self.cluster.partitions_by_broker

    @property
    def session_timeout_ms(self) -> int:
        return self.cluster.session_timeout_ms

    @session_timeout_ms.setter
    def session_timeout_ms(self, value: int) -> None:
        self.cluster.session_timeout_ms = value

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
        self._appended.append((old.offset, self.image))
        self.cluster.index(old, self.image, delta, self.committed.offset)
        self.cluster.note_shutdowns(old, self.image)

    def replay_committed(self, records: Sequence[Any], last_offset: int) -> None:
        """Committed records from the log. The active controller already applied its own
        as it appended them: the image it built then, up to this offset, is the committed
        one (replaying them again cost it as much as building it); a standby (or a
        restarted node) catches up here."""
        if last_offset <= self.committed.offset:
            return
        appended = self._appended
        while appended and appended[0][1].offset < last_offset:
            appended.popleft()
        if (
            appended
            and appended[0][1].offset == last_offset
            and appended[0][0] == self.committed.offset  # built on what is committed
        ):
            self.committed = appended.popleft()[1]
            self.cluster.committed_to(self.committed.offset)
            return
        delta = MetadataDelta(self.committed)
        for rec in records:
            delta.replay(rec)
        delta.offset = last_offset
        old_committed = self.committed
        self.committed = delta.apply()
        if last_offset > self.image.offset:
            if self.image is not old_committed:  # ours were not what the log committed
                self.cluster.undo_to(old_committed.offset)
            old = self.image
            self.image = self.committed
            self.cluster.index(old_committed, self.image, delta, self.committed.offset)
            self.cluster.note_shutdowns(old, self.image)
        self.cluster.committed_to(self.committed.offset)

    def load_image(self, image: MetadataImage) -> None:
        """A snapshot's image replaces everything (a controller that fell behind)."""
        self._appended.clear()
        self.committed = self.image = image
        self.cluster.reindex(image)

    def renounce(self) -> None:
        """Leadership lost: forget records that were appended but may never commit."""
        self._appended.clear()  # (the next leader may commit other records there)
        if self.image is not self.committed:
            self.cluster.undo_to(self.committed.offset)
            self.image = self.committed
        self.cluster.last_heartbeat_ms.clear()

    def rollback(self, image: MetadataImage) -> None:
        """Records applied as appended could not be appended after all (those of them
        that committed meanwhile stay)."""
        if image.offset < self.committed.offset:
            image = self.committed
        while self._appended and self._appended[-1][1].offset > image.offset:
            self._appended.pop()
        self.cluster.undo_to(image.offset)
        self.image = image

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
        """See ClusterControl.register_broker."""
        return self.cluster.register_broker(
            self.image, self.directory_assignment, broker_id, incarnation_id, endpoints,
            rack, next_offset, now_ms, features, log_dirs,
        )  # fmt: skip

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
        """See ClusterControl.steady_heartbeat."""
        return self.cluster.steady_heartbeat(
            self.image, broker_id, epoch, want_fence, now_ms, want_shut_down=want_shut_down,
            metadata_offset=metadata_offset, offline_dirs=offline_dirs,
        )  # fmt: skip

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
        """See ClusterControl.unregister_broker."""
        return self.cluster.unregister_broker(self.image, broker_id)

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
