"""Share groups (KIP-932) on a broker: ShareGroupHeartbeat and ShareGroupDescribe on the
group's coordinator, ShareFetch and ShareAcknowledge on the partitions' leaders (Kafka's
``SharePartitionManager`` with its share sessions).

The rules live in ``share_group.py`` (membership) and ``share_partition.py`` (which
records are acquired, by whom, how often); this module reads the log, keeps the share
sessions and answers. A leader reads a share-partition's state from the share coordinator
(``persister.py``) before it first serves it, and writes it after every change of a
record's delivery state (acknowledged, released, its lock expired) - an acknowledgement is
answered once the state is written - so a leader that takes over goes on where the last
one wrote. Acquisitions are not written (Kafka's rule): records acquired on a leader that
fails are delivered again, with the delivery count last written.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.share_partition import BatchSpan, ShareAckError, SharePartition
from keeperless.coordinator.share_group import ShareGroup, ShareGroupError
from keeperless.coordinator.share_group_records import StoredShareGroup, share_group_records
from keeperless.group.coordinator import GroupCoordinator
from keeperless.metadata.features import share_groups_enabled
from keeperless.metadata.group_configs import GROUP_RESOURCE
from keeperless.protocol.acl_operations import NOT_REQUESTED, all_operations
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.context import listener_of, session_of
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.protocol.records import CorruptBatchError, iter_batches
from keeperless.security.authz import AclOp, Resource
from keeperless.share.persister import SharePersister
from keeperless.storage.dir_failure import LogDirFailure

__all__ = ["ShareApis", "ShareSettings"]

log = logging.getLogger(__name__)

_DISABLED = (
    "Share groups (KIP-932) are not enabled: the cluster's share.version is 0. Enable "
    "them with kafka-features.sh upgrade --feature share.version=1."
)
_DURATION = re.compile(r"^by_duration:P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?)?$")
# a share session idle this long is closed (its member's records released)
_SESSION_IDLE_S = 60.0
_POLL_S = 0.25
_WARN_EVERY_S = 60.0  # a waiting ShareFetch looks again for released records this often
# what one share fetch reads of a partition at most (at least one whole batch, as Kafka
# reads): records are acquired from it and the rest dropped, so a client's 50 MB
# fetch.max.bytes is not read into memory for its 500 records
_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class ShareSettings:
    """The broker's group.share.* keys (Kafka's names and defaults)."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000

    @classmethod
    def of(cls, config: Any) -> ShareSettings:
        """From a node's config (its group.share.* keys)."""
        return cls(
            config["group.share.heartbeat.interval.ms"],
            config["group.share.session.timeout.ms"],
            config["group.share.record.lock.duration.ms"],
            config["group.share.delivery.count.limit"],
            config["group.share.partition.max.record.locks"],
        )


@dataclass(slots=True)
class _Session:
    """A member's share session with this broker: the partitions it fetches and the epoch
    its next request must carry."""

    partitions: dict[tuple[uuid.UUID, int], None] = field(default_factory=dict)
    epoch: int = 1
    used: float = 0.0


def _not_here(err: ErrorCode, gid: str) -> str:
    if err == ErrorCode.not_coordinator:
        return f"This broker is not the coordinator of group {gid}"
    return f"The group coordinator is not available ({err.name})"


def _td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


class ShareApis:
    def __init__(self, coordinator: GroupCoordinator, settings: ShareSettings) -> None:
        self.gc = coordinator
        self.broker = coordinator.broker
        self.settings = settings
        self.groups: dict[str, ShareGroup] = coordinator.share_groups
        # (group, topic id, partition) -> its share-partition, on the partition's leader
        self.partitions: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
        # the leader epoch each was read in, and its state epoch at the share coordinator
        self._epochs: dict[tuple[str, uuid.UUID, int], tuple[int, int]] = {}
        self._loading: dict[tuple[str, uuid.UUID, int], asyncio.Future[None]] = {}
        self._writing: dict[tuple[str, uuid.UUID, int], asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pending: dict[tuple[str, uuid.UUID, int], int] = {}  # writes not yet begun
        self._warned: dict[tuple[str, uuid.UUID, int], float] = {}
        self.persister: SharePersister | None = None  # None: state in memory only
        self.sessions: dict[tuple[str, str], _Session] = {}  # (group, member) -> session

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.SHARE_GROUP_HEARTBEAT: self.heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: self.describe,
            ApiKey.SHARE_FETCH: self.fetch,
            ApiKey.SHARE_ACKNOWLEDGE: self.acknowledge,
        }

    def _other_kind(self, gid: str) -> bool:
        """A classic or consumer group has this id (members, or committed offsets)."""
        return gid in self.gc.groups or gid in self.gc.consumer_groups or gid in self.gc.offsets

    def _enabled(self) -> bool:
        return share_groups_enabled(self.broker.image.features)

    def _group_config(self, group_id: str, key: str, broker_default: int) -> int:
        own = self.broker.image.configs.get((GROUP_RESOURCE, group_id), {}).get(key)
        return int(own) if own is not None else broker_default

    def _group_str(self, group_id: str, key: str, default: str) -> str:
        own = self.broker.image.configs.get((GROUP_RESOURCE, group_id), {}).get(key)
        return own if own is not None else default

    # -- the coordinator: membership ----------------------------------------------------

    async def heartbeat(self, header: RequestHeader, req: Any) -> Any:
        gid = req.group_id
        interval = self._group_config(
            gid, "share.heartbeat.interval.ms", self.settings.heartbeat_interval_ms
        )
        cls = response_class(ApiKey.SHARE_GROUP_HEARTBEAT, header.api_version)
        try:
            if not self._enabled():
                raise ShareGroupError(ErrorCode.unsupported_version, _DISABLED)
            if not gid:
                raise ShareGroupError(ErrorCode.invalid_group_id, "GroupId can't be empty.")
            if not req.member_id:
                raise ShareGroupError(ErrorCode.invalid_request, "MemberId can't be empty.")
            err = self.gc._group_error(gid)
            if err is not None:
                raise ShareGroupError(err, _not_here(err, gid))
            if gid not in self.groups and self._other_kind(gid):  # Kafka: any other group
                raise ShareGroupError(
                    ErrorCode.group_id_not_found, f"Group {gid} is not a share group."
                )
            g = self.groups.get(gid)
            if g is None:
                g = self.groups[gid] = ShareGroup(gid)
            session = session_of(header)
            m, assignment = g.heartbeat(
                req.member_id,
                req.member_epoch,
                req.subscribed_topic_names,
                self.gc.topics_view(),
                time.monotonic(),
                req.rack_id,
                (header.client_id or "", "/" + (session.host if session else "127.0.0.1")),
            )
            g.remember_topics()
            stored = await self._store_group(g)
            if stored is not None:
                raise ShareGroupError(stored, f"The share group {gid} could not be stored")
        except ShareGroupError as e:
            return build(cls, {"throttle_time": 0, "error_code": e.code,
                               "error_message": str(e), "member_id": None, "member_epoch": -1,
                               "heartbeat_interval": interval, "assignment": None})  # fmt: skip
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "member_id": req.member_id,
                "member_epoch": -1 if m is None else m.epoch,
                "heartbeat_interval": interval,
                "assignment": None
                if assignment is None
                else {
                    "topic_partitions": [
                        {"topic_id": t, "partitions": list(ps)}
                        for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))
                    ]
                },
            },
        )

    async def describe(self, header: RequestHeader, req: Any) -> Any:
        names = {t.topic_id: t.name for t in self.broker.image.topics.values()}
        out = []
        for gid in req.group_ids:
            err = self.gc._group_error(gid)
            g = self.groups.get(gid)
            code, message = ErrorCode.none, None
            if not self._enabled():
                code, message = ErrorCode.unsupported_version, _DISABLED
            elif err is not None:
                code, message = err, _not_here(err, gid)
            elif g is None:
                code = ErrorCode.group_id_not_found
                message = (
                    f"Group {gid} is not a share group."
                    if self._other_kind(gid)
                    else f"Group {gid} not found."
                )
            ops = all_operations("group") if req.include_authorized_operations else NOT_REQUESTED
            out.append({
                "error_code": code, "error_message": message, "group_id": gid,
                "group_state": "Dead" if g is None else g.state.value,
                "group_epoch": -1 if g is None else g.epoch,
                "assignment_epoch": -1 if g is None else g.epoch,
                "assignor_name": "simple", "authorized_operations": ops,
                "members": [] if g is None or code != ErrorCode.none else [
                    {"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                     "client_id": m.client_id, "client_host": m.client_host,
                     "subscribed_topic_names": list(m.subscribed),
                     "assignment": {"topic_partitions": [
                         {"topic_id": t, "topic_name": names.get(t, ""), "partitions": list(ps)}
                         for t, ps in m.assignment.items()]}}
                    for m in g.members.values()
                ],
            })  # fmt: skip
        cls = response_class(ApiKey.SHARE_GROUP_DESCRIBE, header.api_version)
        return build(cls, {"throttle_time": 0, "groups": out})

    # -- the partitions' leader: share sessions, fetch and acknowledge ------------------

    def _release(self, gid: str, member_id: str, s: _Session) -> None:
        released = 0
        for tid, idx in s.partitions:
            sp = self.partitions.get((gid, tid, idx))
            if sp is not None and sp.release_member(member_id):
                released += 1
                self._persist_later((gid, tid, idx))
        if released:
            log.info("[node %d] Share session of member %s of group %s closed: released its "
                     "records of %d partition(s)", self.broker.node_id, member_id, gid,
                     released)  # fmt: skip

    def _open(
        self, gid: str, mid: str, epoch: int, fetch: bool
    ) -> tuple[_Session | None, ErrorCode, str | None]:
        """The share session a request of ``epoch`` continues, opens (0, ShareFetch only)
        or closes (-1): (session, error, message)."""
        key = (gid, mid)
        s = self.sessions.get(key)
        if epoch == 0:
            if not fetch:
                return (
                    None,
                    ErrorCode.invalid_share_session_epoch,
                    ("ShareAcknowledge cannot open a share session (epoch 0)"),
                )
            if s is not None:
                self._release(gid, mid, s)
            self._forget_idle(gid)
            s = self.sessions[key] = _Session()
            return s, ErrorCode.none, None
        if s is None:
            return (
                None,
                ErrorCode.share_session_not_found,
                (f"No share session for member {mid} of group {gid} on this broker"),
            )
        if epoch != -1 and epoch != s.epoch:
            del self.sessions[key]
            self._release(gid, mid, s)
            return (
                None,
                ErrorCode.invalid_share_session_epoch,
                (f"Share session epoch {epoch} is not the expected {s.epoch}"),
            )
        if epoch != -1:
            s.epoch += 1
        return s, ErrorCode.none, None

    def _leader_error(self, tid: uuid.UUID, idx: int) -> tuple[ErrorCode, Any] | None:
        """Why this broker cannot serve (tid, idx) to a share group, with the partition
        (or None when it can)."""
        t = self.broker.image.topics.get(tid)
        if t is None:
            return ErrorCode.unknown_topic_id, None
        info = t.partitions.get(idx)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, None
        p = self.broker.partitions.get(t.name, idx)
        if info.leader != self.broker.node_id or p is None:
            return ErrorCode.not_leader_or_follower, None
        return None

    def _topic_denied(self, header: RequestHeader, tid: uuid.UUID) -> bool:
        t = self.broker.image.topics[tid]
        return self.broker.authz.check(header, AclOp.READ, Resource.TOPIC, t.name) is not None

    def _current_leader(self, tid: uuid.UUID, idx: int) -> dict[str, int]:
        t = self.broker.image.topics.get(tid)
        info = t.partitions.get(idx) if t is not None else None
        if info is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": info.leader, "leader_epoch": info.leader_epoch}

    def _reset_offset(self, gid: str, p: Any) -> tuple[int, str]:
        """Where a share group starts on a partition it has no state for."""
        reset = self._group_str(gid, "share.auto.offset.reset", "latest")
        start = p.high_watermark
        if reset == "earliest":
            start = p.log.log_start_offset
        elif (m := _DURATION.match(reset)) is not None:
            d, h, mi, sec = (float(x) if x else 0.0 for x in m.groups())
            ago_ms = int(((d * 24 + h) * 60 + mi) * 60_000 + sec * 1000)
            found = p.log.offset_for_timestamp(int(time.time() * 1000) - ago_ms)
            start = found[0] if found is not None else p.high_watermark
        return start, reset

    def _loaded(self, key: tuple[str, uuid.UUID, int]) -> SharePartition | None:
        """The share-partition if it was read in the partition's current leader epoch."""
        sp = self.partitions.get(key)
        t = self.broker.image.topics.get(key[1])
        info = t.partitions.get(key[2]) if t is not None else None
        if sp is None or info is None or self._epochs.get(key, (-1, 0))[0] != info.leader_epoch:
            return None
        return sp

    async def _load(self, gid: str, tid: uuid.UUID, idx: int) -> None:
        """Read the share-partition's state before serving it in this leader epoch (one
        read at a time per share-partition); on failure it stays unloaded and the fetch
        gets no records of it (the next one tries again)."""
        key = (gid, tid, idx)
        if self._leader_error(tid, idx) is not None or self._loaded(key) is not None:
            return
        running = self._loading.get(key)
        if running is not None:
            await asyncio.shield(running)
            return
        fut = self._loading[key] = asyncio.get_running_loop().create_future()
        try:
            await self._read_state(key)
        finally:
            del self._loading[key]
            fut.set_result(None)

    async def _read_state(self, key: tuple[str, uuid.UUID, int]) -> None:
        gid, tid, idx = key
        t = self.broker.image.topics[tid]
        p = self.broker.partitions.get(t.name, idx)
        assert p is not None
        assert p.info is not None
        epoch = p.info.leader_epoch
        limit, locks = self.settings.delivery_count_limit, self.settings.partition_max_record_locks
        self.partitions.pop(key, None)
        if self.persister is None:
            start, reset = self._reset_offset(gid, p)
            self.partitions[key] = SharePartition(start, limit, locks)
            self._epochs[key] = (epoch, 0)
            return
        got = await self.persister.read(gid, tid, idx, epoch)
        if got.error != ErrorCode.none:
            if self._warn_now(key):
                log.warning("[node %d] Share group %s: the state of %s-%d could not be read: "
                            "%s (%s); its records are not delivered until it can be",
                            self.broker.node_id, gid, t.name, idx, got.error.name,
                            got.message)  # fmt: skip
            return
        if p.info is None or p.info.leader_epoch != epoch or not p.is_leader:
            return  # led elsewhere meanwhile
        if got.start_offset >= 0:
            sp = SharePartition.restore(got.start_offset, got.batches, limit, locks)
            self.partitions[key], self._epochs[key] = sp, (epoch, got.state_epoch)
            log.info("[node %d] Share group %s resumes %s-%d at offset %d (%d record(s) in "
                     "flight)", self.broker.node_id, gid, t.name, idx, sp.start,
                     len(sp.records))  # fmt: skip
        else:
            start, reset = self._reset_offset(gid, p)
            self.partitions[key] = SharePartition(start, limit, locks)
            self._epochs[key] = (epoch, got.state_epoch)
            err, _ = await self._persist(key)
            if err != ErrorCode.none:
                return
            log.info("[node %d] Share group %s starts %s-%d at offset %d (%s)",
                     self.broker.node_id, gid, t.name, idx, start, reset)  # fmt: skip
        sp_now = self.partitions.get(key)
        if sp_now is not None:
            sp_now.move_start(p.log.log_start_offset)

    async def _persist(self, key: tuple[str, uuid.UUID, int]) -> tuple[ErrorCode, str | None]:
        """Write the share-partition's state to the share coordinator, one write at a time
        (each the latest state); a failed write drops it, to be read again."""
        if self.persister is None:
            return ErrorCode.none, None
        lock = self._writing.setdefault(key, asyncio.Lock())
        async with lock:
            sp = self.partitions.get(key)
            if sp is None or key not in self._epochs:
                return ErrorCode.not_leader_or_follower, "The share-partition moved"
            epoch, state_epoch = self._epochs[key]
            err, message = await self.persister.write(
                key[0], key[1], key[2], state_epoch, epoch, sp.start, sp.state_batches()
            )
            if err != ErrorCode.none:
                if self.partitions.get(key) is sp:
                    del self.partitions[key]
                if self._warn_now(key):
                    log.warning("[node %d] Share group %s: the state of %s-%d could not be "
                                "written: %s (%s)", self.broker.node_id, key[0], key[1],
                                key[2], err.name, message)  # fmt: skip
            return err, message

    async def _store_group(self, g: ShareGroup) -> ErrorCode | None:
        """Store the group (ShareGroupMetadata) and the topics it reads
        (ShareGroupStatePartitionMetadata) in __consumer_offsets when they are new, so a
        coordinator that takes over knows the group and where its state is."""
        topics = frozenset(g.topics_read)
        if self.gc.share_stored.get(g.group_id) == topics:
            return None
        initialized = {}
        for name in sorted(topics):
            t = self.broker.image.topic(name)
            if t is not None:
                initialized[name] = (t.topic_id, tuple(sorted(t.partitions)))
        records = share_group_records(g.group_id, StoredShareGroup(g.epoch, initialized))
        err = await self.gc.store(g.group_id, list(records.items()))
        if err is None:
            self.gc.share_stored[g.group_id] = topics
        return err

    def _warn_now(self, key: tuple[str, uuid.UUID, int]) -> bool:
        """One warning a minute per share-partition (a coordinator that stays away would
        otherwise log at every fetch)."""
        now = time.monotonic()
        if now - self._warned.get(key, -_WARN_EVERY_S) < _WARN_EVERY_S:
            return False
        self._warned[key] = now
        return True

    def _forget_idle(self, gid: str) -> None:
        """A share session opens: the group's share-partitions are read again from the
        share coordinator before they are served (an admin may have reset or deleted their
        state while the group had no member), unless a record is still acquired or a write
        is in flight. At every opening, not only the group's first here: a member that
        left the group without closing its share session (killed) keeps the session until
        it idles out, and a reset made meanwhile was served from the stale state, then
        again from the reset one once the next write was fenced (each record twice)."""
        for key in [k for k in self.partitions if k[0] == gid]:
            sp = self.partitions[key]
            writing = self._writing.get(key)
            busy = key in self._pending or (writing is not None and writing.locked())
            if sp.counts()["acquired"] == 0 and not busy:
                del self.partitions[key]
                self._epochs.pop(key, None)

    def _persist_later(self, key: tuple[str, uuid.UUID, int]) -> None:
        t = self.broker.image.topics.get(key[1])
        if t is not None:  # records released or acknowledged: share fetches waiting look
            self.broker.partitions.notify_append((t.name, key[2]))
        if self.persister is None:
            return
        task = asyncio.get_running_loop().create_task(self._persist(key))
        self._tasks.add(task)
        self._pending[key] = self._pending.get(key, 0) + 1

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            self._pending[key] -= 1
            if not self._pending[key]:
                del self._pending[key]

        task.add_done_callback(done)

    def _leased_error(self, tid: uuid.UUID, idx: int) -> ErrorCode | None:
        """``_leader_error``, and NOT_LEADER_OR_FOLLOWER while this broker may have been
        fenced without knowing it (paused past its session, until a later heartbeat is
        answered): records it acquired then would be counted by nobody (the fault
        harness, seed 8819: a paused leader, resumed, delivered records with count 2
        that the new leader then delivered with count 1)."""
        refused = self._leader_error(tid, idx)
        if refused is not None:
            return refused[0]
        if self.broker.may_be_stale(time.monotonic()):
            return ErrorCode.not_leader_or_follower
        return None

    def _ack(
        self, header: RequestHeader, gid: str, mid: str, tid: uuid.UUID, idx: int,
        batches: Sequence[Any],
    ) -> tuple[ErrorCode, str | None]:  # fmt: skip
        refused = self._leased_error(tid, idx)
        if refused is not None:
            return refused, None
        if self._topic_denied(header, tid):
            return ErrorCode.topic_authorization_failed, None
        sp = self._loaded((gid, tid, idx))
        if sp is None:
            return ErrorCode.invalid_record_state, (
                f"Share group {gid} has no records in flight on this partition"
            )
        try:
            sp.acknowledge(
                mid, [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]
            )
        except ShareAckError as e:
            return e.code, str(e)
        return ErrorCode.none, None

    def _acquire(
        self, header: RequestHeader, gid: str, mid: str, tid: uuid.UUID, idx: int,
        max_records: int, budget: int,
    ) -> tuple[ErrorCode, bytes, list[tuple[int, int, int]]]:  # fmt: skip
        refused = self._leased_error(tid, idx)
        if refused is not None:
            return refused, b"", []
        if self._topic_denied(header, tid):
            return ErrorCode.topic_authorization_failed, b"", []
        t = self.broker.image.topics[tid]
        p = self.broker.partitions.get(t.name, idx)
        assert p is not None
        sp = self._loaded((gid, tid, idx))
        if sp is None:  # its state could not be read: nothing now, the next fetch retries
            return ErrorCode.none, b"", []
        sp.move_start(p.log.log_start_offset)
        pos = sp.fetch_offset()
        if pos is None or max_records <= 0 or budget <= 0:
            return ErrorCode.none, b"", []
        committed = self._group_str(gid, "share.isolation.level", "read_uncommitted") == (
            "read_committed"
        )
        try:
            sl = p.read(pos, min(budget, _READ_BYTES), False, committed)
        except LogDirFailure:
            return ErrorCode.kafka_storage_error, b"", []
        if sl is None:
            return ErrorCode.none, b"", []
        data = sl.read()
        spans: list[tuple[int, int, BatchSpan]] = []  # (position, end, span)
        try:
            for at, h in iter_batches(data, verify_crc=False):
                skip = h.is_control or (
                    committed
                    and h.is_transactional
                    and p.txns.aborted_batch(h.producer_id, h.base_offset)
                )
                spans.append((at, at + h.size, BatchSpan(h.base_offset, h.last_offset, skip)))
        except CorruptBatchError:
            pass  # a read ends inside a batch: the whole batches before it
        ranges = sp.acquire(
            mid, [s for _, _, s in spans], max_records, int(time.time() * 1000),
            self._group_config(gid, "share.record.lock.duration.ms",
                               self.settings.record_lock_duration_ms),
        )  # fmt: skip
        if not ranges:
            return ErrorCode.none, b"", []
        lo, hi = ranges[0][0], ranges[-1][1]
        used = [(a, b) for a, b, s in spans if s.last >= lo and s.base <= hi]
        return ErrorCode.none, data[used[0][0] : used[-1][1]], ranges

    def _endpoints(self, header: RequestHeader, nodes: set[int]) -> list[dict[str, Any]]:
        out = []
        for n in sorted(nodes):
            b = self.broker.image.brokers.get(n)
            found = b.endpoint(listener_of(header)) if b is not None and not b.fenced else None
            if b is not None and found is not None:
                out.append({"node_id": n, "host": found[0], "port": found[1], "rack": b.rack})
        return out

    def _refusal(self, header: RequestHeader, code: ErrorCode, message: str | None) -> Any:
        cls = response_class(header.api_key, header.api_version)
        body: dict[str, Any] = {"throttle_time": 0, "error_code": code,
                                "error_message": message, "responses": [],
                                "node_endpoints": []}  # fmt: skip
        if header.api_key == ApiKey.SHARE_FETCH:
            body["acquisition_lock_timeout"] = 0
        return build(cls, body)

    async def fetch(self, header: RequestHeader, req: Any) -> Any:
        if not self._enabled():
            return self._refusal(header, ErrorCode.unsupported_version, _DISABLED)
        gid, mid, epoch = req.group_id, req.member_id, req.share_session_epoch
        if not gid or not mid:
            return self._refusal(header, ErrorCode.invalid_request,
                                 "ShareFetch needs a group id and a member id")  # fmt: skip
        acks = {(t.topic_id, p.partition_index): p.acknowledgement_batches
                for t in req.topics for p in t.partitions if p.acknowledgement_batches}  # fmt: skip
        if epoch == 0 and acks:
            return self._refusal(header, ErrorCode.invalid_request,
                                 "A share session's first fetch cannot acknowledge")  # fmt: skip
        if epoch == -1 and req.forgotten_topics_data:
            return self._refusal(
                header, ErrorCode.invalid_request,
                "A share session's final fetch cannot forget partitions",
            )  # fmt: skip
        s, err, message = self._open(gid, mid, epoch, fetch=True)
        if s is None:
            return self._refusal(header, err, message)
        s.used = time.monotonic()
        for t in req.topics:
            for p in t.partitions:
                s.partitions[(t.topic_id, p.partition_index)] = None
        ack_results = {k: self._ack(header, gid, mid, k[0], k[1], b) for k, b in acks.items()}
        await self._persist_acks(gid, ack_results)
        for t in req.forgotten_topics_data:
            for idx in t.partitions:
                s.partitions.pop((t.topic_id, idx), None)
                sp = self.partitions.get((gid, t.topic_id, idx))
                if sp is not None and sp.release_member(mid):
                    self._persist_later((gid, t.topic_id, idx))
        lock_ms = self._group_config(
            gid, "share.record.lock.duration.ms", self.settings.record_lock_duration_ms
        )
        got: dict[tuple[uuid.UUID, int], tuple[ErrorCode, bytes, list[tuple[int, int, int]]]]
        got = {}
        if epoch == -1:
            del self.sessions[(gid, mid)]
            self._release(gid, mid, s)
        else:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + req.max_wait.total_seconds()
            max_records = req.max_records if req.max_records > 0 else 500
            budget = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
            for tid, idx in list(s.partitions):
                await self._load(gid, tid, idx)
            while True:
                for key in list(s.partitions):
                    code, data, ranges = self._acquire(header, gid, mid, key[0], key[1],
                                                       max_records, budget)  # fmt: skip
                    max_records -= sum(b - a + 1 for a, b, _ in ranges)
                    budget -= len(data)
                    if code != ErrorCode.none or ranges or key not in got:
                        got[key] = (code, data, ranges)
                acquired = any(r for _, _, r in got.values())
                failed = any(c != ErrorCode.none for c, _, _ in got.values())
                remaining = deadline - loop.time()
                if acquired or failed or remaining <= 0 or (gid, mid) not in self.sessions:
                    break
                topics = self.broker.image.topics
                keys = [(topics[t].name, i) for t, i in s.partitions if t in topics]
                await self.broker.partitions.wait_for_data(min(remaining, _POLL_S), keys)
        leaders: set[int] = set()
        by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for key in dict.fromkeys([*got, *ack_results]):
            code, data, ranges = got.get(key, (ErrorCode.none, b"", []))
            ack_code, ack_message = ack_results.get(key, (ErrorCode.none, None))
            current = self._current_leader(*key)
            if code == ErrorCode.not_leader_or_follower and current["leader_id"] >= 0:
                leaders.add(current["leader_id"])
            by_topic.setdefault(key[0], []).append({
                "partition_index": key[1], "error_code": code, "error_message": None,
                "acknowledge_error_code": ack_code, "acknowledge_error_message": ack_message,
                "current_leader": current, "records": data,
                "acquired_records": [{"first_offset": a, "last_offset": b, "delivery_count": n}
                                     for a, b, n in ranges],
            })  # fmt: skip
        cls = response_class(ApiKey.SHARE_FETCH, header.api_version)
        return build(cls, {
            "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
            "acquisition_lock_timeout": _td(lock_ms),
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
            "node_endpoints": self._endpoints(header, leaders),
        })  # fmt: skip

    async def acknowledge(self, header: RequestHeader, req: Any) -> Any:
        if not self._enabled():
            return self._refusal(header, ErrorCode.unsupported_version, _DISABLED)
        gid, mid, epoch = req.group_id, req.member_id, req.share_session_epoch
        if not gid or not mid:
            return self._refusal(header, ErrorCode.invalid_request,
                                 "ShareAcknowledge needs a group id and a member id")  # fmt: skip
        s, err, message = self._open(gid, mid, epoch, fetch=False)
        if s is None:
            return self._refusal(header, err, message)
        s.used = time.monotonic()
        leaders: set[int] = set()
        out = []
        results = {(t.topic_id, p.partition_index): self._ack(
            header, gid, mid, t.topic_id, p.partition_index, p.acknowledgement_batches)
            for t in req.topics for p in t.partitions}  # fmt: skip
        await self._persist_acks(gid, results)
        for t in req.topics:
            parts = []
            for p in t.partitions:
                code, msg = results[(t.topic_id, p.partition_index)]
                current = self._current_leader(t.topic_id, p.partition_index)
                if code == ErrorCode.not_leader_or_follower and current["leader_id"] >= 0:
                    leaders.add(current["leader_id"])
                parts.append({"partition_index": p.partition_index, "error_code": code,
                              "error_message": msg, "current_leader": current})  # fmt: skip
            out.append({"topic_id": t.topic_id, "partitions": parts})
        if epoch == -1:
            del self.sessions[(gid, mid)]
            self._release(gid, mid, s)
        cls = response_class(ApiKey.SHARE_ACKNOWLEDGE, header.api_version)
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none,
                           "error_message": None, "responses": out,
                           "node_endpoints": self._endpoints(header, leaders)})  # fmt: skip

    async def _persist_acks(
        self, gid: str, results: dict[tuple[uuid.UUID, int], tuple[ErrorCode, str | None]]
    ) -> None:
        """Write the state of every share-partition acknowledged: an acknowledgement is
        answered once written (its error, if the write failed)."""
        done = [k for k, (code, _) in results.items() if code == ErrorCode.none]
        written = await asyncio.gather(*(self._persist((gid, *k)) for k in done))
        for k, (code, message) in zip(done, written, strict=True):
            if code != ErrorCode.none:
                results[k] = (code, message)

    # -- timers -------------------------------------------------------------------------

    def tick(self) -> None:
        """Expire acquisition locks, idle share sessions, silent members, and the groups
        and share-partitions this broker no longer serves."""
        now_ms = int(time.time() * 1000)
        expired = 0
        for (gid, tid, idx), sp in list(self.partitions.items()):
            if self._leader_error(tid, idx) is not None:
                del self.partitions[(gid, tid, idx)]  # led elsewhere now
                self._epochs.pop((gid, tid, idx), None)
                continue
            n = sp.expire(now_ms)
            if n:
                expired += n
                self._persist_later((gid, tid, idx))
        if expired:
            log.info("[node %d] %d share group record lock(s) expired: the records are "
                     "available again", self.broker.node_id, expired)  # fmt: skip
        now = time.monotonic()
        for key, s in list(self.sessions.items()):
            if now - s.used > _SESSION_IDLE_S:
                del self.sessions[key]
                self._release(key[0], key[1], s)
        for gid, g in list(self.groups.items()):
            if self.gc._group_error(gid) is not None:
                del self.groups[gid]  # coordinated elsewhere now
                continue
            timeout_s = (
                self._group_config(
                    gid, "share.session.timeout.ms", self.settings.session_timeout_ms
                )
                / 1000
            )
            for mid in g.expire(now, timeout_s):
                log.info("[node %d] Share group %s: member %s left (no heartbeat in %.0f s)",
                         self.broker.node_id, gid, mid, timeout_s)  # fmt: skip
