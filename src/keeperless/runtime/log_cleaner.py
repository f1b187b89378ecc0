"""The broker's log cleaner (Kafka's LogCleaner): every ``log.cleaner.backoff.ms`` it
picks the dirtiest compacted partition hosted here, has a worker process clean it
(storage/cleaner.py: the event loop only chooses and swaps), and swaps the cleaned
segments in. Where each log's dirty section starts is kept in Kafka's
``cleaner-offset-checkpoint``.

A partition is cleanable when cleanup.policy has compact and the dirty share of its
cleanable segments (every segment below the active one and the high watermark, and
older than min.compaction.lag.ms) reaches min.cleanable.dirty.ratio, or when a dirty
segment is older than max.compaction.lag.ms. Each replica cleans its own log, as in
Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from keeperless.storage.cleaner import (
    BYTES_PER_ENTRY,
    CLEANED_SUFFIX,
    CleanJob,
    CleanResult,
    SegmentToClean,
    clean_partition,
    txn_index_path,
)
from keeperless.storage.offset_checkpoint import read_offset_checkpoint, write_offset_checkpoint

__all__ = ["CLEANER_CHECKPOINT", "CleanerSettings", "LogCleaner"]

MAX_WORKER_DEATHS = 2  # a partition whose cleaning killed its worker this often is left

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000


def _worker_init(parent: int) -> None:
    """In a worker: below the broker's priority (its event loop comes first on a busy
    machine), and dying with it: a broker killed (-9) must not leave it cleaning on,
    writing files the next broker process would meet (Linux's parent-death signal)."""
    with contextlib.suppress(OSError):
        os.nice(10)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the worker ends when its pipe to the parent breaks
    if os.getppid() != parent:
        os._exit(0)  # the parent died before the signal was armed


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogCleaner:
    def __init__(self, broker: Any, settings: CleanerSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.node_id = broker.settings.node_id
        self._checkpoint = broker.partitions.log_dir / CLEANER_CHECKPOINT
        self.first_dirty: dict[tuple[str, int], int] = read_offset_checkpoint(self._checkpoint)
        self._pool: ProcessPoolExecutor | None = None
        self.cleanings = 0
        self.bytes_read = 0
        # partitions whose cleaning failed (a corrupt segment, say): skipped until the
        # broker restarts, as Kafka's uncleanable partitions
        self.uncleanable: set[tuple[str, int]] = set()
        self._deaths: dict[tuple[str, int], int] = {}  # worker deaths, by partition

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawned, not forked: a fork of a process with an event loop and threads
            # may inherit a held lock
            self._pool = ProcessPoolExecutor(
                max_workers=self.settings.threads,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init,
                initargs=(os.getpid(),),
            )
        return self._pool

    async def run(self) -> None:
        if not self.settings.enable:
            return
        while True:
            await asyncio.sleep(self.settings.backoff_ms / 1000)
            try:
                for _ in range(len(self.broker.partitions.partitions)):
                    if not await self.clean_once():  # then the next log that is due
                        break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a failed cleaning must not stop the next ones
                log.warning("[node %d] Log cleaning failed: %s", self.node_id, e)

    # -- choosing --------------------------------------------------------------------

    def _job(self, key: tuple[str, int], p: Any, now: int) -> tuple[float, CleanJob] | None:
        cfg = self.broker.topic_config(key[0])
        if "compact" not in cfg.get("cleanup.policy", "delete").replace(" ", "").split(","):
            return None
        min_lag = int(cfg.get("min.compaction.lag.ms", "0"))
        max_lag = int(cfg.get("max.compaction.lag.ms", str(2**63 - 1)))
        segments = []
        ends = []
        # below the last stable offset: what open transactions wrote is not decided yet
        for path, base, size, max_ts, end in p.log.cleanable_segments(p.last_stable_offset):
            if min_lag > 0 and max_ts > now - min_lag:
                break  # too young, and so is what follows
            segments.append(SegmentToClean(path, base, size, max_ts, end))
            ends.append(end)
        if not segments:
            return None
        first_dirty = max(self.first_dirty.get(key, 0), p.log.log_start_offset)
        total = sum(s.size for s in segments)
        dirty_segments = [s for s, end in zip(segments, ends, strict=True) if end > first_dirty]
        dirty = sum(s.size for s in dirty_segments)
        if total == 0 or dirty == 0:
            return None
        ratio = dirty / total
        overdue = max_lag < 2**63 - 1 and any(
            0 <= s.max_timestamp < now - max_lag for s in dirty_segments
        )
        if ratio < float(cfg.get("min.cleanable.dirty.ratio", "0.5")) and not overdue:
            return None
        job = CleanJob(
            f"{key[0]}-{key[1]}",
            tuple(segments),
            first_dirty,
            int(cfg.get("delete.retention.ms", "86400000")),
            max(self.settings.dedupe_buffer_size // max(self.settings.threads, 1), 1)
            // BYTES_PER_ENTRY,
            self.settings.io_max_bytes_per_second / max(self.settings.threads, 1),
            tuple((pid, first, last) for last, pid, first in p.txns.aborted),
            int(cfg.get("segment.bytes", str(p.log.config.segment_bytes))),
            p.log.config.index_interval_bytes,
        )
        return (2.0 if overdue else ratio), job

    def candidates(self, now: int) -> list[tuple[float, tuple[str, int], Any, CleanJob]]:
        out = []
        for key, p in list(self.broker.partitions.partitions.items()):
            if key in self.uncleanable:
                continue
            found = self._job(key, p, now)
            if found is not None:
                out.append((found[0], key, p, found[1]))
        return sorted(out, key=lambda c: -c[0])

    # -- cleaning --------------------------------------------------------------------

    async def clean_once(self) -> bool:
        """Clean the dirtiest log that is due; False if none is."""
        now = _now_ms()
        found = self.candidates(now)
        if not found:
            return False
        ratio, key, p, job = found[0]
        generation = p.log.generation
        plog = p.log
        loop = asyncio.get_running_loop()
        try:
            res: CleanResult = await loop.run_in_executor(
                self._executor(), clean_partition, job, now
            )
        except BrokenProcessPool:
            # a worker died (killed by the OOM killer, say): a new pool next time, not
            # a cleaner stopped until a restart
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
            for name in os.listdir(p.log.dir) if p.log.dir.exists() else ():
                if name.endswith(CLEANED_SUFFIX):
                    (p.log.dir / name).unlink(missing_ok=True)  # (its half-written copy)
            self._deaths[key] = deaths = self._deaths.get(key, 0) + 1
            if deaths >= MAX_WORKER_DEATHS:  # (it kills its worker: not again, as Kafka's)
                self.uncleanable.add(key)
                log.warning("[node %d] A log cleaner worker died while cleaning %s, %d times: "
                            "not cleaning it again until a restart (its log is served as "
                            "it is)", self.node_id, job.name, deaths)  # fmt: skip
            else:
                log.warning("[node %d] A log cleaner worker died while cleaning %s; starting "
                            "another", self.node_id, job.name)  # fmt: skip
            return True
        except (OSError, ValueError) as e:  # a corrupt segment, a read error
            self.uncleanable.add(key)
            log.warning(
                "[node %d] Cleaning %s failed, not cleaning it again until a restart "
                "(its log is served as it is): %s",
                self.node_id,
                job.name,
                e,
            )
            return True
        if self.broker.partitions.partitions.get(key) is not p or p.log is not plog:
            # deleted, re-created or moved to another log directory meanwhile
            for group, cleaned in res.swaps:
                cleaned.unlink(missing_ok=True)
                txn_index_path(group[0].path, CLEANED_SUFFIX).unlink(missing_ok=True)
            return True
        swapped = merged = 0
        for k, (group, cleaned) in enumerate(res.swaps):
            sizes = [(seg.base_offset, seg.size) for seg in group]
            built = res.indexes[k] if k < len(res.indexes) else None
            dropped = res.dropped_aborts[k] if k < len(res.dropped_aborts) else frozenset()
            if p.swap_in_cleaned(sizes, cleaned, _now_ms(), generation, built, dropped):
                swapped += 1
                merged += len(group)
        if swapped == len(res.swaps):
            self.first_dirty[key] = res.map_end
            self._save()
        self.cleanings += 1
        self.bytes_read += res.bytes_read
        mb = 1024 * 1024
        log.info(
            "[node %d] Cleaned %s (dirty ratio %.2f): %d segment(s) into %d, %.1f MB read, "
            "%.1f MB written, %d of %d records kept, in %.2f s (%.1f MB/s)%s",
            self.node_id,
            job.name,
            min(ratio, 1.0),
            merged,
            swapped,
            res.bytes_read / mb,
            res.bytes_written / mb,
            res.records_kept,
            res.records_read,
            res.seconds,
            res.bytes_read / mb / max(res.seconds, 1e-6),
            ""
            if swapped == len(res.swaps)
            else f"; {len(res.swaps) - swapped} group(s) changed meanwhile, not swapped",
        )
        return True

    def _save(self) -> None:
        live = set(self.broker.partitions.partitions)
        write_offset_checkpoint(
            self._checkpoint, {k: v for k, v in self.first_dirty.items() if k in live}
        )

    def close(self) -> None:
        """Stop the workers and wait for the pool to end, so that nothing of it is left
        when the process exits: a pool shut down without waiting raced Python's exit
        (its wakeup pipe closed under the atexit hook: 'Bad file descriptor' at the end
        of a stopped broker's log, found by the fault harness). A cleaning cut short
        leaves a half-written ``.cleaned`` copy, removed at the next start."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
