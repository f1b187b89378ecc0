"""AssignReplicasToDirs (KIP-858): a broker tells the controller which of its log
directories holds each of its replicas (it chose one for a new replica, or moved one);
the controller writes the directory into the partition. A replica assigned to a
directory the broker no longer lists as online leaves its ISR and leadership, as Kafka's
handleAssignReplicasToDirs does.

Pure: returns records and a response; the image changes when they are replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.eligible import MinIsr, elect, leader_acceptor
from keeperless.controller.fencing import leave_isr
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError, DirAssignment, DirAssignmentResult
from keeperless.metadata.image import LOST, MIGRATING, UNASSIGNED, PartitionInfo

__all__ = ["assign_replicas_to_dirs"]


def assign_replicas_to_dirs(
    c: QuorumController, broker_id: int, broker_epoch: int, assignments: Sequence[DirAssignment]
) -> Result[tuple[ApiError, list[DirAssignmentResult]]]:
    if not c.directory_assignment:
        err = ApiError(ErrorCode.unsupported_version,
                       "Directory assignment is not supported yet.")  # fmt: skip
        return Result([], (err, []))
    reg = c.image.brokers.get(broker_id)
    if reg is None:
        err = ApiError(ErrorCode.broker_id_not_registered,
                       f"Broker ID {broker_id} is not currently registered")  # fmt: skip
        return Result([], (err, []))
    if reg.epoch != broker_epoch:
        err = ApiError(ErrorCode.stale_broker_epoch,
                       f"Expected broker epoch {reg.epoch}, but got {broker_epoch}")  # fmt: skip
        return Result([], (err, []))
    records: list[Any] = []
    results: list[DirAssignmentResult] = []
    live = {b.broker_id for b in c.image.brokers.values() if b.active} - {broker_id}
    min_isr = c.elr_min_isr()
    for dir_id, tid, idx in assignments:
        topic = c.image.topics.get(tid)
        info = topic.partitions.get(idx) if topic is not None else None
        if topic is None:
            results.append((dir_id, tid, idx, ApiError(ErrorCode.unknown_topic_id)))
            continue
        if info is None:
            results.append((dir_id, tid, idx, ApiError(ErrorCode.unknown_topic_or_partition)))
            continue
        if broker_id not in info.replicas:
            results.append((dir_id, tid, idx, ApiError(ErrorCode.not_leader_or_follower)))
            continue
        results.append((dir_id, tid, idx, ApiError.none()))
        if info.directory(broker_id) == dir_id:
            continue
        dirs = tuple(dir_id if b == broker_id else info.directory(b) for b in info.replicas)
        old = info.directory(broker_id)
        if old not in (MIGRATING, UNASSIGNED, LOST) and old not in reg.log_dirs:
            # its directory is gone (a replaced disk): the replica starts empty in the
            # new one and has lost what it held - it may no longer lead or be eligible
            records.append(_lost(c, tid, idx, info, broker_id, dirs, live, min_isr))
            continue
        records.append(r.PartitionChangeRecord(partition_id=idx, topic_id=tid, directories=dirs))
        if not reg.has_online_dir(dir_id):
            # placed on a directory that has failed since: it stops being a replica
            # that may lead or count as in sync
            records.extend(leave_isr(c.image, tid, idx, info, {broker_id}, live, min_isr))
    return Result(records, (ApiError.none(), results), atomic=False)


def _lost(
    c: QuorumController,
    tid: UUID,
    idx: int,
    info: PartitionInfo,
    broker_id: int,
    dirs: tuple[UUID, ...],
    live: set[int],
    min_isr: MinIsr | None,
) -> r.PartitionChangeRecord:
    """The change for a replica whose data was lost with its directory: out of the ELR
    and the last known leader; out of the ISR (without eligible leader replicas, a last
    member stays, as Kafka keeps one); a new leader if it led."""
    isr = tuple(b for b in info.isr if b != broker_id)
    if not isr and min_isr is None:
        isr = info.isr
    elr = tuple(b for b in info.elr if b != broker_id)
    last_known = tuple(b for b in info.last_known_elr if b != broker_id)
    leader = info.leader
    if leader == broker_id or leader not in isr:
        leader, isr, elr, last_known = elect(
            info.replicas, isr, elr, last_known, leader_acceptor(c.image, live, info)
        )
    return r.PartitionChangeRecord(
        partition_id=idx,
        topic_id=tid,
        directories=dirs,
        leader=leader if leader != info.leader else -2,
        isr=isr if isr != info.isr else None,
        eligible_leader_replicas=elr if elr != info.elr else None,
        last_known_elr=last_known if last_known != info.last_known_elr else None,
    )
