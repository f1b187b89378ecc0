"""Broker liveness on the active controller: brokers that miss their session are fenced
and lose their leaderships; a broker that comes back (unfenced) takes the leaderless
partitions it holds in its ISR. The sessions, offsets and the broker-to-partitions index
these rules read are the controller's ClusterControl (cluster_control.py)."""

from __future__ import annotations

import base64
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.cluster_control import BrokerPartitions, ClusterControl
from keeperless.controller.eligible import MinIsr, elect, eligible_after, leader_acceptor
from keeperless.controller.result import Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError
from keeperless.metadata.compiled import raw_constructor
from keeperless.metadata.image import LOST, BrokerRegistration, MetadataImage, PartitionInfo

__all__ = [
    "HeartbeatReply",
    "broker_heartbeat",
    "controlled_shutdown_record",
    "dirs_offline_moves",
    "fence_record",
    "fence_stale_brokers",
    "iter_leaders_after_fence",
    "iter_leaders_after_unfence",
    "leave_isr",
    "register_broker",
    "start_sessions",
    "unfence_record",
]


class ControllerView(Protocol):
    """What these rules read of the quorum controller (quorum_controller.py, which calls
    them): a protocol, so that the two modules do not import each other."""

    node_id: int
    image: MetadataImage
    committed: MetadataImage
    cluster: ClusterControl

    @property
    def directory_assignment(self) -> bool: ...
    def elr_min_isr(self, image: MetadataImage | None = None) -> Callable[[str], int] | None: ...


log = logging.getLogger(__name__)
T = TypeVar("T")

NO_LEADER = -1
_new_change = raw_constructor(r.PartitionChangeRecord)


def _isr_change(
    tid: UUID,
    idx: int,
    leader: int,
    isr: tuple[int, ...],
    elr: tuple[int, ...] | None,
    last_known: tuple[int, ...] | None,
) -> r.PartitionChangeRecord:
    """PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=leader, isr=isr,
    eligible_leader_replicas=elr, last_known_elr=last_known), built without the frozen
    __init__ (3x faster: a fence of a broker in 1M partitions makes a million)."""
    return _new_change(idx, tid, isr, leader, None, None, None, -1, None, elr, last_known)


# Kafka's BrokerRegistrationFencingChange and BrokerRegistrationInControlledShutdownChange
FENCE, UNFENCE = 1, -1
IN_CONTROLLED_SHUTDOWN = 1

# (error, is fenced, should shut down)
HeartbeatReply = tuple[ApiError, bool, bool]


def fence_record(broker_id: int, epoch: int) -> r.BrokerRegistrationChangeRecord:
    """Since metadata.version 3.3-IV2 Kafka fences with BrokerRegistrationChangeRecord
    (FenceBrokerRecord / UnfenceBrokerRecord are still replayed)."""
    return r.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, fenced=FENCE)


def unfence_record(broker_id: int, epoch: int) -> r.BrokerRegistrationChangeRecord:
    return r.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, fenced=UNFENCE)


def controlled_shutdown_record(broker_id: int, epoch: int) -> r.BrokerRegistrationChangeRecord:
    return r.BrokerRegistrationChangeRecord(
        broker_id=broker_id, broker_epoch=epoch, in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN
    )


def start_sessions(c: ControllerView, now_ms: int) -> None:
    """A newly active controller gives every live broker a full session to heartbeat."""
    for b in c.image.brokers.values():
        if not b.fenced:
            c.cluster.last_heartbeat_ms.setdefault(b.broker_id, now_ms)


def _candidates(
    image: MetadataImage, index: Mapping[int, BrokerPartitions] | None, brokers: Iterable[int]
) -> Iterable[tuple[UUID, int, PartitionInfo]]:
    """Partitions that have one of ``brokers`` as a replica: from the controller's index
    when given (work proportional to those partitions, done as they are consumed), else
    by walking the image."""
    if index is None:
        for topic in image.topics.values():
            for idx, p in topic.partitions.items():
                yield topic.topic_id, idx, p
        return
    held = [index[b].by_topic for b in brokers if b in index]
    if not held:
        return
    topics = held[0] if len(held) == 1 else {tid: None for h in held for tid in h}
    for tid in list(topics):
        found = image.topics.get(tid)
        if found is None:
            continue
        parts = found.partitions
        ids = set().union(*(h.get(tid, ()) for h in held))
        for idx in sorted(ids):
            info = parts.get(idx)
            if info is not None:
                yield tid, idx, info


def iter_leaders_after_fence(
    image: MetadataImage,
    broker_id: int | Iterable[int],
    index: Mapping[int, BrokerPartitions] | None = None,
    min_isr: MinIsr | None = None,
) -> Iterator[Any]:
    """Partition changes for fenced brokers: they leave every ISR (a partition keeps its
    last ISR member), and where one led, the next live ISR member leads; with none left
    the partition is offline (leader -1). With eligible leader replicas on (``min_isr``
    given, KIP-966) the last member leaves too, into the ELR, and a leader may come from
    the ELR. Generated lazily from ``image``: a broker of a million partitions yields a
    million changes, appended while they are computed."""
    gone = {broker_id} if isinstance(broker_id, int) else set(broker_id)
    live = {b.broker_id for b in image.brokers.values() if b.active} - gone
    for tid, idx, p in _candidates(image, index, gone):
        yield from leave_isr(image, tid, idx, p, gone, live, min_isr)


def leave_isr(
    image: MetadataImage,
    tid: UUID,
    idx: int,
    p: PartitionInfo,
    gone: set[int],
    live: set[int],
    min_isr: MinIsr | None,
) -> Iterator[Any]:
    """The change of one partition whose replicas on ``gone`` stop (a fenced broker,
    or a failed log directory): see iter_leaders_after_fence."""
    if not gone.intersection(p.isr):
        return
    if min_isr is not None:
        yield from _fence_with_elr(image, tid, idx, p, gone, live, min_isr)
        return
    ok = leader_acceptor(image, live, p)
    isr = tuple(x for x in p.isr if x not in gone) or p.isr
    # ELR off: what an earlier ELR left is cleared by any change (as Kafka)
    stale: dict[str, Any] = (
        {"eligible_leader_replicas": (), "last_known_elr": ()} if p.elr or p.last_known_elr else {}
    )
    if p.leader in gone:
        new = next((x for x in p.replicas if x in isr and ok(x)), NO_LEADER)
        yield r.PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=new, isr=isr,
                                      **stale)  # fmt: skip
    elif isr != p.isr:
        yield r.PartitionChangeRecord(partition_id=idx, topic_id=tid, isr=isr, **stale)


def _fence_with_elr(
    image: MetadataImage,
    tid: UUID,
    idx: int,
    p: PartitionInfo,
    gone: set[int],
    live: set[int],
    min_isr: MinIsr,
) -> Iterator[Any]:
    isr = tuple(x for x in p.isr if x not in gone)
    elr, last_known = eligible_after(p, isr, min_isr(image.topics[tid].name))
    leader = p.leader
    if leader in gone or leader not in isr:
        leader, isr, elr, last_known = elect(
            p.replicas, isr, elr, last_known, leader_acceptor(image, live, p)
        )
    elif last_known:
        last_known = ()
    yield _isr_change(
        tid,
        idx,
        leader if leader != p.leader else -2,
        isr,
        elr if elr != p.elr else None,
        last_known if last_known != p.last_known_elr else None,
    )


def iter_leaders_after_unfence(
    image: MetadataImage, broker_id: int, index: Mapping[int, BrokerPartitions] | None = None
) -> Iterator[Any]:
    """The leaderless partitions with ``broker_id`` in their ISR: it leads them again;
    or, their ISR empty, with it in their ELR (KIP-966): it leads them as their ISR."""
    reg = image.brokers.get(broker_id)
    for tid, idx, p in _candidates(image, index, (broker_id,)):
        if reg is not None and not reg.has_online_dir(p.directory(broker_id)):
            continue  # its replica is on a failed log directory
        if p.leader == NO_LEADER and broker_id in p.isr:
            yield r.PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=broker_id)
        elif (
            p.leader == NO_LEADER
            and not p.isr
            and (broker_id in p.elr or (not p.elr and p.last_known_elr == (broker_id,)))
        ):
            # KIP-966: an eligible replica, or the last known leader with none eligible
            yield r.PartitionChangeRecord(
                partition_id=idx,
                topic_id=tid,
                leader=broker_id,
                isr=(broker_id,),
                eligible_leader_replicas=tuple(b for b in p.elr if b != broker_id),
                last_known_elr=() if p.last_known_elr else None,
            )


def fence_stale_brokers(c: ControllerView, now_ms: int) -> Result[list[int]]:
    stale = [
        b.broker_id
        for b in sorted(c.image.brokers.values(), key=lambda b: b.broker_id)
        if not b.fenced
        and (last := c.cluster.last_heartbeat_ms.get(b.broker_id)) is not None
        and now_ms - last > c.cluster.session_timeout_ms
    ]
    if not stale:
        return Result([], [])
    fences = [fence_record(b, c.image.brokers[b].epoch) for b in stale]
    for b in stale:
        c.cluster.last_heartbeat_ms.pop(b, None)
    moves = iter_leaders_after_fence(
        c.image, stale, c.cluster.partitions_by_broker, c.elr_min_isr()
    )
    return _moves_then(stale, moves, fences)


def register_broker(
    c: ControllerView,
    broker_id: int,
    incarnation_id: UUID,
    endpoints: Any,
    rack: str | None,
    next_offset: int,
    now_ms: int,
    features: Mapping[str, tuple[int, int]] | None = None,
    previous_broker_epoch: int = -1,
    log_dirs: Sequence[UUID] = (),
) -> Result[tuple[ApiError, int]]:
    """A broker registers. A new process of a broker whose previous one is still
    unfenced (it died without a controlled shutdown, and its session ran out but was not
    fenced yet) is answered with a retriable DUPLICATE_BROKER_REGISTRATION while the old
    incarnation is fenced: its leaderships move and it leaves every ISR first, as Kafka's
    handleBrokerUncleanShutdown does. Registered in place, the new process kept the old
    one's leaderships and ISR places: after losing its unflushed tail (a power loss), it
    went on leading with the shorter log and the followers truncated acknowledged
    writes to match it (found by the fault harness, seed 7001)."""
    existing = c.image.brokers.get(broker_id)
    last = c.cluster.last_heartbeat_ms.get(broker_id)
    live = last is not None and now_ms - last < c.cluster.session_timeout_ms
    if existing and existing.incarnation_id != incarnation_id and not live and not existing.fenced:
        log.warning(
            "[node %d] Broker %d registers a new incarnation before its previous one was "
            "fenced: fencing that one first (its leaderships move, it leaves the ISRs)",
            c.node_id,
            broker_id,
        )
        c.cluster.last_heartbeat_ms.pop(broker_id, None)
        moves = iter_leaders_after_fence(
            c.image, broker_id, c.cluster.partitions_by_broker, c.elr_min_isr()
        )
        err = ApiError(
            ErrorCode.duplicate_broker_registration,
            f"The previous incarnation of broker {broker_id} is being fenced",
        )
        return _moves_then((err, -1), moves, [fence_record(broker_id, existing.epoch)])
    res = c.cluster.register_broker(
        c.image, c.directory_assignment, broker_id, incarnation_id, endpoints, rack,
        next_offset, now_ms, features, log_dirs,
    )  # fmt: skip
    if (
        existing is not None
        and previous_broker_epoch != existing.epoch
        and res.response[0].code == ErrorCode.none
        and c.elr_min_isr() is not None
    ):
        # KIP-966: its last stop was not clean (no clean-shutdown file with its epoch):
        # what it had may be gone, so it is no longer an eligible leader
        unclean = list(_out_of_elr(c.image, broker_id, c.cluster.partitions_by_broker))
        if unclean:
            log.info(
                "[node %d] Broker %d registers after an unclean shutdown: no longer an "
                "eligible leader of %d partition(s)",
                c.node_id,
                broker_id,
                len(unclean),
            )
            return Result([*unclean, *res.records], res.response)
    return res


def _out_of_elr(
    image: MetadataImage, broker_id: int, index: Mapping[int, BrokerPartitions] | None
) -> Iterator[Any]:
    """Partition changes taking ``broker_id`` out of every ELR; a leaderless partition
    gets a leader from what remains eligible (or its last known leader) if one is up."""
    live = {b.broker_id for b in image.brokers.values() if b.active} - {broker_id}
    for tid, idx, p in _candidates(image, index, (broker_id,)):
        if broker_id not in p.elr:
            continue
        elr = tuple(b for b in p.elr if b != broker_id)
        leader, isr, last_known = p.leader, p.isr, p.last_known_elr
        if leader == NO_LEADER:
            leader, isr, elr, last_known = elect(p.replicas, isr, elr, last_known,
                                                 leader_acceptor(image, live, p))  # fmt: skip
        yield r.PartitionChangeRecord(
            partition_id=idx,
            topic_id=tid,
            leader=leader if leader != p.leader else -2,
            isr=isr if isr != p.isr else None,
            eligible_leader_replicas=elr,
            last_known_elr=last_known if last_known != p.last_known_elr else None,
        )


def _moves_then(response: T, moves: Iterator[Any], state_changes: list[Any]) -> Result[T]:
    """Kafka's order for a broker's state change: its partitions' changes first
    (generated lazily, appended in chunks: not atomic), the broker's own record last — so a
    failover that commits only part of it leaves the broker in its old state, and the next
    heartbeat or session check finishes the job."""
    return Result([], response, atomic=False, more=itertools.chain(moves, state_changes))


def broker_heartbeat(
    c: ControllerView,
    broker_id: int,
    epoch: int,
    *,
    want_fence: bool,
    want_shut_down: bool,
    caught_up: bool,
    metadata_offset: int,
    now_ms: int,
    offline_dirs: Sequence[UUID] = (),
) -> Result[HeartbeatReply]:
    """Kafka's broker states (BrokerHeartbeatManager): a fenced broker is unfenced once
    caught up; an unfenced broker asking to shut down enters controlled shutdown — its
    leaderships move and it leaves every ISR, then the InControlledShutdown change is
    written — and is told to shut down (and fenced) once that is committed and every
    other active broker has caught up with it. Every multi-record change puts the
    broker's own state change last, so a failover that cuts it short leaves the old state
    and the next heartbeat finishes the job."""
    b = c.image.brokers.get(broker_id)
    if b is None or b.epoch != epoch:
        err = ApiError(
            ErrorCode.stale_broker_epoch, f"Broker {broker_id} epoch {epoch} is not current"
        )
        return Result([], (err, True, False))
    res = _heartbeat(
        c, b, want_fence=want_fence, want_shut_down=want_shut_down, caught_up=caught_up,
        metadata_offset=metadata_offset, now_ms=now_ms,
    )  # fmt: skip
    gone = [d for d in offline_dirs if d in b.log_dirs] if c.directory_assignment else []
    if not gone:
        return res
    # Kafka's handleDirectoriesOffline: the replicas on the failed directories leave
    # their ISRs and leaderships (as if their broker were fenced, for those partitions
    # alone), then the broker's registration lists only its remaining directories
    log.warning(
        "[node %d] Log directories %s of broker %d are offline: their replicas leave "
        "the ISR and their leaderships move; remaining directories: %s",
        c.node_id,
        [_kafka_uuid(d) for d in gone],
        broker_id,
        [_kafka_uuid(d) for d in b.log_dirs if d not in gone],
    )
    moves = dirs_offline_moves(c, broker_id, set(gone))
    change = r.BrokerRegistrationChangeRecord(
        broker_id=broker_id,
        broker_epoch=b.epoch,
        log_dirs=tuple(d for d in b.log_dirs if d not in gone) or (LOST,),
    )
    return Result(
        [],
        res.response,
        atomic=False,
        more=itertools.chain(moves, [change], res.records, res.more),
    )


def _kafka_uuid(u: UUID) -> str:
    """A directory id as Kafka prints it (URL-safe base64, unpadded)."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def dirs_offline_moves(c: ControllerView, broker_id: int, dirs: set[UUID]) -> Iterator[Any]:
    """Changes of the partitions whose replica on ``broker_id`` is in ``dirs``."""
    image = c.image
    live = {b.broker_id for b in image.brokers.values() if b.active} - {broker_id}
    min_isr = c.elr_min_isr()
    for tid, idx, p in _candidates(image, c.cluster.partitions_by_broker, (broker_id,)):
        if p.directory(broker_id) in dirs:
            yield from leave_isr(image, tid, idx, p, {broker_id}, live, min_isr)


def _heartbeat(
    c: ControllerView,
    b: BrokerRegistration,
    *,
    want_fence: bool,
    want_shut_down: bool,
    caught_up: bool,
    metadata_offset: int,
    now_ms: int,
) -> Result[HeartbeatReply]:
    broker_id, epoch = b.broker_id, b.epoch
    ok = ApiError.none()
    c.cluster.last_heartbeat_ms[broker_id] = now_ms
    c.cluster.broker_offsets[broker_id] = metadata_offset
    index = c.cluster.partitions_by_broker
    held = len(index.get(broker_id, ()))
    if b.fenced:
        if want_shut_down:
            c.cluster.last_heartbeat_ms.pop(broker_id, None)  # a clean exit ends the session
            return Result([], (ok, True, True))
        if want_fence or not caught_up:
            return Result([], (ok, True, False))
        log.info(
            "[node %d] Unfencing broker %d: caught up; it leads again the leaderless ones "
            "of its %d partition(s)",
            c.node_id,
            broker_id,
            held,
        )
        moves = iter_leaders_after_unfence(c.image, broker_id, index)
        return _moves_then((ok, False, False), moves, [unfence_record(broker_id, epoch)])
    if want_fence or (want_shut_down and b.in_controlled_shutdown and _shutdown_done(c, b)):
        if want_shut_down:
            log.info(
                "[node %d] Broker %d finished its controlled shutdown: fencing it",
                c.node_id,
                broker_id,
            )
        else:
            log.info("[node %d] Fencing broker %d at its request", c.node_id, broker_id)
        c.cluster.last_heartbeat_ms.pop(broker_id, None)
        moves = iter_leaders_after_fence(c.image, broker_id, index, c.elr_min_isr())
        return _moves_then((ok, True, want_shut_down), moves, [fence_record(broker_id, epoch)])
    if b.in_controlled_shutdown or not want_shut_down:
        return Result([], (ok, False, False))
    log.info(
        "[node %d] Broker %d is in controlled shutdown: its leaderships move and it leaves "
        "the ISR of its %d partition(s)",
        c.node_id,
        broker_id,
        held,
    )
    moves = iter_leaders_after_fence(c.image, broker_id, index, c.elr_min_isr())
    return _moves_then((ok, False, False), moves, [controlled_shutdown_record(broker_id, epoch)])


def _shutdown_done(c: ControllerView, b: BrokerRegistration) -> bool:
    """The controlled-shutdown records are committed and every other active broker has
    applied them (so clients learn the new leaders from any broker)."""
    offset = c.cluster.shutdown_offsets.setdefault(b.broker_id, c.image.offset)  # unknown: now
    if c.committed.offset < offset:
        return False
    return all(
        c.cluster.broker_offsets.get(o.broker_id, -1) >= offset
        for o in c.image.brokers.values()
        if o.active and o.broker_id != b.broker_id
    )
