"""A live migration from ZooKeeper (KIP-866), on the active controller of a quorum started
with ``zookeeper.metadata.migration.enable=true`` and ``zookeeper.connect`` (Kafka's
``KRaftMigrationDriver``, as far as a cluster whose ZooKeeper-mode brokers are stopped
or rolled into keeperless brokers needs it):

1. a new quorum records PRE_MIGRATION (ZkMigrationStateRecord) once its bootstrap is in;
2. the active controller claims ZooKeeper's controllership (``/controller_epoch`` bumped,
   ``/controller`` naming it: a ZooKeeper-mode controller left running is fenced);
3. in PRE_MIGRATION it reads ZooKeeper's metadata and commits it in one batch ending with
   MIGRATION (a refusal - a reassignment in progress, topics being deleted, another
   cluster's ZooKeeper - is one line, retried; nothing is written);
4. in MIGRATION (dual-write) it writes ZooKeeper from the committed metadata: everything
   that differs when it becomes active, then each change, in transactions fenced by its
   claim. A ZooKeeper-mode cluster can be rolled back to until the migration is
   finalized: a controller started without ``zookeeper.metadata.migration.enable``
   records POST_MIGRATION (server/controller_service.py) and ZooKeeper is no longer
   written.

Each step is idempotent and resumable: a controller killed at any step leaves the next
active controller to start from the state the log holds (the migration's batch is
atomic: the metadata is copied exactly once)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from keeperless.controller.quorum_controller import QuorumController
from keeperless.controller.result import Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.features import (
    METADATA_VERSION_FEATURE,
    metadata_version_for_release,
    release_for_level,
)
from keeperless.metadata.image import MetadataImage
from keeperless.zk.layout import ZkLayoutError, parse_layout
from keeperless.zk.reader import ZkUnreachable
from keeperless.zk.records import (
    MIGRATION,
    MIGRATION_RELEASE,
    POST_MIGRATION,
    PRE_MIGRATION,
    SCRAM_RELEASE,
    migration_records,
)
from keeperless.zk.writer import ZkFenced, ZkWriter
from keeperless.zk.znodes import ZnodeOp, changes, image_znodes, with_unmigrated

__all__ = ["ZkMigrationDriver"]

log = logging.getLogger(__name__)
RETRY_S = 5.0  # after ZooKeeper could not be reached, or the migration was refused
HOLD_CHECK_S = 2.0  # an idle dual-write checks its claim on ZooKeeper this often
LOG_EVERY_S = 10.0  # dual-write's writes, summed up in a line at most this often


class ZkMigrationDriver:
    def __init__(
        self,
        node_id: int,
        connect: str,
        cluster_id: str,
        controller: QuorumController,
        call: Callable[[Callable[[QuorumController], Result[Any]]], Awaitable[Any]],
        kraft_epoch: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.connect = connect
        self.cluster_id = cluster_id
        self.controller = controller
        self.call = call
        self.kraft_epoch = kraft_epoch
        self.changed = asyncio.Event()  # set by every committed batch (metadata_log)
        self.znodes_written = 0
        self._said: str | None = None
        self._said_at = -LOG_EVERY_S  # when dual-write last said what it wrote
        self._unsaid: Counter[str] = Counter()  # znode writes not said yet, by kind

    def on_committed(self, records: Sequence[Any], last_offset: int) -> None:
        self.changed.set()

    def _say(self, line: str, warn: bool = True) -> None:
        """One line per distinct situation (a retry says nothing new)."""
        if line != self._said:
            (log.warning if warn else log.info)("[node %d] %s", self.node_id, line)
            self._said = line

    async def run(self) -> None:
        """While this controller is active (cancelled when it no longer is)."""
        while True:
            state = self.controller.committed.zk_migration_state
            if state == POST_MIGRATION:
                self._say("zookeeper.metadata.migration.enable is set, but the migration from "
                          "ZooKeeper was finalized: ZooKeeper is not written")  # fmt: skip
                return
            too_old = self._too_old()
            if too_old is not None:
                self._say(f"ZooKeeper migration refused: {too_old}")
                return
            if state == 0:
                if self.controller.committed.topics:
                    self._say(
                        "zookeeper.metadata.migration.enable is set, but this quorum already "
                        "holds topics of its own: a migration needs a new quorum (formatted "
                        "with ZooKeeper's cluster id); not migrating"
                    )
                    return
                await self.call(lambda c: Result([r.ZkMigrationStateRecord(
                    zk_migration_state=PRE_MIGRATION)], None))  # fmt: skip
                continue
            try:
                await self._claimed()
                return
            except ZkUnreachable as e:
                self._say(f"ZooKeeper migration: {e}; trying again in {RETRY_S:.0f} s")
            except ZkFenced as e:
                # another claimed ZooKeeper after this controller (a ZooKeeper-mode
                # controller, after this one's session expired): claim again, as Kafka's
                # driver does; a KRaft controller of a newer epoch is not claimed over
                self._say(f"ZooKeeper migration: {e}; claiming it again in {RETRY_S:.0f} s")
            await asyncio.sleep(RETRY_S)

    def _too_old(self, scram: bool = False) -> str | None:
        """Why the quorum's metadata.version cannot hold the migration (None: it can)."""
        level = self.controller.committed.features.get(METADATA_VERSION_FEATURE, 0)
        needs = [(MIGRATION_RELEASE, "a migration")]
        if scram:
            needs.append((SCRAM_RELEASE, "SCRAM credentials"))
        for needed, what in needs:
            if level < metadata_version_for_release(needed):
                return (f"metadata.version {release_for_level(level)} is older than "
                        f"{needed}, the first that can hold {what}: format the controllers "
                        f"with --release-version {needed.split('-')[0]} or later")  # fmt: skip
        return None

    async def _claimed(self) -> None:
        logging.getLogger("kazoo").setLevel(logging.WARNING)  # (its own state lines)
        writer = await asyncio.to_thread(ZkWriter, self.connect)
        try:
            epoch = await asyncio.to_thread(writer.claim, self.node_id, self.kraft_epoch())
            log.info("[node %d] Claimed ZooKeeper's controllership at %s (controller epoch %d)",
                     self.node_id, self.connect, epoch)  # fmt: skip
            while self.controller.committed.zk_migration_state == PRE_MIGRATION:
                if await self._migrate(writer):
                    break
                await asyncio.sleep(RETRY_S)
            await self._dual_write(writer, epoch)
        finally:
            await asyncio.to_thread(writer.close)

    async def _migrate(self, writer: ZkWriter) -> bool:
        """ZooKeeper's metadata into the quorum, in one batch; False if refused."""
        tree = await asyncio.to_thread(writer.read_all)
        try:
            md = await asyncio.to_thread(parse_layout, tree)
        except ZkLayoutError as e:
            self._say(f"ZooKeeper migration refused: ZooKeeper at {self.connect} does not hold "
                      f"a valid ZooKeeper-mode Kafka cluster: {e}")  # fmt: skip
            return False
        refusals = md.refusals()
        if md.scram and self._too_old(scram=True):
            refusals.append(str(self._too_old(scram=True)))
        if md.cluster_id != self.cluster_id:
            refusals.append(f"ZooKeeper holds cluster {md.cluster_id}, this quorum is "
                            f"formatted for {self.cluster_id}")  # fmt: skip
        if refusals:
            self._say("ZooKeeper migration refused: " + "; ".join(refusals))
            return False
        records, skipped = await asyncio.to_thread(migration_records, md, MIGRATION)
        for line in skipped:
            log.warning("[node %d] Not migrated: %s", self.node_id, line)
        await self.call(lambda c: Result(records, None))
        parts = sum(len(t.partitions) for t in md.topics.values())
        log.info("[node %d] Migrated the metadata of ZooKeeper at %s: %d topics, %d partitions, "
                 "%d ACLs, %d SCRAM credentials (%d records, one batch); ZooKeeper is written "
                 "as the metadata changes until the migration is finalized", self.node_id,
                 self.connect, len(md.topics), parts, len(md.acls), len(md.scram),
                 len(records))  # fmt: skip
        return True

    def _diff(
        self, current: dict[str, bytes | None], image: MetadataImage, epoch: int
    ) -> tuple[dict[str, bytes | None], list[ZnodeOp]]:
        """(Off the event loop: the whole image's znodes, and what differs.)"""
        wanted = with_unmigrated(current, image_znodes(image, epoch, self.node_id))
        return wanted, changes(current, wanted)

    async def _dual_write(self, writer: ZkWriter, epoch: int) -> None:
        current = await asyncio.to_thread(writer.read_managed)
        while True:
            self.changed.clear()
            image = self.controller.committed
            if image.zk_migration_state != MIGRATION:
                return
            wanted, ops = await asyncio.to_thread(self._diff, current, image, epoch)
            if ops:
                await asyncio.to_thread(writer.apply, ops)
                self.znodes_written += len(ops)
                for o in ops:
                    self._unsaid[o.kind] += 1
                now = time.monotonic()
                if now - self._said_at >= LOG_EVERY_S:  # (one line per 10 s at most)
                    self._said_at = now
                    log.info("[node %d] Wrote the metadata to ZooKeeper up to offset %d: %d "
                             "znodes created, %d set, %d deleted", self.node_id, image.offset,
                             self._unsaid["create"], self._unsaid["set"],
                             self._unsaid["delete"])  # fmt: skip
                    self._unsaid.clear()
            current = wanted
            self._said = None
            while not self.changed.is_set():
                try:
                    await asyncio.wait_for(self.changed.wait(), HOLD_CHECK_S)
                except TimeoutError:  # idle: still ZooKeeper's controller?
                    await asyncio.to_thread(writer.hold)
            await asyncio.sleep(0.05)  # (changes that come together are written together)
