"""Moving a replica between the log directories of one broker (AlterReplicaLogDirs,
KIP-113 on KIP-858's directory ids), as Kafka's ReplicaAlterLogDirsThread does: a
*future* replica (``<topic>-<partition>.<id>-future`` in the destination) is filled
from the current one in the background, throttled by
``replica.alter.log.dirs.io.max.bytes.per.second``, while the current one goes on
serving; once it has caught up with the log end the two are swapped in one step of the
event loop (nothing is appended in between): the copy, synced to disk beforehand off the
event loop, is renamed into place and the partition goes on serving from its open log
(nothing is read again); the old directory is deleted, and the controller is told the
new directory (AssignReplicasToDirs).

A truncation of the current log while copying (a follower's, after a leader change)
starts the copy over. A stop in the middle leaves the ``-future`` directory: the next
start resumes the move from it (as Kafka loads future logs), first truncating it where
it diverges from the current replica by their leader epochs, as a follower does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from keeperless.broker.partition_manager import LogDir, PartitionManager
from keeperless.broker.partitions import Partition
from keeperless.storage.dir_failure import LogDirFailure
from keeperless.storage.durable import fsync_dir
from keeperless.storage.partition_dirs import FUTURE_SUFFIX

if TYPE_CHECKING:
    from keeperless.broker.replication_quotas import ReplicationQuota

__all__ = ["LogDirMoves", "Move"]

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
# how long the files a moved replica was served from stay open after the swap
RETIRED_FILES_S = 60.0


def _fsync(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Move:
    partition: Partition
    dest: LogDir
    future: Partition | None = None
    task: asyncio.Task[None] | None = None
    copied: int = 0

    @property
    def lag(self) -> int:
        """Offsets the future replica is behind the current one (Kafka's offset lag)."""
        if self.future is None:
            return self.partition.log.log_end_offset
        return max(self.partition.log.log_end_offset - self.future.log.log_end_offset, 0)


class LogDirMoves:
    def __init__(self, partitions: PartitionManager, quota: ReplicationQuota | None) -> None:
        self.partitions = partitions
        self.quota = quota
        self.moves: dict[tuple[str, int], Move] = {}

    def request(self, topic: str, index: int, dest: LogDir) -> ErrorCode:
        """Move ``topic``-``index`` to ``dest`` (Kafka's alterReplicaLogDirs for one)."""
        key = (topic, index)
        pm = self.partitions
        if not dest.online:
            return ErrorCode.kafka_storage_error
        if key in pm.offline:
            return ErrorCode.kafka_storage_error
        current = self.moves.get(key)
        if current is not None and current.dest is not dest:
            self.cancel(key, "a new destination was asked for")
        p = pm.get(topic, index)
        if p is None:
            # created there when it arrives (Kafka: REPLICA_NOT_AVAILABLE meanwhile)
            pm.preferred[key] = dest
            return ErrorCode.replica_not_available
        if pm.dir_of.get(key) is dest or key in self.moves:
            return ErrorCode.none
        if pm.offline_dirs:
            # as Kafka: no future replica while a directory is offline (it might exist
            # there too)
            return ErrorCode.kafka_storage_error
        move = Move(p, dest)
        self.moves[key] = move
        move.task = asyncio.get_running_loop().create_task(self._run(key, move))
        log.info("[node %d] Moving %s-%d from %s to %s", pm.node_id, topic, index,
                 pm.dir_of[key].path, dest.path)  # fmt: skip
        return ErrorCode.none

    def resume(self) -> None:
        """At start, once the partitions are open: resume each move a stop cut short
        from its future replica."""
        pm = self.partitions
        for key in list(pm.futures):
            p = pm.partitions.get(key)
            if p is None or key in self.moves:
                continue  # not open (its directory is offline): left as found
            found = pm.take_future(p)
            if found is None:
                continue
            dest, path = found
            f: Partition | None
            try:
                f = Partition(p.topic, p.index, p.topic_id, path, p.log.config, _now_ms())
            except (OSError, LogDirFailure) as e:
                log.warning("[node %d] Not resuming the move of %s-%d to %s: %s",
                            pm.node_id, p.topic, p.index, dest.path, e)  # fmt: skip
                pm._discard(path)
                continue
            f.node_id = pm.node_id
            # what the current replica no longer has (truncated after the copy) goes, as
            # a follower truncates to where its leader's epochs say they diverge
            last = f.epochs.latest_epoch
            epoch, end = p.end_offset_for_epoch(last)
            if epoch >= 0 and epoch != last:
                end = min(end, f.end_offset_for_epoch(epoch)[1])
            if epoch < 0 and f.log.log_end_offset > f.log.log_start_offset:
                f.close()  # nothing to compare with: the copy starts over
                pm._discard(path)
                f = None
            elif end < f.log.log_end_offset:
                f.truncate_to(max(end, f.log.log_start_offset))
            move = Move(p, dest, f)
            self.moves[key] = move
            move.task = asyncio.get_running_loop().create_task(self._run(key, move))
            log.info("[node %d] Resuming the move of %s-%d to %s from offset %d",
                     pm.node_id, p.topic, p.index, dest.path,
                     f.log.log_end_offset if f is not None else 0)  # fmt: skip

    def cancel(self, key: tuple[str, int], why: str) -> None:
        move = self.moves.pop(key, None)
        if move is None:
            return
        if move.task is not None:
            move.task.cancel()
        self._drop_future(move)
        log.info("[node %d] Stopped moving %s-%d to %s: %s", self.partitions.node_id,
                 key[0], key[1], move.dest.path, why)  # fmt: skip

    def _drop_future(self, move: Move) -> None:
        f, move.future = move.future, None
        if f is not None:
            with contextlib.suppress(Exception):
                f.log.close()
            with contextlib.suppress(OSError):
                self.partitions._discard(f.directory)

    def close(self) -> None:
        for key in list(self.moves):
            move = self.moves.pop(key)
            if move.task is not None:
                move.task.cancel()
            if move.future is not None:
                with contextlib.suppress(Exception):
                    move.future.log.close()

    async def _run(self, key: tuple[str, int], move: Move) -> None:
        try:
            await self._copy(key, move)
        except (OSError, LogDirFailure) as e:
            log.warning("[node %d] Moving %s-%d to %s failed: %s", self.partitions.node_id,
                        key[0], key[1], move.dest.path, e)  # fmt: skip
            if self.moves.get(key) is move:
                del self.moves[key]
            self._drop_future(move)

    def _still(self, key: tuple[str, int], move: Move) -> bool:
        pm = self.partitions
        return self.moves.get(key) is move and pm.partitions.get(key) is move.partition

    async def _copy(self, key: tuple[str, int], move: Move) -> None:
        pm = self.partitions
        p = move.partition
        generation = p.log.generation
        synced = -1  # the log end of the copy when it was last synced in the background
        while self._still(key, move):
            if move.future is None:
                name = f"{p.topic}-{p.index}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"
                move.future = Partition(
                    p.topic, p.index, p.topic_id, move.dest.path / name, p.log.config,
                    _now_ms(),
                )  # fmt: skip
                move.future.node_id = pm.node_id
                generation = p.log.generation
            f = move.future
            if p.log.generation != generation:
                self._drop_future(move)  # the current log was truncated: start over
                continue
            start = p.log.log_start_offset
            if f.log.log_end_offset < start or f.log.log_start_offset < start:
                f.advance_start(start, _now_ms())
            end = p.log.log_end_offset
            if f.log.log_end_offset >= end:
                if synced < end:
                    # caught up: what was copied goes to disk off the event loop, then
                    # whatever arrived meanwhile is copied; the swap flushes only that
                    synced = end
                    await asyncio.get_running_loop().run_in_executor(
                        None, _fsync, f.log.active_fd()
                    )
                    continue
                self._swap(key, move)
                return
            if self.quota is not None and (wait := self.quota.wait_s(time.monotonic())) > 0:
                await asyncio.sleep(min(wait, 1.0))
                continue
            sl = p.read(f.log.log_end_offset, CHUNK_BYTES, for_replica=True)
            data = sl.read() if sl is not None else b""
            if not data:
                await asyncio.sleep(0.05)
                continue
            if p.log.generation != generation:
                continue
            n = f.append_replica(data, _now_ms())
            move.copied += len(data)
            if self.quota is not None:
                self.quota.record(time.monotonic(), len(data))
            if n == 0:
                await asyncio.sleep(0.05)
            else:
                await asyncio.sleep(0)
        # the partition went away here (deleted, reassigned) or the move was replaced
        if self.moves.get(key) is move:
            del self.moves[key]
        self._drop_future(move)

    def _swap(self, key: tuple[str, int], move: Move) -> None:
        """The future replica has everything: it becomes the replica (synchronous)."""
        pm = self.partitions
        p, f, dest = move.partition, move.future, move.dest
        assert f is not None
        old_dir = p.directory
        f.persist()
        final = dest.path / f"{p.topic}-{p.index}"
        f.directory.rename(final)
        fsync_dir(dest.path)
        old = p.adopt(f, final)
        # a fetch answer may still be sending from the old files: closed later (their
        # directory is deleted now; open files stay readable)
        asyncio.get_running_loop().call_later(RETIRED_FILES_S, old.close)
        pm.dir_of[key].hosted -= 1
        pm.dir_of[key] = dest
        dest.hosted += 1
        pm.assignments[(p.topic_id, p.index)] = dest.dir_id
        move.future = None
        del self.moves[key]
        pm._discard(old_dir)
        log.info("[node %d] Moved %s-%d to %s (%d bytes copied)", pm.node_id, p.topic,
                 p.index, dest.path, move.copied)  # fmt: skip
