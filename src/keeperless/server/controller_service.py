"""The controller role of a node: the QuorumController fed by the metadata log. When this
node's Raft core leads, its controller is the active one: operations run on it, their
records are appended and answered after commit. A new leader first catches up with
everything committed before its election; a leader that loses its majority forgets what
it appended but could not commit."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from keeperless.controller.delegation_tokens import TokenSettings, sweep_expired
from keeperless.controller.elections import balance_leaders
from keeperless.controller.fencing import fence_stale_brokers, start_sessions
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.features import METADATA_VERSION_FEATURE
from keeperless.metadata.group_configs import BROKER_LIMITS
from keeperless.raft.core import NotLeaderError
from keeperless.runtime.metadata_log import MetadataLog
from keeperless.server.config import NodeConfig
from keeperless.server.zk_migration import ZkMigrationDriver
from keeperless.storage.meta_properties import read_meta_properties
from keeperless.zk.records import MIGRATION, POST_MIGRATION, PRE_MIGRATION

__all__ = ["ControllerService", "NotControllerError", "PreMigrationError"]

log = logging.getLogger(__name__)
BALANCE_SLICE = 20_000  # partitions looked at per leader-balancing operation

PROPOSE_CHUNK = 2000  # records encoded between two turns of the event loop
MAX_UNCOMMITTED = 10 * PROPOSE_CHUNK  # records a big operation may have appended, uncommitted
T = TypeVar("T")
# what a migration from ZooKeeper copies: not written by anything else before it
_COPIED_BY_MIGRATION = frozenset({
    r.TopicRecord, r.PartitionRecord, r.RemoveTopicRecord, r.ConfigRecord,
    r.AccessControlEntryRecord, r.RemoveAccessControlEntryRecord,
    r.UserScramCredentialRecord, r.RemoveUserScramCredentialRecord, r.ClientQuotaRecord,
    r.ProducerIdsRecord, r.DelegationTokenRecord, r.RemoveDelegationTokenRecord,
})  # fmt: skip


def _now_ms() -> int:
    return int(time.time() * 1000)


class NotControllerError(RuntimeError):
    """This node is not the active controller (Kafka's NOT_CONTROLLER)."""


class PreMigrationError(NotControllerError):
    """The active controller refuses this change until ZooKeeper's metadata is copied
    (clients hear NOT_CONTROLLER, as from Kafka's; its own loops go on)."""


class ControllerService:
    def __init__(self, config: NodeConfig, mlog: MetadataLog) -> None:
        self.config = config
        self.node_id = config.node_id
        self.mlog = mlog
        self.controller = QuorumController(
            self.node_id,
            random.Random(),
            {
                "num.partitions": config["num.partitions"],
                "default.replication.factor": config["default.replication.factor"],
                "min.insync.replicas": config["min.insync.replicas"],
                # the limits of group configs (GroupConfig's checks on the controller)
                **{k: config[k] for lim in BROKER_LIMITS.values() for k in lim},
            },
        )
        self.controller.session_timeout_ms = config["broker.session.timeout.ms"]
        self.tokens = TokenSettings(
            config["delegation.token.secret.key"] or None,
            config["delegation.token.max.lifetime.ms"],
            config["delegation.token.expiry.time.ms"],
        )
        self._token_check_s = config["delegation.token.expiry.check.interval.ms"] / 1000
        self._balance = bool(config["auto.leader.rebalance.enable"])
        self._balance_s = config["leader.imbalance.check.interval.seconds"]
        c = self.controller
        mlog.listeners.append(c.replay_committed)
        mlog.snapshot_listeners.append(lambda delta, image, sid: c.load_image(image))
        mlog.leadership_listeners.append(self._on_leadership)
        self._active = asyncio.Event()
        self._append_lock = asyncio.Lock()
        self._activation: asyncio.Task[None] | None = None
        self._sessions: asyncio.Task[None] | None = None
        self._token_sweeper: asyncio.Task[None] | None = None
        self._balancer: asyncio.Task[None] | None = None
        self.metrics: Any = None  # runtime.metrics.Metrics when enabled
        self.new_active_controllers = 0
        self.timed_out_heartbeats = 0
        self._migrating = bool(config["zookeeper.metadata.migration.enable"])
        self.zk_migration: ZkMigrationDriver | None = None
        self._zk_task: asyncio.Task[None] | None = None
        if self._migrating and config["zookeeper.connect"]:
            meta = read_meta_properties(config.metadata_log_dir)
            self.zk_migration = ZkMigrationDriver(
                self.node_id, str(config["zookeeper.connect"]),
                meta.cluster_id if meta is not None else "", c,
                functools.partial(self.call, in_premigration=True), lambda: mlog.core.epoch,
            )  # fmt: skip
            mlog.listeners.append(self.zk_migration.on_committed)

    @property
    def is_active(self) -> bool:
        return self._active.is_set()

    def _on_leadership(self, leader: bool) -> None:
        self._active.clear()
        if self._sessions is not None:
            self._sessions.cancel()
            self._sessions = None
        if self._token_sweeper is not None:
            self._token_sweeper.cancel()
            self._token_sweeper = None
        if self._balancer is not None:
            self._balancer.cancel()
            self._balancer = None
        if self._zk_task is not None:
            self._zk_task.cancel()
            self._zk_task = None
        if self._activation is not None:
            self._activation.cancel()
            self._activation = None
        if not leader:
            self.controller.renounce()
            log.info("[node %d] No longer the active controller", self.node_id)
            return
        with_loop = asyncio.get_running_loop()
        self._activation = with_loop.create_task(self._activate())

    async def _activate(self) -> None:
        # Everything before our LEADER_CHANGE record commits with it; replay it first.
        await self.mlog.wait_committed(self.mlog.core.log_end_offset - 1)
        self.controller.image = self.controller.committed
        self._active.set()
        self.new_active_controllers += 1  # Kafka's NewActiveControllersCount
        log.info(
            "[node %d] Became the active controller in epoch %d", self.node_id, self.mlog.core.epoch
        )
        start_sessions(self.controller, _now_ms())
        self._sessions = asyncio.get_running_loop().create_task(self._watch_sessions())
        if self.tokens.secret_key:
            self._token_sweeper = asyncio.get_running_loop().create_task(self._sweep_tokens())
        if self._balance:
            self._balancer = asyncio.get_running_loop().create_task(self._balance_leaders())
        if METADATA_VERSION_FEATURE not in self.controller.image.features:
            boot = self.mlog.bootstrap_records()
            if boot:
                await self.call(lambda c: Result(boot, None), in_premigration=True)
                log.info(
                    "[node %d] Wrote the bootstrap metadata (%d records)", self.node_id, len(boot)
                )
        migrating = self.controller.image.zk_migration_state in (PRE_MIGRATION, MIGRATION)
        if self.controller.cluster_min_isr_records() and not migrating:
            # (not while migrating: it is the brokers' default config, which the copy
            # brings and dual-write would push into ZooKeeper's brokers)
            await self.call(lambda c: Result(c.cluster_min_isr_records(), None))
        await self._zk_migration_step()

    async def _zk_migration_step(self) -> None:
        """Drive a migration from ZooKeeper (server/zk_migration.py), or finalize one: a
        controller started without zookeeper.metadata.migration.enable ends dual-write
        (POST_MIGRATION: ZooKeeper is no longer written), as Kafka's does."""
        if self.zk_migration is not None:
            self._zk_task = asyncio.get_running_loop().create_task(self.zk_migration.run())
            self._zk_task.add_done_callback(self._zk_migration_ended)
            return
        state = self.controller.image.zk_migration_state
        if state == MIGRATION and not self._migrating:
            await self.call(lambda c: Result(
                [r.ZkMigrationStateRecord(zk_migration_state=POST_MIGRATION)], None))  # fmt: skip
            log.info("[node %d] Finalized the migration from ZooKeeper "
                     "(zookeeper.metadata.migration.enable is off): ZooKeeper is no longer "
                     "written", self.node_id)  # fmt: skip
        elif state == PRE_MIGRATION:
            log.warning(
                "[node %d] A migration from ZooKeeper was started but has not copied "
                "ZooKeeper's metadata: set zookeeper.metadata.migration.enable=true and "
                "zookeeper.connect on the controllers to finish it",
                self.node_id,
            )

    def _zk_migration_ended(self, task: asyncio.Task[None]) -> None:
        """A migration that stopped on an error says so (it is not retried until this
        controller is active again)."""
        if not task.cancelled() and task.exception() is not None:
            log.error("[node %d] The migration from ZooKeeper stopped: %r; it goes on when "
                      "a controller becomes active again", self.node_id,
                      task.exception())  # fmt: skip

    async def _watch_sessions(self) -> None:
        """Fence brokers that miss broker.session.timeout.ms (checked every second)."""
        while self._active.is_set():
            await asyncio.sleep(1.0)
            try:
                fenced = await self.call(lambda c: fence_stale_brokers(c, _now_ms()))
            except PreMigrationError:
                continue
            except NotControllerError:
                return
            self.timed_out_heartbeats += len(fenced)  # Kafka's TimedOutBrokerHeartbeatCount
            for b in fenced:
                log.warning(
                    "[node %d] Fenced broker %d: no heartbeat within %d ms",
                    self.node_id,
                    b,
                    self.controller.session_timeout_ms,
                )

    async def _sweep_tokens(self) -> None:
        """Remove expired delegation tokens (every delegation.token.expiry.check.interval.ms)."""
        while self._active.is_set():
            await asyncio.sleep(self._token_check_s)
            try:
                gone = await self.call(lambda c: sweep_expired(c, _now_ms()))
            except PreMigrationError:
                continue  # (tokens go once the migration has copied ZooKeeper's metadata)
            except NotControllerError:
                return
            for t in gone:
                log.info(
                    "[node %d] Removed delegation token %s of %s: expired",
                    self.node_id,
                    t.token_id,
                    t.owner,
                )

    async def _balance_leaders(self) -> None:
        """Preferred leaders back, every leader.imbalance.check.interval.seconds, the
        topics taken in slices of about BALANCE_SLICE partitions per operation."""
        while self._active.is_set():
            await asyncio.sleep(self._balance_s)
            topics = list(self.controller.image.topics.items())
            i = 0
            while i < len(topics):
                ids, scanned = [], 0
                while i < len(topics) and scanned < BALANCE_SLICE:
                    ids.append(topics[i][0])
                    scanned += len(topics[i][1].partitions)
                    i += 1
                try:
                    await self.call(functools.partial(balance_leaders, topic_ids=ids))
                except PreMigrationError:
                    continue
                except NotControllerError:
                    return

    async def wait_active(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._active.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def call(
        self, op: Callable[[QuorumController], Result[T]], in_premigration: bool = False
    ) -> T:
        """Run an operation on the active controller; returns after its records commit.
        While a migration from ZooKeeper waits to copy its metadata (PRE_MIGRATION), an
        operation writing what the copy brings (topics, configs, ACLs, SCRAM, quotas,
        producer ids, tokens) is refused with NOT_CONTROLLER, as Kafka's controller
        refuses those not flagged RUNS_IN_PREMIGRATION (the copy would clash with it)."""
        if not self._active.is_set():
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        queued = time.perf_counter()
        async with self._append_lock:
            if self.metrics is not None:  # Kafka's EventQueueTimeMs: the wait for our turn
                self.metrics.event_queue_time.observe((time.perf_counter() - queued) * 1000)
            started = time.perf_counter()
            result = op(self.controller)
            if self.metrics is not None:  # Kafka's EventQueueProcessingTimeMs
                self.metrics.event_processing_time.observe((time.perf_counter() - started) * 1000)
            if (
                not in_premigration
                and self.controller.image.zk_migration_state == PRE_MIGRATION
                and any(type(rec) in _COPIED_BY_MIGRATION for rec in result.records)
            ):
                raise PreMigrationError(
                    f"node {self.node_id}: the controller waits to copy ZooKeeper's metadata "
                    "(pre-migration): metadata changes are refused until then"
                )
            if not result.records and not result.more:
                return result.response
            # Applied as appended, so that the next operation sees them (pipelining);
            # their committed copies are then skipped.
            before = self.controller.image
            last = -1
            try:
                # Big non-atomic operations (a controlled shutdown of a broker with many
                # partitions) are generated, applied and appended in chunks, letting the
                # event loop answer the voters' fetches in between; atomic ones
                # (CreateTopics: a topic and all its partitions) go in one batch, so a
                # failover never leaves half.
                if result.atomic:
                    chunks: Iterable[list[Any]] = [result.all_records()]
                else:
                    pending = itertools.chain(result.records, result.more)
                    chunks = iter(lambda: list(itertools.islice(pending, PROPOSE_CHUNK)), [])
                for i, chunk in enumerate(chunks):
                    if i:
                        await asyncio.sleep(0)
                        # Flow control: a million changes must not run ahead of what the
                        # voters can replicate and apply, or on a busy machine they miss
                        # the fetch timeout and the leadership is lost over and over.
                        behind = last - self.mlog.committed_offset
                        if behind > MAX_UNCOMMITTED:
                            await self.mlog.wait_committed(last - MAX_UNCOMMITTED // 2)
                    expected = self.mlog.core.log_end_offset + len(chunk) - 1
                    self.controller.replay(chunk, expected)
                    last = self.mlog.propose(chunk, self.controller.metadata_version)
                    assert last == expected, (last, expected)
            except NotLeaderError:
                self.controller.rollback(before)
                raise NotControllerError(f"node {self.node_id} lost the leadership") from None
        try:
            await self.mlog.wait_committed(last)
        except NotLeaderError as e:
            raise NotControllerError(str(e)) from None
        return result.response
