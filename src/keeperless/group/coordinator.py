"""The group coordinator: classic-protocol group APIs and committed offsets persisted in
`__consumer_offsets`, in Kafka's record format, so they survive restarts.

Every write goes through the coordinator runtime (``coordinator/runtime.py``): the
records are appended to the group's partition and replayed into its shard at once, and
the answer waits until the in-sync replicas have them. The shards hold the committed
offsets and the offsets of open transactions (replayed, as on a load); the live groups'
membership is kept here, restored from what the shards read at a load."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.coordinator_log import BrokerPartitionLog
from keeperless.coordinator.classic_group import Group, JoinResult
from keeperless.coordinator.consumer_group import ConsumerGroup, TopicsView
from keeperless.coordinator.consumer_group_records import (
    group_records,
)
from keeperless.coordinator.consumer_group_records import restore as restore_consumer_group
from keeperless.coordinator.deferred import Deferred
from keeperless.coordinator.group_records import (
    GroupSnapshot,
    encode_group_value,
    group_key,
)
from keeperless.coordinator.group_shard import GroupShard, Offsets
from keeperless.coordinator.outcome import Outcome, Record
from keeperless.coordinator.runtime import CoordinatorRuntime, LoopTimer, wait
from keeperless.coordinator.share_group import ShareGroup
from keeperless.group.mixed_groups import MixedGroups
from keeperless.metadata.admin import NewTopic
from keeperless.metadata.group_configs import GROUP_RESOURCE
from keeperless.metadata.image import MetadataImage
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.context import listener_of
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = [
    "OFFSETS_TOPIC",
    "GroupCoordinator",
    "GroupSettings",
    "coordinator_of",
    "find_coordinator_response",
    "partition_for_group",
]

# Kafka's GroupMetadataManager: what an append error means to a committing client
_COMMIT_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.invalid_fetch_size: ErrorCode.invalid_commit_offset_size,
}

log = logging.getLogger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"


def partition_for_group(group_id: str, partitions: int) -> int:
    """Kafka's placement: Utils.abs(groupId.hashCode()) % partitions."""
    h = 0
    for unit in struct.unpack(
        f">{len(group_id.encode('utf-16-be')) // 2}H", group_id.encode("utf-16-be")
    ):
        h = (31 * h + unit) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partitions


def coordinator_of(
    image: MetadataImage, topic: str, key: str, ready: bool, listener: str | None
) -> dict[str, Any]:
    """FindCoordinator's entry for ``key``: the live leader of its partition of
    ``topic`` (Kafka's rule, for groups and transactional ids alike)."""
    t = image.topic(topic)
    if ready and t is not None and key:
        leader = t.partitions[partition_for_group(key, len(t.partitions))].leader
        reg = image.brokers.get(leader)
        found = reg.endpoint(listener) if reg is not None and not reg.fenced else None
        if found is not None:
            host, port = found
            return {"key": key, "node_id": leader, "host": host, "port": port,
                    "error_code": ErrorCode.none, "error_message": None}  # fmt: skip
    return {"key": key, "node_id": -1, "host": "", "port": -1,
            "error_code": ErrorCode.coordinator_not_available,
            "error_message": "The coordinator is not available."}  # fmt: skip


def find_coordinator_response(
    header: RequestHeader, req: Any, image: MetadataImage, topic: str, ready: bool
) -> Any:
    """FindCoordinator for every key of the request (one key before v4)."""
    keys = list(req.coordinator_keys) if header.api_version >= 4 else [req.key]
    listener = listener_of(header)
    coords = [coordinator_of(image, topic, k, ready, listener) for k in keys]
    body: dict[str, Any] = {"throttle_time": 0, "coordinators": coords}
    if header.api_version < 4:
        body.update({k: v for k, v in coords[0].items() if k != "key"})
    return build(response_class(ApiKey.FIND_COORDINATOR, header.api_version), body)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker's group.* and offsets.* keys (Kafka's names and defaults)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    offsets_commit_timeout_ms: int = 5000
    # KIP-848's group.consumer.* keys
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")

    @classmethod
    def of(cls, config: Any) -> GroupSettings:
        """From a node's config (Kafka's keys)."""
        return cls(
            config["group.initial.rebalance.delay.ms"],
            config["group.min.session.timeout.ms"],
            config["group.max.session.timeout.ms"],
            config["offsets.commit.timeout.ms"],
            config["group.consumer.heartbeat.interval.ms"],
            config["group.consumer.session.timeout.ms"],
            tuple(config["group.consumer.assignors"]),
        )


class _Offsets(Mapping[str, Offsets]):
    """The committed offsets of every group whose shard is loaded here, as written (read
    only: they change as the shards replay their records)."""

    def __init__(self, runtime: CoordinatorRuntime[GroupShard]) -> None:
        self.runtime = runtime

    def __getitem__(self, group_id: str) -> Offsets:
        for shard in self.runtime.shards().values():
            found = shard.offsets.get(group_id)
            if found is not None:
                return found
        raise KeyError(group_id)

    def __iter__(self) -> Iterator[str]:
        for shard in self.runtime.shards().values():
            yield from shard.offsets

    def __len__(self) -> int:
        return sum(len(shard.offsets) for shard in self.runtime.shards().values())


def _pending(shard: GroupShard, group_id: str) -> set[tuple[str, int]]:
    """Partitions of ``group_id`` with offsets in an open transaction."""
    return {k for pending in shard.pending_txn.values() for k in pending.get(group_id, {})}


class ShareCoordinatorLike(Protocol):
    topic: str

    def ensure_topic(self) -> ErrorCode: ...


class GroupCoordinator:
    def __init__(self, broker: Broker, settings: GroupSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.initial_delay_ms = settings.initial_rebalance_delay_ms
        self.groups: dict[str, Group] = {}
        self.timer = LoopTimer()  # the classic groups' rebalance deadlines
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.share_groups: dict[str, ShareGroup] = {}  # KIP-932, members in memory only
        # the topics of each share group as last stored (ShareGroupStatePartitionMetadata)
        self.share_stored: dict[str, frozenset[str]] = {}
        # the share coordinator (FindCoordinator key type 2 is its)
        self.share_coordinator: ShareCoordinatorLike | None = None
        # classic and consumer-protocol members of one group (KIP-848 migration)
        self.mixed = MixedGroups(self, self.topics_view)
        # the shards of the __consumer_offsets partitions led here: loaded and dropped as
        # their leadership moves, written through
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            "group coordinator", OFFSETS_TOPIC, BrokerPartitionLog(broker), GroupShard,
            settings.offsets_commit_timeout_ms / 1000, broker.node_id,
            on_load=self._on_load, on_unload=self._on_unload,
        )  # fmt: skip
        self.offsets: Mapping[str, Offsets] = _Offsets(self.runtime)
        self._moved = [0, 0, 0, 0]
        self._tasks: set[asyncio.Task[None]] = set()  # background stores
        # a consumer-protocol group's records as last stored: key -> value
        self._cg_stored: dict[str, dict[bytes, bytes]] = {}
        # its (group epoch, assignment epoch, members) when last stored
        self._cg_shape: dict[str, tuple[int, int, int] | None] = {}
        broker.on_image.append(self._on_image)

    # -- loading --------------------------------------------------------------------------

    def _on_image(self, image: MetadataImage) -> None:
        """Load the groups of the partitions this broker now leads; forget those of the
        partitions it no longer leads (another coordinator owns them now, and what it
        commits meanwhile is read again if the leadership comes back)."""
        self._moved = [0, 0, 0, 0]  # groups unloaded, partitions; offsets loaded, partitions
        self.runtime.on_leadership()
        groups, unloaded, offsets, loaded = self._moved
        if unloaded:  # one line for all (a controlled shutdown moves them together)
            log.info("[node %d] Unloaded %d group(s) of %d %s partition(s) no longer led here",
                     self.broker.node_id, groups, unloaded, OFFSETS_TOPIC)  # fmt: skip
        if offsets:
            log.info("[node %d] Loaded %d committed offsets from %d %s partition(s) now led "
                     "here", self.broker.node_id, offsets, loaded, OFFSETS_TOPIC)  # fmt: skip

    def _on_unload(self, idx: int) -> None:
        t = self.broker.image.topic(OFFSETS_TOPIC)
        self._moved[0] += self._unload(idx, len(t.partitions) if t is not None else 0)
        self._moved[1] += 1

    def _unload(self, idx: int, partitions: int) -> int:
        """Forget the groups of one partition; returns how many."""
        gone = [
            gid
            for gid in {*self.groups, *self.consumer_groups, *self.share_groups}
            if partitions == 0 or partition_for_group(gid, partitions) == idx
        ]
        for gid in gone:
            g = self.groups.pop(gid, None)
            if g is not None:
                g.abandon()
            self.consumer_groups.pop(gid, None)  # its members hear NOT_COORDINATOR
            self.share_groups.pop(gid, None)
            self.share_stored.pop(gid, None)
            self._cg_stored.pop(gid, None)
            self._cg_shape.pop(gid, None)
        return len(gone)

    def _on_load(self, idx: int, shard: GroupShard) -> None:
        """Restore the groups the runtime read of one partition as they were stored (its
        offsets stay in the shard). Groups live here already (the shard read again after
        a write not confirmed) stay as they are."""
        restored, cg_restored, share_restored = shard.classic, shard.consumer, shard.share
        self._moved[2] += shard.offsets_read
        self._moved[3] += 1
        shard.hand_over()
        now = time.monotonic()
        node = self.broker.node_id
        back = 0
        for gid, snap in restored.items():
            if snap is not None and gid not in self.groups:
                self.groups[gid] = self.new_group(gid, snap, now)
                back += bool(snap.members)
        view = self.topics_view()
        for gid, records in cg_restored.items():
            cg = None
            if records and gid not in self.groups and gid not in self.consumer_groups:
                assignor = self.settings.consumer_assignors[0]
                cg = restore_consumer_group(gid, records, node, assignor, view, now)
            if cg is not None:
                self.consumer_groups[gid] = cg
                self._cg_stored[gid] = dict(records)
                self._cg_shape[gid] = (cg.group_epoch, cg.assignment_epoch, len(cg.members))
                back += bool(cg.members)
        for gid, stored in share_restored.items():
            if stored is not None and gid not in self.share_groups:
                self.share_groups[gid] = ShareGroup(
                    gid, epoch=stored.epoch, topics_read=set(stored.initialized)
                )
                self.share_stored[gid] = frozenset(stored.initialized)
                back += 1
        if back:
            log.info(
                "[node %d] Restored %d group(s) with their members from %s-%d",
                self.broker.node_id,
                back,
                OFFSETS_TOPIC,
                idx,
            )

    def shard_of(self, group_id: str) -> tuple[int, GroupShard | None]:
        """The partition of ``group_id`` and its shard (None: not loaded here)."""
        t = self.broker.image.topic(OFFSETS_TOPIC)
        if t is None:
            return -1, None
        idx = partition_for_group(group_id, len(t.partitions))
        return idx, self.runtime.shard(idx)

    def end_pending(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of ``producer_id`` appended to this __consumer_offsets partition (in
        log order): the shard replays it. (A shard not loaded reads it from the log.)"""
        shard = self.runtime.shard(partition)
        if shard is not None:
            shard.replay_marker(producer_id, commit)

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """Partitions of ``group`` with offsets in an open transaction."""
        _idx, shard = self.shard_of(group)
        return set() if shard is None else _pending(shard, group)

    async def committed_offsets(
        self, group_id: str
    ) -> ErrorCode | tuple[Offsets, set[tuple[str, int]]]:
        """The group's offsets and its partitions with offsets in open transactions, once
        every write before this call is committed (an OffsetFetch never answers an offset
        the next coordinator may not have)."""
        idx, _shard = self.shard_of(group_id)
        if idx < 0:
            return ErrorCode.coordinator_not_available
        return await self.runtime.read_committed(
            idx, lambda s: (dict(s.offsets.get(group_id, {})), _pending(s, group_id))
        )

    async def store(
        self, group_id: str, records: list[Record], producer: tuple[int, int] | None = None
    ) -> ErrorCode | None:
        """Write records of the group to its __consumer_offsets partition through the
        runtime (in the transaction of ``producer``, its id and epoch, if given): they
        are replayed into the shard as they are appended, and this returns once every
        in-sync replica has them (Kafka writes them with acks=all): an answer before that
        could be lost with this broker. None when stored, else the error for the client,
        mapped as Kafka's coordinator maps append errors."""
        idx, _shard = self.shard_of(group_id)
        if idx < 0:
            return ErrorCode.coordinator_not_available
        got = await self.runtime.write(idx, lambda _s: Outcome(records, None, producer))
        return _COMMIT_ERRORS.get(got, got) if isinstance(got, ErrorCode) else None

    # -- coordinator lookup -------------------------------------------------------------

    def ensure_offsets_topic(self) -> ErrorCode:
        """The coordinators live on __consumer_offsets: until it exists, its creation goes
        to the controller in the background and the client is told to ask again."""
        if self.broker.image.topic(OFFSETS_TOPIC) is not None:
            return ErrorCode.none
        s = self.broker.settings
        self.broker.auto_create.create(
            [
                NewTopic(
                    OFFSETS_TOPIC,
                    s.offsets_topic_partitions,
                    s.offsets_topic_replication_factor,
                    configs={"cleanup.policy": "compact", "segment.bytes": "104857600"},
                )
            ]
        )
        return ErrorCode.coordinator_not_available

    async def find_coordinator(self, header: RequestHeader, req: Any) -> Any:
        key_type = getattr(req, "key_type", 0)
        if key_type == 2 and self.share_coordinator is not None:  # a share-partition's
            err = self.share_coordinator.ensure_topic()
            topic = self.share_coordinator.topic
        else:
            topic = OFFSETS_TOPIC
            err = (
                self.ensure_offsets_topic()
                if key_type == 0
                else ErrorCode.coordinator_not_available
            )
        return find_coordinator_response(
            header, req, self.broker.image, topic, err == ErrorCode.none
        )

    def _group_error(self, group_id: str) -> ErrorCode | None:
        if not group_id:
            return ErrorCode.invalid_group_id
        t = self.broker.image.topic(OFFSETS_TOPIC)
        if t is None:
            return ErrorCode.coordinator_not_available
        idx = partition_for_group(group_id, len(t.partitions))
        if t.partitions[idx].leader != self.broker.node_id:
            return ErrorCode.not_coordinator
        return None

    def topics_view(self) -> TopicsView:
        return {t.name: (t.topic_id, len(t.partitions)) for t in self.broker.image.topics.values()}

    def _group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = self.new_group(group_id)
        return g

    def new_group(
        self, group_id: str, snap: GroupSnapshot | None = None, now: float = 0.0
    ) -> Group:
        """A classic group whose generations are stored (from ``snap``, a stored one)."""
        node = self.broker.node_id
        g = (
            Group(group_id, self.initial_delay_ms, self.timer, node)
            if snap is None
            else Group.restore(group_id, snap, self.initial_delay_ms, self.timer, node, now)
        )
        g.persist = True
        g.on_empty = lambda e: self.store_later(e.group_id, e.snapshot(int(time.time() * 1000)))
        return g

    async def store_group(self, group_id: str, snap: GroupSnapshot | None) -> ErrorCode | None:
        """Store a group's membership (None: a tombstone); None when stored, else the
        error, as for an offset commit."""
        value = None if snap is None else encode_group_value(snap)
        return await self.store(group_id, [(group_key(group_id), value)])

    async def store_consumer_group(
        self, group_id: str, member: str | None = None
    ) -> ErrorCode | None:
        """Store what changed in a consumer-protocol group since it was last stored (the
        records it is now; tombstones for those it no longer has); None when stored.
        ``member``: the one that heartbeated - while the group's epochs and size stay,
        only its records can have changed, and only they are looked at."""
        cg = self.consumer_groups.get(group_id)
        shape = (cg.group_epoch, cg.assignment_epoch, len(cg.members)) if cg else None
        old = self._cg_stored.get(group_id, {})
        partial = cg is not None and member in cg.members and self._cg_shape.get(group_id) == shape
        self._cg_shape[group_id] = shape
        want = {} if cg is None else group_records(cg, member if partial else None)
        changes: list[Record] = [(k, v) for k, v in want.items() if old.get(k) != v]
        if not partial:
            changes += [(k, None) for k in old if k not in want]
        if not changes:
            return None
        # (in log order: the append is made now)
        self._cg_stored[group_id] = {**old, **want} if partial else want
        err = await self.store(group_id, changes)
        if err is not None:
            self._cg_stored.pop(group_id, None)  # the next store writes all again
            self._cg_shape.pop(group_id, None)
        return err

    def consumer_group_tombstones(self, group_id: str) -> list[Record]:
        """Tombstones for a deleted consumer-protocol group's stored records."""
        self._cg_shape.pop(group_id, None)
        return [(k, None) for k in self._cg_stored.pop(group_id, {})]

    def store_consumer_group_later(self, group_id: str) -> None:
        if group_id in self.consumer_groups or group_id in self._cg_stored:
            self._background(self.store_consumer_group(group_id), group_id)

    def _background(self, store: Coroutine[Any, Any, ErrorCode | None], group_id: str) -> None:
        async def run() -> None:
            err = await store
            if err is not None:
                log.info(
                    "[node %d] Group %s: its state was not stored (%s)",
                    self.broker.node_id,
                    group_id,
                    err.name,
                )

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def store_later(self, group_id: str, snap: GroupSnapshot | None) -> None:
        """Store in the background (a group emptied by a timer, or converted): a failure
        only means a failover finds the group as it was stored before."""
        self._background(self.store_group(group_id, snap), group_id)

    # -- membership ---------------------------------------------------------------------

    async def join_group(self, header: RequestHeader, req: Any) -> Any:
        err = self._group_error(req.group_id)
        session_ms = int(req.session_timeout.total_seconds() * 1000)
        bounds = self.settings.min_session_timeout_ms, self.settings.max_session_timeout_ms
        if err is None and not bounds[0] <= session_ms <= bounds[1]:
            err = ErrorCode.invalid_session_timeout  # group.{min,max}.session.timeout.ms
        if err is None and req.group_id in self.share_groups:
            err = ErrorCode.inconsistent_group_protocol  # a share group's id (KIP-932)
        cg = self.consumer_groups.get(req.group_id)
        if err is not None:
            res: JoinResult = JoinResult(err, member_id=req.member_id)
        elif cg is not None and cg.members:
            # a classic member of a consumer group (KIP-848 migration)
            res = self.mixed.join(
                cg, req, header.client_id or "", header.api_version, time.monotonic()
            )
        else:
            out = self._group(req.group_id).join(
                req, header.client_id or "", "/127.0.0.1", header.api_version, time.monotonic()
            )
            res = await wait(out) if isinstance(out, Deferred) else out
        return build(
            response_class(ApiKey.JOIN_GROUP, header.api_version),
            {
                "throttle_time": 0,
                "error_code": res.error,
                "generation_id": res.generation,
                "protocol_type": res.protocol_type,
                "protocol_name": res.protocol or "",
                "leader": res.leader,
                "member_id": res.member_id,
                "members": [
                    {"member_id": m, "group_instance_id": gi, "metadata": md}
                    for m, gi, md in res.members
                ],
                "skip_assignment": res.skip_assignment,
            },
        )

    async def sync_group(self, header: RequestHeader, req: Any) -> Any:
        err = self._group_error(req.group_id)
        g = self.groups.get(req.group_id)
        mixed = self.mixed.hosts_classic(req.group_id, req.member_id)
        if err is None and g is None and mixed is None:
            err = ErrorCode.unknown_member_id
        assignment = b""
        if err is None and mixed is not None:
            err, assignment = self.mixed.sync(
                mixed, req.member_id, req.generation_id, time.monotonic()
            )
            return build(
                response_class(ApiKey.SYNC_GROUP, header.api_version),
                {
                    "throttle_time": 0,
                    "error_code": err,
                    "assignment": assignment,
                    "protocol_type": "consumer",
                    "protocol_name": getattr(req, "protocol_name", None),
                },
            )
        if err is None and g is not None:
            assigns = {a.member_id: bytes(a.assignment) for a in req.assignments}
            instance = getattr(req, "group_instance_id", None)
            due = g.store_due
            out = g.sync(req.member_id, req.generation_id, assigns, time.monotonic(), instance)
            if g.store_due is not None and g.store_due != due:
                # the leader's assignment: stored before anyone gets it (Kafka's
                # storeGroup), so that a new coordinator finds this generation
                generation = g.store_due
                stored = await self.store_group(g.group_id, g.snapshot(int(time.time() * 1000)))
                g.synced(generation, stored or ErrorCode.none, time.monotonic())
            answer = await wait(out) if isinstance(out, Deferred) else out
            err, assignment = answer
        return build(
            response_class(ApiKey.SYNC_GROUP, header.api_version),
            {
                "throttle_time": 0,
                "error_code": err,
                "assignment": assignment,
                "protocol_type": g.protocol_type if g else None,
                "protocol_name": g.protocol if g else None,
            },
        )

    async def heartbeat(self, header: RequestHeader, req: Any) -> Any:
        err = self._group_error(req.group_id)
        g = self.groups.get(req.group_id)
        mixed = self.mixed.hosts_classic(req.group_id, req.member_id)
        if err is None and mixed is not None:
            err = self.mixed.heartbeat(mixed, req.member_id, req.generation_id, time.monotonic())
        elif err is None:
            err = (
                ErrorCode.unknown_member_id
                if g is None
                else g.heartbeat(
                    req.member_id,
                    req.generation_id,
                    time.monotonic(),
                    getattr(req, "group_instance_id", None),
                )
            )
        return build(
            response_class(ApiKey.HEARTBEAT, header.api_version),
            {"throttle_time": 0, "error_code": err},
        )

    async def leave_group(self, header: RequestHeader, req: Any) -> Any:
        who = (
            [(m.member_id, getattr(m, "group_instance_id", None)) for m in req.members]
            if header.api_version >= 3
            else [(req.member_id, None)]
        )
        err = self._group_error(req.group_id)
        g = self.groups.get(req.group_id)
        results = []
        for mid, instance in who:
            mixed = self.mixed.hosts_classic(req.group_id, mid)
            if err is None and mixed is None and instance is not None and not mid:
                cg = self.consumer_groups.get(req.group_id)  # a static member by instance
                found = cg.static.get(instance) if cg is not None else None
                if found is not None:
                    mid, mixed = found, self.mixed.hosts_classic(req.group_id, found)
            e = (
                err
                if err is not None
                else (
                    self.mixed.leave(mixed, mid, time.monotonic())
                    if mixed is not None
                    else ErrorCode.unknown_member_id
                    if g is None
                    else g.leave(mid, time.monotonic(), instance)
                )
            )
            results.append({"member_id": mid, "group_instance_id": instance, "error_code": e})
        top = (
            err
            if err is not None
            else (results[0]["error_code"] if len(who) == 1 else ErrorCode.none)
        )
        return build(
            response_class(ApiKey.LEAVE_GROUP, header.api_version),
            {"throttle_time": 0, "error_code": top, "members": results},
        )

    def _group_configs(self, group_id: str) -> Mapping[str, str]:
        return self.broker.image.configs.get((GROUP_RESOURCE, group_id), {})

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else the broker's."""
        own = self._group_configs(group_id).get("consumer.heartbeat.interval.ms")
        return int(own) if own is not None else self.settings.consumer_heartbeat_interval_ms

    def consumer_session_timeout_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else the broker's."""
        own = self._group_configs(group_id).get("consumer.session.timeout.ms")
        return int(own) if own is not None else self.settings.consumer_session_timeout_ms

    def expire_sessions(self) -> None:
        now = time.monotonic()
        for g in self.groups.values():
            g.expire_sessions(now)
        for gid, cg in list(self.consumer_groups.items()):
            before = len(cg.members)
            cg.expire(now, self.consumer_session_timeout_ms(gid))
            if len(cg.members) < before:
                self.mixed.maybe_downgrade(gid, now)
                self.store_consumer_group_later(gid)
