"""Partition reassignment (KIP-455) as Kafka's controller does it
(ReplicationControlManager, PartitionReassignmentReplicas, PartitionChangeBuilder):

1. AlterPartitionReassignments writes a PartitionChangeRecord whose replicas are the
   target followed by the replicas being removed, with ``addingReplicas`` and
   ``removingReplicas`` set; the brokers start the new replicas as followers.
2. When the ISR holds every target replica (an AlterPartition from the leader as they
   catch up), or at once when it already does, the same change completes it: replicas
   become the target, the ISR loses the removed replicas, a leader being removed hands
   over to the first target replica in the ISR, and the adding/removing sets are
   cleared. The removed replicas' brokers stop and delete their copies.
3. A cancellation (null replicas) reverts to the original replicas (those not being
   added); a new target replaces one in progress, and every replica not of the
   original set stays in the adding set (computed against the current replicas alone,
   resubmitting the same target - as `kafka-reassign-partitions.sh --additional
   --throttle` does - once emptied it, and a cancellation then kept every replica).

Everything is in the metadata log, so a reassignment survives a controller failover."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.eligible import elect, eligible_after
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError
from keeperless.metadata.image import PartitionInfo, changed_partition

__all__ = [
    "ReassignmentTarget",
    "alter_reassignments",
    "change_partition",
    "list_reassignments",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReassignmentTarget:
    topic: str
    partition: int
    replicas: tuple[int, ...] | None  # None: cancel the reassignment in progress


def _acceptable(c: QuorumController, broker: int) -> bool:
    b = c.image.brokers.get(broker)
    return b is not None and not b.fenced and not b.in_controlled_shutdown


def _dir_online(c: QuorumController, info: PartitionInfo, broker: int) -> bool:
    b = c.image.brokers.get(broker)
    return b is not None and b.has_online_dir(info.directory(broker))


def _completed(
    replicas: tuple[int, ...], isr: tuple[int, ...], adding: tuple[int, ...],
    removing: tuple[int, ...],
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:  # fmt: skip
    """(replicas, ISR) once the reassignment is done, if the ISR allows it now (Kafka's
    PartitionReassignmentReplicas.maybeCompleteReassignment)."""
    if not adding and not removing:
        return None
    new_isr = tuple(b for b in isr if b not in removing)
    new_replicas = tuple(b for b in replicas if b not in removing)
    if not new_isr or not new_replicas:
        return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def change_partition(
    c: QuorumController,
    topic_id: UUID,
    partition: int,
    info: PartitionInfo,
    *,
    replicas: tuple[int, ...] | None = None,
    isr: tuple[int, ...] | None = None,
    adding: tuple[int, ...] | None = None,
    removing: tuple[int, ...] | None = None,
) -> tuple[r.PartitionChangeRecord | None, PartitionInfo]:
    """The record (None: nothing changes) and the partition after it, for a change of
    replicas, ISR or reassignment sets: a reassignment the ISR allows is completed in the
    same record, and a leader outside the new replicas or ISR is replaced by the first
    acceptable replica in the ISR (no leader, -1, when there is none)."""
    t_replicas = info.replicas if replicas is None else replicas
    t_isr = info.isr if isr is None else isr
    t_adding = info.adding if adding is None else adding
    t_removing = info.removing if removing is None else removing
    done = _completed(t_replicas, t_isr, t_adding, t_removing)
    if done is not None:
        t_replicas, t_isr = done
        t_adding = t_removing = ()
    # KIP-966 off: any change clears what an earlier ELR left (Kafka's
    # PartitionChangeBuilder), so no replica is ever in both the ISR and the ELR
    elr: tuple[int, ...] = ()
    last_known: tuple[int, ...] = ()
    min_isr = c.elr_min_isr()
    if min_isr is not None:  # KIP-966: who leaves the ISR below min ISR stays eligible
        elr, last_known = eligible_after(info, t_isr, min_isr(c.image.topics[topic_id].name))
        elr = tuple(b for b in elr if b in t_replicas)
        last_known = tuple(b for b in last_known if b in t_replicas)
    leader = info.leader
    if leader not in t_isr or leader not in t_replicas:
        leader, t_isr, elr, last_known = elect(
            t_replicas,
            t_isr,
            elr,
            last_known,
            lambda b: _acceptable(c, b) and _dir_online(c, info, b),
        )
    elif last_known:
        last_known = ()  # it has a leader
    rec = r.PartitionChangeRecord(
        partition_id=partition,
        topic_id=topic_id,
        replicas=t_replicas if t_replicas != info.replicas else None,
        isr=t_isr if t_isr != info.isr else None,
        leader=leader if leader != info.leader else -2,
        adding_replicas=t_adding if t_adding != info.adding else None,
        removing_replicas=t_removing if t_removing != info.removing else None,
        eligible_leader_replicas=elr if elr != info.elr else None,
        last_known_elr=last_known if last_known != info.last_known_elr else None,
        directories=c.new_directories(t_replicas, info) if t_replicas != info.replicas else None,
    )
    if (rec.replicas, rec.isr, rec.adding_replicas, rec.removing_replicas,
            rec.eligible_leader_replicas, rec.last_known_elr) == (None,) * 6 and (
        rec.leader == -2
    ):  # fmt: skip
        return None, info
    return rec, changed_partition(info, rec)


def _invalid(msg: str) -> ApiError:
    return ApiError(ErrorCode.invalid_replica_assignment, msg)


def _validate(c: QuorumController, replicas: tuple[int, ...]) -> ApiError | None:
    """Kafka's validateManualPartitionAssignment, with its words."""
    if not replicas:
        return _invalid("The manual partition assignment includes an empty replica list.")
    previous = None
    for b in sorted(replicas):
        if b not in c.image.brokers:
            return _invalid(
                f"The manual partition assignment includes broker {b}, but no such broker "
                "is registered."
            )
        if b == previous:
            return _invalid(
                f"The manual partition assignment includes the broker {b} more than once."
            )
        previous = b
    return None


def _one(
    c: QuorumController, target: ReassignmentTarget, allow_rf_change: bool
) -> tuple[r.PartitionChangeRecord | None, ApiError, str]:
    topic = c.image.topic(target.topic)
    if topic is None:
        err = ApiError(ErrorCode.unknown_topic_or_partition,
                       f"Unable to find a topic named {target.topic}.")  # fmt: skip
        return None, err, ""
    info = topic.partitions.get(target.partition)
    where = f"{target.topic}-{target.partition}"
    if info is None:
        err = ApiError(ErrorCode.unknown_topic_or_partition,
                       f"Unable to find partition {target.topic}:{target.partition}.")  # fmt: skip
        return None, err, ""
    if target.replicas is None:  # cancel: back to the replicas not being added
        if not info.reassigning:
            return None, ApiError(ErrorCode.no_reassignment_in_progress,
                                  "No partition reassignment is in progress."), ""  # fmt: skip
        original = tuple(b for b in info.replicas if b not in info.adding)
        isr = tuple(b for b in info.isr if b not in info.adding)
        if not isr:
            return None, _invalid(
                f"Unable to revert partition assignment for {target.topic}:{target.partition} "
                "because it would require an unclean leader election."
            ), ""  # fmt: skip
        rec, _ = change_partition(c, topic.topic_id, target.partition, info,
                                  replicas=original, isr=isr, adding=(), removing=())  # fmt: skip
        return rec, ApiError.none(), f"{where}: cancelled, back to {list(original)}"
    replicas = tuple(target.replicas)
    bad = _validate(c, replicas)
    if bad is not None:
        return None, bad, ""
    rf = len([b for b in info.replicas if b not in info.adding])
    if not allow_rf_change and len(replicas) != rf:  # AlterPartitionReassignments v1
        msg = (f"The replication factor is changed from {rf} to {len(replicas)} but "
               "allowReplicationFactorChange is false.")  # fmt: skip
        return None, ApiError(ErrorCode.invalid_replication_factor, msg), ""
    # every replica not of the original set stays "adding", so that a cancellation
    # reverts to the original replicas whatever targets came between; one a replaced
    # target was adding and the new one drops is removing too (as in Kafka, where the
    # adding set is kept when a new target adds nothing)
    originals = {b for b in info.replicas if b not in info.adding}
    removing = tuple(sorted(set(info.replicas) - set(replicas)))
    adding = tuple(sorted((set(replicas) | set(removing)) - originals))
    merged = replicas + removing
    rec, after = change_partition(c, topic.topic_id, target.partition, info,
                                  replicas=merged, adding=adding, removing=removing)  # fmt: skip
    if rec is None:
        return None, ApiError.none(), ""
    state = "done" if not after.reassigning else f"adding {list(adding)}, removing {list(removing)}"
    return rec, ApiError.none(), f"{where}: {list(info.replicas)} -> {list(replicas)} ({state})"


def alter_reassignments(
    c: QuorumController, targets: Sequence[ReassignmentTarget], allow_rf_change: bool = True
) -> Result[list[tuple[str, int, ApiError]]]:
    """Each partition's reassignment started, replaced or cancelled, or its error."""
    records: list[r.PartitionChangeRecord] = []
    out: list[tuple[str, int, ApiError]] = []
    said: list[str] = []
    seen: set[tuple[str, int]] = set()
    for t in targets:
        if (t.topic, t.partition) in seen:
            out.append((t.topic, t.partition, ApiError(ErrorCode.invalid_request,
                        f"Partition {t.topic}:{t.partition} is named twice.")))  # fmt: skip
            continue
        seen.add((t.topic, t.partition))
        rec, err, what = _one(c, t, allow_rf_change)
        if rec is not None:
            records.append(rec)
        if what:
            said.append(what)
        out.append((t.topic, t.partition, err))
    if said:
        log.info("[node %d] Partition reassignments: %s%s", c.node_id, "; ".join(said[:5]),
                 f" and {len(said) - 5} more" if len(said) > 5 else "")  # fmt: skip
    return Result(list(records), out)


def list_reassignments(
    c: QuorumController, topics: Sequence[tuple[str, Sequence[int]]] | None
) -> list[tuple[str, int, PartitionInfo]]:
    """The partitions being reassigned (of ``topics`` when given; unknown ones left out)."""
    out: list[tuple[str, int, PartitionInfo]] = []
    if topics is None:
        for t in sorted(c.image.topics.values(), key=lambda t: t.name):
            for p in sorted(t.partitions):
                if t.partitions[p].reassigning:
                    out.append((t.name, p, t.partitions[p]))
        return out
    for name, parts in topics:
        found = c.image.topic(name)
        if found is None:
            continue
        for p in parts:
            info = found.partitions.get(p)
            if info is not None and info.reassigning:
                out.append((name, p, info))
    return out
