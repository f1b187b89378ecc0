"""The broker role: a metadata image built only from committed records, and the
partitions that image assigns to this node."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.broker.auto_create import AutoTopicCreator
from keeperless.broker.controller_channel import ControllerUnavailableError
from keeperless.broker.controller_rpcs import ControllerRpcs
from keeperless.broker.log_dir_moves import LogDirMoves
from keeperless.broker.own_configs import OwnConfigCheck
from keeperless.broker.partition_manager import PartitionManager
from keeperless.broker.partition_opener import Key, PartitionOpener
from keeperless.broker.replication_quotas import ReplicationQuotas
from keeperless.metadata.admin import INTERNAL_TOPICS
from keeperless.metadata.config_catalog import Resolved
from keeperless.metadata.config_resolution import resolve_broker, resolve_topic
from keeperless.metadata.features import (
    METADATA_VERSION_FEATURE,
    directory_assignment,
    elr_enabled,
)
from keeperless.metadata.image import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    MetadataDelta,
    MetadataImage,
    PartitionInfo,
)
from keeperless.metadata.topic_configs import TOPIC_CONFIG_DEFAULTS
from keeperless.net.client import NetworkClient
from keeperless.security.authorizer import Authorizer
from keeperless.security.authz import Authz
from keeperless.storage.log import LogConfig

__all__ = ["Broker", "BrokerSettings"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# how often a broker tells the controller where new replicas were placed (KIP-858)
DIR_ASSIGNMENT_INTERVAL_S = 0.5


def _by_topic_id_and_partition(key: tuple[UUID, int]) -> tuple[int, int]:
    """UUIDs' own order (by their int), compared in C: sorting a million changed
    partitions by UUID called UUID.__lt__, in Python, n log n times (8 % of a broker's
    CPU in a controlled shutdown at 1M partitions)."""
    return key[0].int, key[1]


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    node_id: int
    cluster_id: str
    log_dir: Path  # the first of log.dirs
    endpoints: tuple[tuple[str, str, int], ...]
    rack: str | None
    log_defaults: LogConfig
    auto_create_topics: bool
    max_message_bytes: int
    offsets_topic_partitions: int
    offsets_topic_replication_factor: int
    static_configs: Mapping[str, str]
    # replica.selector.class set (KIP-392): consumers are sent to a replica in their rack
    rack_aware_reads: bool = False
    # authorizer.class.name set (the StandardAuthorizer), super.users,
    # allow.everyone.if.no.acl.found
    authorizer: bool = False
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False
    # every log.dirs entry (KIP-858); empty: ``log_dir`` alone
    log_dirs: tuple[Path, ...] = ()


def _now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(self, settings: BrokerSettings, controller: ControllerRpcs) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        # how this broker reaches its peers (inter.broker.listener.name; the node sets
        # that listener's TLS and SASL on it): replica fetches, transaction markers
        self.peers = NetworkClient(f"broker-{settings.node_id}")
        # clients' admin requests to the active controller (set by the node)
        self.forwarder: Any = None
        # the metadata quorum's kraft.version (KIP-853), as the Raft log holds it
        self.kraft_version: Callable[[], int] = lambda: 0
        self.inter_broker_listener: str | None = None
        self.controller = controller
        self.auto_create = AutoTopicCreator(settings.node_id, controller)
        self.authz = Authz(
            lambda: self.image,
            Authorizer(settings.super_users, settings.allow_if_no_acl)
            if settings.authorizer
            else None,
        )
        self.image = MetadataImage()
        self.partitions = PartitionManager(
            settings.node_id, settings.log_dirs or settings.log_dir, settings.log_defaults
        )
        self.broker_epoch = -1
        self.fenced = True
        # the heartbeats' pulse (time.monotonic), to tell a broker paused past its
        # session (SIGSTOP, a stalled host): until a heartbeat sent after the pause is
        # answered unfenced, it may have lost leaderships it does not know of yet
        self.session_s = 9.0  # broker.session.timeout.ms
        self.beat_at = 0.0  # the last heartbeat sent (0: none yet)
        self.paused_at: float | None = None
        self.on_image: list[Callable[[MetadataImage], None]] = []
        # the node's TLS listeners follow this broker's own dynamic configs: called with
        # them when they change, and asked about a change before it is forwarded
        self.on_own_configs: Callable[[Mapping[str, str]], None] | None = None
        self.check_own_configs: OwnConfigCheck | None = None
        self._produce_settings: dict[str, tuple[int, bool, int, bool]] = {}
        self.replication_quotas = ReplicationQuotas(settings.node_id)
        # replicas moving between this broker's log directories (AlterReplicaLogDirs)
        self.log_dir_moves = LogDirMoves(self.partitions, self.replication_quotas.alter_log_dirs)
        self._producer_ids: list[int] = []
        self.metrics: Any = None  # runtime.metrics.Metrics when enabled
        self._image_waiters: list[tuple[Callable[[MetadataImage], bool], asyncio.Future[None]]] = []
        # local partitions whose assignment changed in the last published delta
        self.changed_partitions: list[tuple[str, int]] = []
        # Partitions are published only once the image has caught up to this offset (the
        # broker's own registration): replaying the log record by record from the start
        # would create and delete directories of topics long gone, under names a
        # re-created topic now uses. Kafka's first publish is the whole caught-up image.
        self.publish_from: int | None = None
        self.partitions_live = False
        # new partitions past a publication's budget, opened a slice at a time
        self.opener = PartitionOpener(self._open_queued, self._opened)

    # -- metadata publisher -------------------------------------------------------------

    def on_committed(self, records: Sequence[Any], last_offset: int) -> None:
        delta = MetadataDelta(self.image)
        for rec in records:
            delta.replay(rec)
        delta.offset = last_offset
        self._publish(delta)

    def load_snapshot(self, delta: MetadataDelta, new: MetadataImage) -> None:
        """Replace the image by a snapshot's (``delta`` from an empty image, already
        applied as ``new``): a broker that starts or fell behind the log start."""
        old = self.image
        delta.deleted_topics = {
            tid: t for tid, t in old.topics.items() if new.topics.get(tid) is None
        }
        self._publish(delta, new)

    def catch_up_to(self, offset: int) -> None:
        """Start publishing partitions once the image reaches ``offset``."""
        self.publish_from = offset
        if not self.partitions_live and self.image.offset >= offset:
            self._go_live(self.image)
            self._notify(self.image)

    def _go_live(self, image: MetadataImage) -> None:
        """The first publication of partitions: the whole caught-up image at once."""
        self.partitions_live = True
        now = _now_ms()
        mine: dict[tuple[str, int], tuple[UUID, PartitionInfo]] = {}
        for tid, topic in image.topics.items():
            for p, info in topic.partitions.items():
                if self.node_id in info.replicas:
                    mine[(topic.name, p)] = (tid, info)
        self.partitions.remove_strays({k: tid for k, (tid, _) in mine.items()})
        configs: dict[str, LogConfig] = {}
        for (name, p), (tid, info) in sorted(mine.items()):
            cfg = configs.get(name)
            if cfg is None:
                cfg = configs[name] = self.log_config(name)
            self.partitions.ensure(name, p, tid, info, cfg, now)
        self.log_dir_moves.resume()
        self._hw_rule(mine, elr_enabled(image.features))
        self.changed_partitions = sorted(mine)
        log.info(
            "[node %d] Caught up with the metadata at offset %d: hosting %d partition(s)",
            self.node_id,
            image.offset,
            len(mine),
        )

    def _publish(self, delta: MetadataDelta, new: MetadataImage | None = None) -> None:
        if new is None:
            new = delta.apply()
        elr_was = elr_enabled(self.image.features)
        self.image = new
        self._produce_settings.clear()
        self.replication_quotas.update(new, self.config_layers())
        me = (BROKER_RESOURCE, str(self.node_id))
        if self.on_own_configs is not None and me in delta.changed_configs:
            self.on_own_configs(new.configs.get(me, {}))
        if not self.partitions_live:
            self.changed_partitions = []
            if self.publish_from is not None and new.offset >= self.publish_from:
                self._go_live(new)
            self._notify(new)
            return
        now = _now_ms()
        for tid, topic in delta.deleted_topics.items():
            for p in topic.partitions:
                self.partitions.remove(topic.name, p, tid, "its topic was deleted")
        changed: list[tuple[str, int]] = []
        configs: dict[str, LogConfig] = {}
        self.opener.begin()
        for tid, p in sorted(delta.changed_partitions, key=_by_topic_id_and_partition):
            found = new.topics.get(tid)
            info = found.partitions.get(p) if found is not None else None
            if found is None or info is None:
                continue
            name = found.name
            if self.node_id in info.replicas:
                # (internal topics' partitions open at once: their coordinators serve
                # them as soon as the image says they lead them)
                local = self.partitions.get(name, p)
                internal = name in INTERNAL_TOPICS
                if local is None and not internal and not self.opener.admit((name, p), tid):
                    continue  # (opened in a slice of its own)
                cfg = configs.get(name)
                if cfg is None:
                    cfg = configs[name] = self.log_config(name)
                self.partitions.ensure(name, p, tid, info, cfg, now)
                changed.append((name, p))
            elif self.partitions.remove(name, p, tid, "reassigned away from this broker"):
                changed.append((name, p))
        touched = {name for rtype, name in delta.changed_configs if rtype == TOPIC_RESOURCE}
        if any(rtype == BROKER_RESOURCE for rtype, _ in delta.changed_configs):
            touched = {name for name, _ in self.partitions.partitions}  # broker defaults
        for name in sorted(touched):
            changed_topic = new.topic(name)
            if changed_topic is None:
                continue
            cfg = self.log_config(name)
            for p in changed_topic.partitions:
                local = self.partitions.get(name, p)
                if local is not None:
                    local.log.config = cfg
        elr_on = elr_enabled(new.features)
        if elr_on != elr_was:
            touched = {name for name, _ in self.partitions.partitions}
        self._hw_rule(changed if not touched else [*changed, *self._local(touched)], elr_on)
        self.changed_partitions = changed
        self._notify(new)

    def _open_queued(self, key: Key, tid: UUID) -> bool:
        """Open a queued partition as the image says now (if it still says to)."""
        name, p = key
        topic = self.image.topics.get(tid)
        info = topic.partitions.get(p) if topic is not None and topic.name == name else None
        if info is None or self.node_id not in info.replicas:
            return False  # deleted, re-created or moved away meanwhile
        local = self.partitions.get(name, p)
        if local is not None and local.topic_id == tid:
            return False  # (opened by a publication since)
        return (
            self.partitions.ensure(name, p, tid, info, self.log_config(name), _now_ms()) is not None
        )

    def _opened(self, keys: list[Key]) -> None:
        """A slice of queued partitions opened: published as a publication's are."""
        self._hw_rule(keys, elr_enabled(self.image.features))
        self.changed_partitions = keys
        self._notify(self.image)

    def _hw_rule(self, keys: Iterable[tuple[str, int]], elr_on: bool) -> None:
        """KIP-966: with eligible leader replicas on, a partition's high watermark does
        not advance while its ISR is below the topic's min.insync.replicas."""
        for name, p in keys:
            local = self.partitions.get(name, p)
            if local is not None:
                local.hw_min_isr = self.produce_settings(name)[2] if elr_on else 0

    def _local(self, names: set[str]) -> list[tuple[str, int]]:
        return [key for key in self.partitions.partitions if key[0] in names]

    def beat_sent(self, now: float) -> None:
        """A heartbeat goes out: one a whole session after the last means this process
        did not run meanwhile (heartbeats that fail still go out on time)."""
        if self.beat_at and now - self.beat_at > self.session_s:
            self.paused_at = now
        self.beat_at = now

    def beat_answered(self, sent: float, unfenced: bool) -> None:
        if unfenced and self.paused_at is not None and sent >= self.paused_at:
            self.paused_at = None

    def may_be_stale(self, now: float) -> bool:
        """Whether this broker may have been fenced without knowing it yet: paused past
        its session (seen now, or at its last heartbeat, not answered since). A broker
        whose controllers do not answer is not: none of them can fence it then, and
        leaders go on serving, as Kafka's do."""
        if self.paused_at is not None:
            return True
        return self.beat_at > 0 and now - self.beat_at > self.session_s

    def _notify(self, new: MetadataImage) -> None:
        for fn in self.on_image:
            fn(new)
        if self._image_waiters:
            waiting, self._image_waiters = self._image_waiters, []
            for pred, fut in waiting:
                if fut.done():
                    continue
                if pred(new):
                    fut.set_result(None)
                else:
                    self._image_waiters.append((pred, fut))

    async def wait_for(self, predicate: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Wait until the broker's image satisfies ``predicate`` (e.g. shows a topic that
        the controller just created); False on timeout."""
        if predicate(self.image):
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._image_waiters.append((predicate, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False
        return True

    def config_layers(self) -> tuple[Mapping[str, str], Mapping[str, str], Mapping[str, str]]:
        """This broker's configs by precedence: set dynamically for it, set dynamically as
        the cluster default, set in its file."""
        img = self.image
        return (
            img.configs.get((BROKER_RESOURCE, str(self.node_id)), {}),
            img.configs.get((BROKER_RESOURCE, ""), {}),
            self.settings.static_configs,
        )

    def new_topic_defaults(self) -> tuple[int, int]:
        """(num.partitions, default.replication.factor) of this broker, for the topics it
        creates on a client's behalf (Kafka: the broker's values for auto-creation, the
        controller's for a CreateTopics that names neither)."""
        layers = self.config_layers()
        partitions = resolve_broker("num.partitions", *layers)[0] or "1"
        rf = resolve_broker("default.replication.factor", *layers)[0] or "1"
        return int(partitions), int(rf)

    def topic_config_details(self, name: str) -> dict[str, Resolved]:
        """Every topic config of ``name``: value, source and synonyms, as Kafka resolves
        them (the topic's own, then its broker synonyms dynamic, default, static)."""
        own = self.image.topic_config(name)
        layers = self.config_layers()
        return {k: resolve_topic(k, own, *layers) for k in TOPIC_CONFIG_DEFAULTS}

    def topic_config(self, name: str) -> dict[str, str]:
        return {k: v for k, (v, _, _) in self.topic_config_details(name).items() if v is not None}

    def log_config(self, name: str) -> LogConfig:
        c = self.topic_config(name)
        d = self.settings.log_defaults

        def get(key: str, default: int) -> int:
            try:
                return int(c[key])
            except (KeyError, ValueError):
                return default

        # retention deletes only where cleanup.policy has delete: a compacted topic
        # keeps every key's latest value for ever (as Kafka)
        deletes = "delete" in c.get("cleanup.policy", "delete").replace(" ", "").split(",")
        return LogConfig(
            segment_bytes=get("segment.bytes", d.segment_bytes),
            segment_ms=get("segment.ms", d.segment_ms),
            retention_ms=get("retention.ms", d.retention_ms) if deletes else -1,
            retention_bytes=get("retention.bytes", d.retention_bytes) if deletes else -1,
            index_interval_bytes=get("index.interval.bytes", d.index_interval_bytes),
            flush_interval_messages=get("flush.messages", d.flush_interval_messages),
        )

    async def allocate_producer_id(self) -> tuple[ErrorCode, int]:
        """A producer id from this broker's block (AllocateProducerIds to the controller
        for a new block when it is used up): (error, producer id)."""
        if not self._producer_ids:
            try:
                err, start, count = await self.controller.allocate_producer_ids(
                    self.node_id, self.broker_epoch
                )
            except ControllerUnavailableError:
                return ErrorCode.coordinator_not_available, -1
            if err.code != ErrorCode.none:
                return err.code, -1
            self._producer_ids = list(range(start + count - 1, start - 1, -1))
        return ErrorCode.none, self._producer_ids.pop()

    def produce_settings(self, name: str) -> tuple[int, bool, int, bool]:
        """(max.message.bytes, LogAppendTime?, min.insync.replicas, compacted?) of a
        topic, cached until the next metadata change."""
        cached = self._produce_settings.get(name)
        if cached is None:
            c = self.topic_config(name)
            cached = (
                int(c.get("max.message.bytes", self.settings.max_message_bytes)),
                c.get("message.timestamp.type") == "LogAppendTime",
                int(c.get("min.insync.replicas", "1")),
                "compact" in c.get("cleanup.policy", "delete").replace(" ", "").split(","),
            )
            self._produce_settings[name] = cached
        return cached

    def enforce_retention(self) -> None:
        now = _now_ms()
        for p in list(self.partitions.partitions.values()):
            p.enforce_retention(now)

    def expire_producers(self, expiration_ms: int) -> None:
        """producer.id.expiration.ms: forget the producers of every partition that wrote
        nothing that long and have no open transaction (as Kafka's ProducerStateManager)."""
        now = _now_ms()
        for p in list(self.partitions.partitions.values()):
            p.state.remove_expired(now, expiration_ms)

    async def dir_assignment_loop(self) -> None:
        """AssignReplicasToDirs (KIP-858), apart from the heartbeats as Kafka's
        AssignmentsManager: a slow controller must not delay a heartbeat past the
        session."""
        told = -1e9
        while True:
            await asyncio.sleep(DIR_ASSIGNMENT_INTERVAL_S)
            try:
                await self.send_dir_assignments()
            except Exception:
                if time.monotonic() - told >= 60:
                    told = time.monotonic()
                    log.exception("[node %d] Telling the controller the replicas' log "
                                  "directories failed; trying again", self.node_id)  # fmt: skip

    async def send_dir_assignments(self) -> bool:
        """Tell the controller the directory of each replica whose directory in the
        metadata is not the one holding it (AssignReplicasToDirs, KIP-858), up to
        Kafka's 2,250 a request; True if some were sent."""
        pending = self.partitions.assignments
        mv = self.image.features.get(METADATA_VERSION_FEATURE)
        if not pending or self.broker_epoch < 0 or mv is None or not directory_assignment(mv):
            return False
        batch = list(itertools.islice(pending.items(), 2250))
        try:
            err, results = await self.controller.assign_replicas_to_dirs(
                self.node_id, self.broker_epoch, [(d, t, i) for (t, i), d in batch]
            )
        except ControllerUnavailableError:
            return False
        if err.code != ErrorCode.none:
            return False
        done = (ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_id,
                ErrorCode.unknown_topic_or_partition)  # fmt: skip
        for d, t, i, e in results:
            if e.code in done and pending.get((t, i)) == d:
                del pending[(t, i)]
        return True

    def close(self) -> None:
        self.opener.close()
        self.log_dir_moves.close()
        self.peers.close()
        self.auto_create.close()
        self.partitions.close(self.broker_epoch)
