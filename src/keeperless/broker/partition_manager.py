"""The partitions a broker hosts (Kafka's LogManager and the hosting side of its
ReplicaManager): one or several log directories (KIP-858) - their ids, checkpoints and
clean-shutdown files, where a new replica goes, a directory that fails - and every
partition kept in step with the metadata image."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from keeperless.broker.partitions import Partition
from keeperless.metadata.image import UNASSIGNED, PartitionInfo
from keeperless.storage.dir_failure import log_dir_failed
from keeperless.storage.durable import fsync_dir, write_atomically
from keeperless.storage.log import LogConfig, PartitionLog
from keeperless.storage.meta_properties import (
    read_meta_properties,
    uuid_from_kafka,
    uuid_to_kafka,
)
from keeperless.storage.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from keeperless.storage.partition_dirs import (
    CLEAN_SHUTDOWN_FILE,
    FUTURE_SUFFIX,
    PARTITION_METADATA,
    discard,
    partition_dirs,
    read_topic_id,
    remove_discarded,
    set_aside,
)

__all__ = ["LogDir", "PartitionManager", "directory_id_of", "future_key"]

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class LogDir:
    """One of the broker's ``log.dirs`` (KIP-858): its path, its directory id (from its
    meta.properties), whether it is online, and what it had checkpointed for the
    partitions it holds that are not open yet."""

    path: Path
    dir_id: UUID
    online: bool = True
    clean: bool = False  # its clean-shutdown file was there at start
    epoch: int = -1  # the broker epoch that file named
    starts: dict[tuple[str, int], int] = field(default_factory=dict)
    hws: dict[tuple[str, int], int] = field(default_factory=dict)
    hosted: int = 0  # partitions open in it (for placing new ones)


def future_key(path: Path) -> tuple[str, int] | None:
    """The partition a future replica's directory (``<topic>-<p>.<id>-future``) is of."""
    name = path.name.removesuffix(FUTURE_SUFFIX)
    base, dot, _ = name.rpartition(".")
    topic, dash, index = base.rpartition("-")
    if not (dot and dash and topic and index.isdigit()):
        return None
    return topic, int(index)


def directory_id_of(path: Path) -> UUID:
    """A log directory's id: from its meta.properties; for one without (tests, tools),
    one derived from its path."""
    meta = read_meta_properties(path)
    if meta is not None:
        with contextlib.suppress(ValueError):
            return uuid_from_kafka(meta.directory_id)
    u = uuid.uuid5(uuid.NAMESPACE_URL, str(path.resolve()))
    return u if u.int > 100 else UUID(int=u.int + 101)


class PartitionManager:
    """Partitions hosted by this broker, kept in step with the metadata image, in one or
    several log directories."""

    def __init__(self, node_id: int, log_dirs: Path | Sequence[Path], defaults: LogConfig) -> None:
        self.node_id = node_id
        paths = (log_dirs,) if isinstance(log_dirs, Path) else tuple(log_dirs)
        self.dirs = [LogDir(d, directory_id_of(d)) for d in paths]
        self.log_dir = paths[0]
        self.defaults = defaults
        self.partitions: dict[tuple[str, int], Partition] = {}
        # the directory of each open partition
        self.dir_of: dict[tuple[str, int], LogDir] = {}
        # partitions assigned here whose directory is offline (KIP-858): not served
        self.offline: dict[tuple[str, int], LogDir | None] = {}
        # partition directories found at start, by partition, until opened (in two
        # directories after a crash in the middle of a move between them)
        self._found: dict[tuple[str, int], list[LogDir]] = {}
        # future replicas (a move between log directories that a stop cut short) found
        # at start, by partition: the move resumes from them (Kafka's future logs)
        self.futures: dict[tuple[str, int], list[tuple[LogDir, Path]]] = {}
        # where a replica not hosted yet is to be created (AlterReplicaLogDirs before
        # it arrives, as Kafka's preferred log dirs)
        self.preferred: dict[tuple[str, int], LogDir] = {}
        # directories to tell the controller (AssignReplicasToDirs): (topic id,
        # partition) -> directory id, taken by the broker
        self.assignments: dict[tuple[UUID, int], UUID] = {}
        # fetches waiting for data (Kafka's fetch purgatory, keyed by partition): each
        # is woken by what happens to the partitions it reads, not by every append here
        self._waiting: dict[tuple[str, int], set[asyncio.Future[None]]] = {}
        # set by the replica manager: a follower fetched from a partition led here
        self.on_follower_fetch: Callable[[Partition, int], None] | None = None
        # called when a log directory goes offline (the broker tells the controller)
        self.on_dir_offline: Callable[[LogDir], None] | None = None
        # new partitions' logs whose directories a worker thread is to make durable
        self._unsynced: list[PartitionLog] = []
        # Kafka's marker of a clean stop: read (and removed) at start, written at a
        # clean stop; recovery then knows a torn tail is not a crash's. Clean only if
        # every directory had it
        self.clean_shutdown = True
        # the broker epoch the clean-shutdown files name (as Kafka's, {"version": 0,
        # "brokerEpoch": N}), told to the controller at registration; -1 after a crash
        epochs: set[int] = set()
        for ld in self.dirs:
            self._open_dir(ld)
            self.clean_shutdown = self.clean_shutdown and ld.clean
            epochs.add(ld.epoch)
        self.previous_broker_epoch = epochs.pop() if len(epochs) == 1 else -1
        if not self.clean_shutdown:
            self.previous_broker_epoch = -1

    def _open_dir(self, ld: LogDir) -> None:
        """Read a directory's checkpoints and clean-shutdown file and index its
        partition directories; one that cannot be read starts offline."""
        try:
            if ld.path.exists() and not ld.path.is_dir():
                raise NotADirectoryError(f"{ld.path} is not a directory")
            # log start offsets moved inside a segment (DeleteRecords), as checkpointed;
            # applied to each partition when it opens
            ld.starts = read_offset_checkpoint(ld.path / LOG_START_OFFSET_CHECKPOINT)
            # each partition's high watermark as last saved (Kafka's
            # replication-offset-checkpoint), applied when it opens
            ld.hws = read_offset_checkpoint(ld.path / REPLICATION_OFFSET_CHECKPOINT)
            marker = ld.path / CLEAN_SHUTDOWN_FILE
            if marker.exists():
                ld.clean = True
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    ld.epoch = int(json.loads(marker.read_text())["brokerEpoch"])
                marker.unlink()
                fsync_dir(ld.path)
            for key in partition_dirs(ld.path):
                self._found.setdefault(key, []).append(ld)
            for future in ld.path.glob(f"*{FUTURE_SUFFIX}"):
                # a move between directories that a stop cut short: it resumes
                of = future_key(future)
                if of is None:
                    log.info("[node %d] Deleting %s: not a future replica's name",
                             self.node_id, future)  # fmt: skip
                    discard(future)
                else:
                    self.futures.setdefault(of, []).append((ld, future))
        except OSError as e:
            ld.online = False
            log.error(
                "[node %d] Log directory %s is offline: it could not be read at start (%s)",
                self.node_id,
                ld.path,
                e,
            )

    @property
    def online_dirs(self) -> list[LogDir]:
        return [ld for ld in self.dirs if ld.online]

    @property
    def offline_dirs(self) -> list[LogDir]:
        return [ld for ld in self.dirs if not ld.online]

    def dir_by_id(self, dir_id: UUID) -> LogDir | None:
        return next((ld for ld in self.dirs if ld.dir_id == dir_id), None)

    def dir_containing(self, path: Path) -> LogDir | None:
        """The log directory ``path`` is in (or is): the innermost, when one log
        directory lies inside another."""
        found = [ld for ld in self.dirs if path == ld.path or ld.path in path.parents]
        return max(found, key=lambda ld: len(ld.path.parts), default=None)

    def _place(self, key: tuple[str, int], info: PartitionInfo) -> LogDir | None:
        """Where a partition not found on disk is created: the directory the metadata
        assigns it, if online here; else, with every directory online, the one holding
        the fewest partitions (Kafka's nextLogDirs). With a directory offline, a replica
        the metadata does not show as new (UNASSIGNED) may be on it: it is not created
        elsewhere (Kafka: "Can not create log ... because log directories are offline")."""
        want = info.directory(self.node_id)
        chosen = self.preferred.pop(key, None)
        if chosen is not None and chosen.online:
            return chosen
        ld = self.dir_by_id(want)
        if ld is not None and ld.online:
            return ld
        online = self.online_dirs
        if not online or (len(online) < len(self.dirs) and want != UNASSIGNED):
            return None
        return min(online, key=lambda d: d.hosted)

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def ensure(
        self,
        topic: str,
        index: int,
        topic_id: UUID,
        info: PartitionInfo,
        config: LogConfig,
        now_ms: int,
    ) -> Partition | None:
        """Open (or create) the local replica; None when it is not served here because
        a log directory that may hold it is offline."""
        p = self.partitions.get((topic, index))
        if p is not None and p.topic_id != topic_id:
            # an older incarnation of the topic is still open here: it goes first
            self.remove(topic, index, p.topic_id, "its topic was re-created")
            p = None
        if p is None:
            key = (topic, index)
            copies = [d for d in self._found.pop(key, ()) if d.online]
            want = info.directory(self.node_id)
            ld = next((d for d in copies if d.dir_id == want), copies[0] if copies else None)
            for other in copies:
                if other is not ld:
                    # a crash between the two renames of a move: the copies are the same
                    log.info("[node %d] Deleting the second copy of %s-%d in %s (kept: %s)",
                             self.node_id, topic, index, other.path, ld and ld.path)  # fmt: skip
                    self._discard(other.path / f"{topic}-{index}")
            if ld is None:
                ld = self._place(key, info)
            if ld is None:
                if key not in self.offline:
                    log.warning(
                        "[node %d] Not hosting %s-%d: a log directory that may hold it is offline",
                        self.node_id,
                        topic,
                        index,
                    )
                self.offline[key] = None
                return None
            directory = ld.path / f"{topic}-{index}"
            try:
                found = self._claim(directory, topic_id, topic)
                p = Partition(topic, index, topic_id, directory, config, now_ms, ld.clean)
            except OSError as e:
                # its log directory failed (Kafka: an I/O error creating or loading a
                # log takes the directory offline); the node may stop (the metadata
                # log's directory), else the partition is offline here
                log_dir_failed(ld.path, e)
                self.dir_failed(ld.path, e)
                self.offline[key] = ld
                return None
            self.offline.pop(key, None)
            if p.log.dir_pending:
                self._sync_later(p.log)
            self.partitions[key] = p
            self.dir_of[key] = ld
            ld.hosted += 1
            start = ld.starts.pop(key, None)
            if start is not None and found == topic_id:
                p.advance_start(start, now_ms)
            hw = ld.hws.pop(key, None)
            if hw is not None and found == topic_id:
                p.restore_hw(hw)
        else:
            p.log.config = config
        ld = self.dir_of[(topic, index)]
        if info.directory(self.node_id) != ld.dir_id:
            self.assignments[(topic_id, index)] = ld.dir_id
        p.node_id = self.node_id
        before = p.info
        p.on_info(info, now_ms)
        if before is None or (before.leader_epoch, before.isr) != (info.leader_epoch, info.isr):
            # fetches waiting here answer now: not the leader any more, or a high
            # watermark an ISR shrink raised
            self.notify_append((topic, index))
        return p

    def _sync_later(self, plog: PartitionLog) -> None:
        """Make a new partition's directory durable off the event loop (its first flush
        or roll does it first if the worker has not): thousands of partitions created by
        one metadata update would otherwise hold the loop for three fsyncs each."""
        self._unsynced.append(plog)
        if len(self._unsynced) > 1:
            return  # (the worker is already asked)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: a tool or a test) done now
            self._sync_unsynced()
            return
        loop.call_soon(lambda: loop.run_in_executor(None, self._sync_unsynced))

    def _sync_unsynced(self) -> None:
        batch, self._unsynced = self._unsynced, []
        for plog in batch:
            # a directory removed or failed meanwhile: its next flush (if any) says so
            with contextlib.suppress(OSError):
                plog.sync_dir()

    def _claim(self, directory: Path, topic_id: UUID, topic: str) -> UUID | None:
        """The topic id ``directory`` holds; a deleted incarnation's is discarded, and
        one whose ``partition.metadata`` is damaged is set aside."""
        try:
            found = read_topic_id(directory) if directory.exists() else None
        except ValueError as e:
            # a power loss before a new partition's directory was synced (nothing in it
            # was flushed: a flush syncs it first), or damage: not served, kept
            target = set_aside(directory)
            log.warning("[node %d] %s; renamed to %s, not served: the replica starts empty",
                        self.node_id, e, target.name)  # fmt: skip
            return None
        if found is not None and found != topic_id:
            log.info(
                "[node %d] Deleting %s: it belongs to topic id %s, not %s (a deleted "
                "incarnation of %s)",
                self.node_id,
                directory.name,
                found,
                topic_id,
                topic,
            )
            self._discard(directory)
        return found

    def checkpoint_high_watermarks(self) -> None:
        """Save every partition's high watermark in its directory's checkpoint (those not
        opened yet: as read)."""
        failed: OSError | None = None
        for ld in self.online_dirs:
            hws = dict(ld.hws)
            for key, p in self.partitions.items():
                if self.dir_of.get(key) is ld:
                    hws[key] = p.high_watermark
            try:
                write_offset_checkpoint(ld.path / REPLICATION_OFFSET_CHECKPOINT, hws)
            except OSError as e:  # that directory failed: the others are saved still
                failed = e
        if failed is not None:
            raise failed

    def advance_start(self, p: Partition, offset: int, now_ms: int) -> bool:
        """Move a partition's log start offset and checkpoint every moved start of its
        directory (the deleted records must stay deleted across a restart)."""
        if not p.advance_start(offset, now_ms):
            return False
        ld = self.dir_of.get((p.topic, p.index))
        if ld is None or not ld.online:
            return True
        starts = dict(ld.starts)  # of partitions not opened yet: kept
        for key, q in self.partitions.items():
            if self.dir_of.get(key) is not ld:
                continue
            first = q.log.first_segment_base
            if q.log.log_start_offset > first:
                starts[key] = q.log.log_start_offset
        write_offset_checkpoint(ld.path / LOG_START_OFFSET_CHECKPOINT, starts)
        return True

    def remove(self, topic: str, index: int, topic_id: UUID, why: str) -> bool:
        """Delete the local replica of ``topic``-``index`` if it belongs to topic id
        ``topic_id`` (a re-created topic of the same name is another partition)."""
        p = self.partitions.get((topic, index))
        if p is None or p.topic_id != topic_id:
            self.offline.pop((topic, index), None)
            return False
        del self.partitions[(topic, index)]
        ld = self.dir_of.pop((topic, index), None)
        if ld is not None:
            ld.hosted -= 1
        self.assignments.pop((topic_id, index), None)
        log.info(
            "[node %d] Deleting partition %s-%d of topic id %s (%s)",
            self.node_id,
            topic,
            index,
            topic_id,
            why,
        )
        p.fail_waiters()
        # no longer anyone's replica here: a request still holding it (an acks=all
        # produce about to wait, found by the fault harness as an IndexError on the
        # closed log) is answered NOT_LEADER_OR_FOLLOWER
        p.info = None
        p.log.close()  # no snapshot: it is deleted
        self._discard(p.directory)
        return True

    def _discard(self, directory: Path) -> None:
        try:
            target = discard(directory)
        except FileNotFoundError as e:
            if directory.parent.is_dir():
                log.info("[node %d] %s was already gone", self.node_id, directory)
                return  # not there to discard: not a failure of its log directory
            log_dir_failed(directory.parent, e)
            self.dir_failed(directory.parent, e)
            return
        except OSError as e:
            # its log directory failed (a deleted topic's replica on a failed disk, seed
            # 5006): that directory goes offline; the metadata update goes on
            log_dir_failed(directory.parent, e)
            self.dir_failed(directory.parent, e)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            shutil.rmtree(target, ignore_errors=True)
            return
        loop.run_in_executor(None, shutil.rmtree, target, True)

    def take_future(self, p: Partition) -> tuple[LogDir, Path] | None:
        """The future replica found at start for ``p`` that its move resumes from: in an
        online directory other than p's, of p's topic id; any other is deleted."""
        key = (p.topic, p.index)
        chosen: tuple[LogDir, Path] | None = None
        for ld, path in self.futures.pop(key, ()):
            ok = ld.online and ld is not self.dir_of.get(key)
            if chosen is None and ok and _topic_id_or_none(path) == p.topic_id:
                chosen = (ld, path)
                continue
            log.info("[node %d] Deleting %s: a future replica of %s-%d that will not be "
                     "used", self.node_id, path, p.topic, p.index)  # fmt: skip
            if ld.online:
                self._discard(path)
        return chosen

    def remove_strays(self, expected: dict[tuple[str, int], UUID]) -> None:
        """At start, once the metadata is caught up: delete what a crash left of
        discarded partitions and the future replicas of partitions not assigned here;
        set aside (rename ``-stray``, as Kafka 3.7+ does, never delete) every partition
        directory that the metadata does not assign to this broker with that topic id
        (deleted while it was down, an older incarnation of a re-created topic, a copy
        that should not be there): its records may be the only copy of something."""
        for key in [k for k in self.futures if k not in expected]:
            for ld, path in self.futures.pop(key):
                log.info("[node %d] Deleting %s: a future replica of a partition not "
                         "assigned here", self.node_id, path)  # fmt: skip
                if ld.online:
                    self._discard(path)
        for ld in self.online_dirs:
            remove_discarded(ld.path)
            for key, directory in partition_dirs(ld.path).items():
                if key in self.partitions and self.dir_of.get(key) is ld:
                    continue
                found = _topic_id_or_none(directory)
                damaged = found is None and (directory / PARTITION_METADATA).exists()
                want = expected.get(key)
                if key not in self.partitions and found is not None and found == want:
                    continue
                if (
                    key not in self.partitions
                    and found is None
                    and want is not None
                    and not damaged
                ):
                    continue  # a directory from before partition.metadata: it is adopted
                why = (
                    "its partition.metadata is damaged"
                    if damaged
                    else "it is hosted in another log directory"
                    if key in self.partitions
                    else (f"topic id {found} is not assigned here")
                )
                try:
                    target = set_aside(directory)
                except OSError as e:  # its log directory failed: it goes offline
                    log_dir_failed(directory.parent, e)
                    self.dir_failed(directory.parent, e)
                    continue
                # no longer a copy to open or discard (campaign seed 8837: a stray copy
                # set aside at start was then "discarded" again as the second copy of
                # a partition assigned here, and the rename of a directory no longer
                # there took the whole log directory offline)
                copies = self._found.get(key)
                if copies is not None and ld in copies:
                    copies.remove(ld)
                log.warning("[node %d] Partition directory %s marked stray (%s) and renamed "
                            "to %s: it is not served; remove it once it is not needed",
                            self.node_id, directory, why, target.name)  # fmt: skip

    def notify_append(self, *keys: tuple[str, int]) -> None:
        """Wake the fetches waiting on any of ``keys`` (topic, partition): records were
        appended there, or its high watermark rose. No keys: every waiting fetch."""
        waiting = self._waiting
        if not keys:
            keys = tuple(waiting)
        for key in keys:
            futs = waiting.pop(key, None)
            if futs:
                for fut in futs:
                    if not fut.done():
                        fut.set_result(None)

    async def wait_for_data(self, timeout_s: float, keys: list[tuple[str, int]]) -> None:
        """Until something is appended to one of ``keys`` (or its high watermark rises),
        or ``timeout_s`` passes."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._waiting
        for key in keys:
            waiting.setdefault(key, set()).add(fut)

        def expire() -> None:
            if not fut.done():
                fut.set_result(None)

        handle = asyncio.get_running_loop().call_later(timeout_s, expire)
        try:
            await fut
        finally:
            handle.cancel()
            for key in keys:
                futs = waiting.get(key)
                if futs is not None:
                    futs.discard(fut)
                    if not futs:
                        del waiting[key]

    def close(self, broker_epoch: int = -1) -> None:
        """Close every log; mark each directory whose logs were all flushed cleanly shut
        down (with the broker's epoch, which it names when it registers again)."""
        try:
            self.checkpoint_high_watermarks()
        except OSError as e:
            log.warning("[node %d] Could not save the high watermarks: %s", self.node_id, e)
        unclean: set[int] = set()
        for key, p in self.partitions.items():
            # a request still holding it (an acks=all produce waiting for the high
            # watermark) is answered NOT_LEADER_OR_FOLLOWER, not an IndexError on the
            # closed log (fault harness, seed 4406: a stop without a controller)
            p.fail_waiters()
            p.info = None
            if not p.close():
                ld = self.dir_of.get(key)
                unclean.add(id(ld))
        self.partitions.clear()
        self.dir_of.clear()
        for ld in self.dirs:
            ld.hosted = 0
        for ld in self.online_dirs:
            if id(ld) in unclean:
                continue
            try:
                write_atomically(
                    ld.path / CLEAN_SHUTDOWN_FILE,
                    json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode(),
                )
                fsync_dir(ld.path)
            except OSError as e:
                log.warning("[node %d] Could not mark %s cleanly shut down: %s",
                            self.node_id, ld.path, e)  # fmt: skip

    # -- a failed log directory (KIP-858) ---------------------------------------------------

    def dir_failed(self, path: Path, error: OSError) -> LogDir | None:
        """A write in ``path`` failed: its log directory goes offline - its partitions
        are closed and no longer served here, and nothing more is written to it. Returns
        the directory newly offline (None: unknown, or already offline)."""
        ld = self.dir_containing(path)
        if ld is None or not ld.online:
            return None
        ld.online = False
        log.error(
            "[node %d] Log directory %s (%s) is offline after an I/O error (%s): its %d "
            "partition(s) are no longer served here; %d of %d log directories remain online",
            self.node_id,
            ld.path,
            uuid_to_kafka(ld.dir_id),
            error,
            sum(1 for d in self.dir_of.values() if d is ld),
            len(self.online_dirs),
            len(self.dirs),
        )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._close_dir(ld)
        else:
            # not inside the write that failed: its caller is still on the stack
            loop.call_soon(self._close_dir, ld)
        if self.on_dir_offline is not None:
            self.on_dir_offline(ld)
        return ld

    def _close_dir(self, ld: LogDir) -> None:
        for key in [k for k, d in self.dir_of.items() if d is ld]:
            p = self.partitions.pop(key)
            del self.dir_of[key]
            ld.hosted -= 1
            self.offline[key] = ld
            p.fail_waiters()
            p.info = None
            with contextlib.suppress(Exception):
                p.log.close()


def _topic_id_or_none(directory: Path) -> UUID | None:
    """The topic id a directory holds, None if its ``partition.metadata`` is missing or
    damaged."""
    try:
        return read_topic_id(directory)
    except ValueError:
        return None
