"""The controller's view of the brokers (Kafka's ClusterControlManager with its
BrokerHeartbeatManager and the broker-to-partitions index of ReplicationControlManager):
registrations, heartbeat sessions, the offsets brokers have caught up to, when each
entered controlled shutdown, and which partitions each broker holds. Registration
returns records and a response like every controller operation; the heartbeat times are
kept in memory only, as Kafka's. The fencing rules that use this are in fencing.py.

Pure rules: no asyncio, no clock (the caller passes ``now_ms``), no I/O.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.result import PartitionKey, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError
from keeperless.metadata.features import SUPPORTED_FEATURES
from keeperless.metadata.image import MetadataDelta, MetadataImage

__all__ = ["BrokerPartitions", "ClusterControl"]

log = logging.getLogger(__name__)


class BrokerPartitions:
    """The partitions one broker holds, as a set of (topic id, partition) grouped by
    topic: a fence walks them topic by topic as it writes its changes, where grouping
    a million keys first held the event loop for over a second (the leader lost its
    quorum at 1M partitions before its first change was appended)."""

    __slots__ = ("_n", "by_topic")

    def __init__(self) -> None:
        self.by_topic: dict[UUID, set[int]] = {}
        self._n = 0

    def add(self, key: PartitionKey) -> None:
        tid, p = key
        parts = self.by_topic.get(tid)
        if parts is None:
            parts = self.by_topic[tid] = set()
        if p not in parts:
            parts.add(p)
            self._n += 1

    def discard(self, key: PartitionKey) -> None:
        tid, p = key
        parts = self.by_topic.get(tid)
        if parts is not None and p in parts:
            parts.discard(p)
            self._n -= 1
            if not parts:
                del self.by_topic[tid]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        parts = self.by_topic.get(key[0])
        return parts is not None and key[1] in parts

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[PartitionKey]:
        for tid, parts in self.by_topic.items():
            for p in parts:
                yield tid, p


class ClusterControl:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.session_timeout_ms = 9000
        self.last_heartbeat_ms: dict[int, int] = {}  # in memory only, like Kafka's
        self.broker_offsets: dict[int, int] = {}  # metadata offset in the last heartbeat
        # where each broker's InControlledShutdown change is in the log
        self.shutdown_offsets: dict[int, int] = {}
        self.partitions_by_broker: dict[int, BrokerPartitions] = {}
        # index changes made by records not yet committed, newest last, so that losing
        # the leadership (or a failed append) undoes them instead of re-deriving the index
        # from every partition: (image offset, [(broker, partition, added)])
        self._journal: deque[tuple[int, list[tuple[int, PartitionKey, bool]]]] = deque()

    def committed_to(self, offset: int) -> None:
        """Records up to ``offset`` committed: their index changes stay for good."""
        while self._journal and self._journal[0][0] <= offset:
            self._journal.popleft()

    # -- from the records replayed --------------------------------------------------------

    def note_shutdowns(self, old: MetadataImage, new: MetadataImage) -> None:
        """Remember the offset at which a broker entered controlled shutdown (its change
        comes last in its operation, so this is the operation's end)."""
        if old.brokers is new.brokers:
            return
        for b in new.brokers.values():
            if not b.in_controlled_shutdown:
                self.shutdown_offsets.pop(b.broker_id, None)
            elif b.broker_id not in self.shutdown_offsets:
                prev = old.brokers.get(b.broker_id)
                if prev is None or not prev.in_controlled_shutdown:
                    self.shutdown_offsets[b.broker_id] = new.offset

    # -- which partitions each broker holds, so that fencing a broker costs its partitions

    def index(
        self, old: MetadataImage, new: MetadataImage, delta: MetadataDelta, committed: int
    ) -> None:
        """Follow the replica changes of ``delta`` (from ``old`` to ``new``); changes
        past the ``committed`` offset are journaled, to be undone if they never commit."""
        idx = self.partitions_by_broker
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
            if before is not None and after is not None and before.replicas == after.replicas:
                continue  # (a leader or ISR change: the index holds these replicas already)
            if before is not None and (after is None or before.replicas != after.replicas):
                for b in before.replicas:
                    drop(b, (tid, p))
            if after is not None:
                for b in after.replicas:
                    keys = idx.get(b)
                    if keys is None:
                        keys = idx[b] = BrokerPartitions()
                    if (tid, p) not in keys:
                        keys.add((tid, p))
                        changes.append((b, (tid, p), True))
        for tid, t in delta.deleted_topics.items():
            for p, info in t.partitions.items():
                for b in info.replicas:
                    drop(b, (tid, p))
        if changes and new.offset > committed:
            self._journal.append((new.offset, changes))

    def undo_to(self, offset: int) -> None:
        """Undo the index changes of records after ``offset``."""
        idx = self.partitions_by_broker
        while self._journal and self._journal[-1][0] > offset:
            for b, key, added in reversed(self._journal.pop()[1]):
                if added:
                    idx[b].discard(key)
                else:
                    keys = idx.get(b)
                    if keys is None:
                        keys = idx[b] = BrokerPartitions()
                    keys.add(key)

    def reindex(self, image: MetadataImage) -> None:
        """Index every partition of ``image`` anew (a snapshot was loaded)."""
        self._journal.clear()
        idx: dict[int, BrokerPartitions] = {}
        for t in image.topics.values():
            for p, info in t.partitions.items():
                for b in info.replicas:
                    keys = idx.get(b)
                    if keys is None:
                        keys = idx[b] = BrokerPartitions()
                    keys.add((t.topic_id, p))
        self.partitions_by_broker = idx

    # -- registration and heartbeats --------------------------------------------------

    def register_broker(
        self,
        image: MetadataImage,
        directories: bool,
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
        for name, level in sorted(image.features.items()):
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
        existing = image.brokers.get(broker_id)
        last = self.last_heartbeat_ms.get(broker_id)
        live = last is not None and now_ms - last < self.session_timeout_ms
        if existing and existing.incarnation_id == incarnation_id:
            # the same process again: a copy of its request that arrived late (a TCP
            # retransmission after a partition healed, or the broker's retry after a
            # timeout). Registering it again gave it a new epoch the process never
            # heard of, and its heartbeats with the old one kept it fenced for good
            # (fault harness, seed 12001): answer with the epoch it has.
            self.last_heartbeat_ms[broker_id] = now_ms
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
        self.last_heartbeat_ms[broker_id] = now_ms
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
            log_dirs=tuple(sorted(log_dirs)) if directories else (),
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
        image: MetadataImage,
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
        b = image.brokers.get(broker_id)
        if b is None or b.epoch != epoch or not b.active or want_fence or want_shut_down:
            return None
        if any(d in b.log_dirs for d in offline_dirs):
            return None  # a directory newly offline: its replicas' leaderships move
        self.last_heartbeat_ms[broker_id] = now_ms
        self.broker_offsets[broker_id] = metadata_offset
        return ApiError.none(), False, False

    def unregister_broker(self, image: MetadataImage, broker_id: int) -> Result[ApiError]:
        """Remove a broker's registration for good (it must be stopped: fenced)."""
        b = image.brokers.get(broker_id)
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
        self.last_heartbeat_ms.pop(broker_id, None)
        log.info("[node %d] Unregistering broker %d", self.node_id, broker_id)
        return Result(
            [r.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=b.epoch)], ApiError.none()
        )
