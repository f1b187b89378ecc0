"""Partition replication between brokers, as Kafka does it.

Followers pull: one fetcher per leader sends Fetch (v12, ``replica_id`` = this broker)
for every partition it follows from that leader, appends the batches as they are (the
leader assigned the offsets), truncates where its log diverged from the leader's (the
leader answers a ``diverging_epoch`` from its leader-epoch cache) and learns the high
watermark.

Leaders track each follower's log end from its fetches, raise the high watermark to what
the whole ISR has (which completes acks=all produces), and ask the controller to change
the ISR (AlterPartition): a follower that caught up to the high watermark joins, one
that has not caught up for ``replica.lag.time.max.ms`` leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.controller_channel import ControllerUnavailableError
from keeperless.broker.partitions import Partition, ReplicationError
from keeperless.metadata.admin import IsrChange
from keeperless.protocol.apis import ApiKey
from keeperless.storage.dir_failure import LogDirFailure

__all__ = ["ReplicaManager", "ReplicationSettings"]

log = logging.getLogger(__name__)

_FETCH_VERSION = 12
_RETRY_ERRORS = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    lag_time_max_ms: int = 30_000
    fetch_wait_max_ms: int = 500
    fetch_max_bytes: int = 1_048_576
    fetch_response_max_bytes: int = 10_485_760
    fetch_backoff_ms: int = 1000


_FETCH_LANE = "replica-fetcher"  # its own connection: fetches long-poll
REFUSAL_BACKOFF_S = 1.0  # before an ISR change refused for the same metadata is tried again


class _Fetcher:
    """Fetches every partition this broker follows from one leader."""

    def __init__(self, manager: ReplicaManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.partitions: set[tuple[str, int]] = set()
        self.wakeup = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())
        self._dest: tuple[str, int] | None = None  # the leader's endpoint last fetched from
        self._warned = False
        self._crashed_at = -1e9

    def stop(self) -> None:
        self.task.cancel()
        self._close()

    def _close(self) -> None:
        if self._dest is not None:
            self.manager.broker.peers.drop(self._dest, _FETCH_LANE)
            self._dest = None

    async def _run(self) -> None:
        broker = self.manager.broker
        settings = self.manager.settings
        while True:
            parts = [
                (k, p)
                for k in sorted(self.partitions)
                if (p := broker.partitions.get(*k)) is not None and p.info is not None
            ]
            if not parts:
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            parts, wait_s = self._unthrottled(parts)
            if not parts:  # every partition waits for the follower throttle
                await self._backoff(min(wait_s, settings.fetch_backoff_ms / 1000))
                continue
            try:
                resp = await self._fetch(parts)
            except OSError as e:  # TimeoutError included
                self._close()
                if not self._warned:
                    log.warning(
                        "[node %d] Cannot fetch from leader %d: %s; retrying every %d ms",
                        broker.node_id,
                        self.leader,
                        e or type(e).__name__,
                        settings.fetch_backoff_ms,
                    )
                    self._warned = True
                await self._backoff()
                continue
            if self._warned:
                log.info("[node %d] Fetching from leader %d again", broker.node_id, self.leader)
                self._warned = False
            try:
                backoff = self._handle(resp)
            except Exception as e:
                # a fetcher that died silently left its partitions out of every ISR for
                # good: say it, with its traceback (once a minute), and fetch again
                now = time.monotonic()
                if now - self._crashed_at >= 60.0:
                    self._crashed_at = now
                    log.exception(
                        "[node %d] Applying a fetch from leader %d failed: %s; fetching again",
                        broker.node_id,
                        self.leader,
                        e,
                    )
                backoff = True
            if backoff:
                await self._backoff()

    async def _backoff(self, seconds: float | None = None) -> None:
        if seconds is None:
            seconds = self.manager.settings.fetch_backoff_ms / 1000
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wakeup.wait(), seconds)
        self.wakeup.clear()

    def _unthrottled(
        self, parts: list[tuple[tuple[str, int], Partition]]
    ) -> tuple[list[tuple[tuple[str, int], Partition]], float]:
        """Kafka's shouldFollowerThrottle: while follower.replication.throttled.rate is
        exceeded, the throttled replicas not in the ISR are left out of the fetch; (what
        to fetch, how long until the rate is back within its limit)."""
        quota = self.manager.broker.replication_quotas.follower
        if not quota.active:
            return parts, 0.0
        now = time.monotonic()
        wait_s = quota.wait_s(now)
        if wait_s <= 0:
            return parts, 0.0
        me = self.manager.broker.node_id
        kept = [
            (k, p)
            for k, p in parts
            if not quota.is_throttled(*k) or (p.info is not None and me in p.info.isr)
        ]
        return kept, wait_s

    async def _fetch(self, parts: Sequence[tuple[tuple[str, int], Partition]]) -> Any:
        broker = self.manager.broker
        settings = self.manager.settings
        reg = broker.image.brokers.get(self.leader)
        found = reg.endpoint(broker.inter_broker_listener) if reg is not None else None
        if found is None:
            raise OSError(
                f"broker {self.leader} has no registered endpoint on "
                f"{broker.inter_broker_listener or 'its first listener'}"
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), p in parts:
            assert p.info is not None
            by_topic.setdefault(topic, []).append(
                {
                    "partition": index,
                    "current_leader_epoch": p.info.leader_epoch,
                    "fetch_offset": p.log.log_end_offset,
                    "last_fetched_epoch": p.epochs.latest_epoch,
                    "log_start_offset": p.log.log_start_offset,
                    "partition_max_bytes": settings.fetch_max_bytes,
                }
            )
        body = {
            "replica_id": broker.node_id,
            "max_wait": settings.fetch_wait_max_ms,
            "min_bytes": 1,
            "max_bytes": settings.fetch_response_max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        if self._dest != found:
            self._close()
            self._dest = found
        return await broker.peers.request(
            found, ApiKey.FETCH, _FETCH_VERSION, body,
            timeout_s=settings.fetch_wait_max_ms / 1000 + 30,
            lane=_FETCH_LANE, client_id=f"replica-fetcher-{broker.node_id}",
        )  # fmt: skip

    def _handle(self, resp: Any) -> bool:
        """Apply a fetch response; True if the fetcher should back off."""
        broker = self.manager.broker
        now = _now_ms()
        backoff = False
        for t in resp.responses:
            for pr in t.partitions:
                p = broker.partitions.get(t.topic, pr.partition_index)
                if p is None or (t.topic, pr.partition_index) not in self.partitions:
                    continue
                ld = broker.partitions.dir_of.get((t.topic, pr.partition_index))
                if ld is not None and not ld.online:
                    continue  # its directory failed earlier in this response
                try:
                    backoff = self._apply(t.topic, p, pr, now) or backoff
                except LogDirFailure:
                    # its log directory went offline (reported where the write failed,
                    # KIP-858): this partition stops here, the others go on
                    continue
        quota = broker.replication_quotas.follower
        if quota.active:
            throttled = sum(
                len(pr.records)
                for t in resp.responses
                for pr in t.partitions
                if pr.records and quota.is_throttled(t.topic, pr.partition_index)
            )
            if throttled:
                quota.record(time.monotonic(), throttled)
        return backoff

    def _apply(self, topic: str, p: Partition, pr: Any, now: int) -> bool:
        """Apply one partition's part of a fetch response; True to back off. A failed
        write to its log directory raises LogDirFailure."""
        broker = self.manager.broker
        code = pr.error_code
        if code == ErrorCode.none:
            div = pr.diverging_epoch
            if div.epoch >= 0 or div.end_offset >= 0:
                # Kafka's rule: where the leader's epoch ends, if ours is that
                # epoch too; if we do not know its epoch, back to where our own
                # epoch before it ends, and ask again from there
                own_epoch, own_end = p.end_offset_for_epoch(div.epoch)
                if own_epoch < 0:
                    target = div.end_offset
                elif own_epoch == div.epoch:
                    target = min(div.end_offset, own_end)
                else:
                    target = own_end
                p.truncate_to(max(target, p.log.log_start_offset))
                return False
            if pr.records:
                try:
                    p.append_replica(bytes(pr.records), now)
                except ReplicationError as e:
                    log.warning("[node %d] %s; fetching again", broker.node_id, e)
                    return True
            hw_before = p.high_watermark
            p.follower_hw(pr.high_watermark)
            if p.high_watermark > hw_before:
                broker.partitions.notify_append((p.topic, p.index))  # KIP-392 readers
            if pr.log_start_offset > p.log.log_start_offset:
                # records deleted at the leader (DeleteRecords): here too
                broker.partitions.advance_start(
                    p, min(pr.log_start_offset, p.log.log_end_offset), now
                )
        elif code == ErrorCode.offset_out_of_range:
            if p.log.log_end_offset < pr.log_start_offset:
                p.reset_to(pr.log_start_offset, now)
            else:
                p.truncate_to(max(pr.high_watermark, p.log.log_start_offset))
        elif code in _RETRY_ERRORS:
            return True  # the leader has not seen the same metadata yet
        else:
            log.warning(
                "[node %d] Fetching %s-%d from leader %d failed: %s",
                broker.node_id,
                topic,
                pr.partition_index,
                self.leader,
                code.name,
            )
            return True
        return False


class ReplicaManager:
    """Fetchers for the partitions this broker follows; ISR upkeep for those it leads."""

    def __init__(self, broker: Broker, settings: ReplicationSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.fetchers: dict[int, _Fetcher] = {}
        self._isr_task: asyncio.Task[None] | None = None
        self._pending: dict[tuple[str, int], IsrChange] = {}
        self._isr_wakeup = asyncio.Event()
        # rate limit of refusal warnings: error names -> (last logged, refusals since)
        self._refusals: dict[tuple[str, ...], tuple[float, int]] = {}
        # partitions whose last ISR change was refused: (leader epoch, partition epoch) it
        # was refused at, and when to try again if the metadata has not moved on meanwhile
        self._refused_at: dict[tuple[str, int], tuple[int, int, float]] = {}
        # fetchers stopped when their partitions moved, still ending (awaited at stop)
        self._retired: set[asyncio.Task[None]] = set()
        self._stopped = False

    def start(self) -> None:
        self._isr_task = asyncio.get_running_loop().create_task(self._isr_loop())
        self.broker.on_image.append(lambda _img: self.update(self.broker.changed_partitions))
        self.broker.partitions.on_follower_fetch = self.maybe_expand_isr
        self.update(list(self.broker.partitions.partitions))

    def stop(self) -> list[asyncio.Task[None]]:
        """Cancel the fetchers and the ISR loop; returns their tasks, to be awaited. No
        fetcher starts after this (metadata keeps arriving while the node stops)."""
        self._stopped = True
        tasks = list(self._retired)
        for f in self.fetchers.values():
            f.stop()
            tasks.append(f.task)
        self.fetchers.clear()
        if self._isr_task is not None:
            self._isr_task.cancel()
            tasks.append(self._isr_task)
        return tasks

    def update(self, keys: Sequence[tuple[str, int]]) -> None:
        """Move the given partitions to the fetcher of their current leader (or stop
        fetching them): work proportional to what changed."""
        if self._stopped:
            return
        touched: set[int] = set()
        for key in keys:
            p = self.broker.partitions.get(*key)
            info = p.info if p is not None else None
            leader = -1
            if info is not None and self.broker.node_id in info.replicas:
                leader = info.leader
            for fid, other in self.fetchers.items():
                if fid != leader and key in other.partitions:
                    other.partitions.discard(key)
                    touched.add(fid)
            if leader in (-1, self.broker.node_id):
                continue
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                fetcher = self.fetchers[leader] = _Fetcher(self, leader)
            fetcher.partitions.add(key)
            touched.add(leader)
        for fid in touched:
            f = self.fetchers[fid]
            if f.partitions:
                f.wakeup.set()
            else:
                self.fetchers.pop(fid).stop()
                self._retired.add(f.task)
                f.task.add_done_callback(self._retired.discard)

    # -- leader side: ISR ----------------------------------------------------------------

    def maybe_expand_isr(self, p: Partition, replica: int) -> None:
        """A follower fetched: propose adding it once it has caught up to the HW."""
        info = p.info
        if info is None or replica in info.isr or p.isr_change_in_flight:
            return
        f = p.followers.get(replica)
        if f is None or f.log_end_offset < p.high_watermark:
            return
        # as Kafka's leader (KIP-841): not a replica the metadata shows fenced or in
        # controlled shutdown, which the controller would refuse (a peer stopping made
        # every leader it shared partitions with propose, and log the refusals)
        reg = self.broker.image.brokers.get(replica)
        if reg is None or not reg.active:
            return
        # it must also have reached the current leader epoch's first offset
        start_of_epoch = next(
            (o for e, o in p.epochs.entries if e == info.leader_epoch), p.log.log_end_offset
        )
        if f.log_end_offset < min(start_of_epoch, p.log.log_end_offset):
            return
        self._propose(p, (*info.isr, replica))

    def _may_propose(self, p: Partition) -> bool:
        """Not again for the same metadata right after a refusal (a leader that has not
        seen its leadership move retried every millisecond, flooding the log)."""
        info = p.info
        refused = self._refused_at.get((p.topic, p.index))
        if info is None or refused is None:
            return True
        if (info.leader_epoch, info.partition_epoch) != refused[:2]:
            del self._refused_at[(p.topic, p.index)]
            return True
        return time.monotonic() >= refused[2]

    def _propose(self, p: Partition, new_isr: tuple[int, ...]) -> None:
        info = p.info
        assert info is not None
        if not self._may_propose(p):
            return
        p.pending_isr = new_isr
        self._pending[(p.topic, p.index)] = IsrChange(
            p.topic_id, p.index, info.leader_epoch, new_isr, info.partition_epoch
        )
        self._isr_wakeup.set()

    def _warn_refused(self, refusals: dict[str, list[str]], results: Any) -> None:
        """One line per AlterPartition answer, whatever the number of partitions, and
        for the same errors at most every 30 s (a peer's controlled shutdown refuses the
        ISR changes of every partition it shares)."""
        now = time.monotonic()
        kinds = tuple(sorted(refusals))
        last, since = self._refusals.get(kinds, (-1e9, 0))
        count = sum(len(v) for v in refusals.values())
        if now - last < 30.0:
            self._refusals[kinds] = (last, since + count)
            return
        self._refusals[kinds] = (now, 0)
        first = next(
            (r.error.message for r in results if r.error.code.name == kinds[0] and r.error.message),
            "",
        )
        parts = "; ".join(
            f"{name} for {len(keys)} partition(s): {', '.join(keys[:5])}"
            + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
            for name, keys in sorted(refusals.items())
        )
        log.warning(
            "[node %d] AlterPartition refused: %s (%s)%s",
            self.broker.node_id,
            parts,
            first,
            f"; {since} more refusals in the last 30 s" if since else "",
        )

    def _shrink(self, now: int) -> None:
        lag = self.settings.lag_time_max_ms
        for p in self.broker.partitions.partitions.values():
            info = p.info
            if info is None or not p.is_leader or p.isr_change_in_flight or len(info.isr) < 2:
                continue
            out = []
            for r in info.isr:
                if r == self.broker.node_id:
                    continue
                f = p.followers.get(r)
                caught_up = f.last_caught_up_ms if f is not None else p.leader_since_ms
                if now - max(caught_up, p.leader_since_ms) > lag:
                    out.append(r)
            if out and self._may_propose(p):
                log.info(
                    "[node %d] Shrinking the ISR of %s-%d from %s: %s not caught up within "
                    "replica.lag.time.max.ms=%d",
                    self.broker.node_id,
                    p.topic,
                    p.index,
                    list(info.isr),
                    out,
                    lag,
                )
                self._propose(p, tuple(x for x in info.isr if x not in out))

    async def _isr_loop(self) -> None:
        interval = max(min(self.settings.lag_time_max_ms / 2000, 5.0), 0.05)
        crashed_at = -1e9
        while not self._stopped:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._isr_wakeup.wait(), interval)
            self._isr_wakeup.clear()
            try:
                await self._isr_round()
            except Exception as e:
                # this loop ending would freeze every ISR this broker leads, silently
                if time.monotonic() - crashed_at >= 60.0:
                    crashed_at = time.monotonic()
                    log.exception("[node %d] ISR upkeep failed: %s", self.broker.node_id, e)
                for key, p in self.broker.partitions.partitions.items():
                    if p.pending_isr is not None and key not in self._pending:
                        p.pending_isr = None  # what was in flight is proposed again

    async def _isr_round(self) -> None:
        self._shrink(_now_ms())
        if self._pending:
            batch, self._pending = self._pending, {}
            try:
                top, results = await self.broker.controller.alter_partition(
                    self.broker.node_id, self.broker.broker_epoch, list(batch.values())
                )
            except ControllerUnavailableError as e:
                log.warning("[node %d] AlterPartition not sent: %s", self.broker.node_id, e)
                top, results = None, []
            failed = set(batch) if top is None or top.code != ErrorCode.none else set()
            by_id = {(r.topic_id, r.partition): r for r in results}
            refusals: dict[str, list[str]] = {}
            for key, ch in batch.items():
                res = by_id.get((ch.topic_id, ch.partition))
                if res is None or res.error.code != ErrorCode.none:
                    failed.add(key)
                    if res is not None and res.error.code not in (
                        ErrorCode.invalid_update_version,
                        ErrorCode.fenced_leader_epoch,
                    ):
                        refusals.setdefault(res.error.code.name, []).append(f"{key[0]}-{key[1]}")
            if refusals:
                self._warn_refused(refusals, results)
            retry_at = time.monotonic() + REFUSAL_BACKOFF_S
            if self.broker.metrics is not None:  # Kafka's IsrShrinks/IsrExpandsPerSec
                for key, ch in batch.items():
                    p = self.broker.partitions.get(*key)
                    if key not in failed and p is not None and p.info is not None:
                        self.broker.metrics.isr_changed(len(ch.new_isr) - len(p.info.isr))
            for key in failed:
                ch = batch[key]
                self._refused_at[key] = (ch.leader_epoch, ch.partition_epoch, retry_at)
                p = self.broker.partitions.get(*key)
                if p is not None:
                    p.pending_isr = None  # retried at the next fetch or check
