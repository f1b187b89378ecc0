"""ElectLeaders: preferred and unclean leader elections requested by an operator.

Preferred: the first replica in the assignment leads again, if it is in the ISR and
unfenced.  Unclean: a leaderless partition gets a leader even from outside the ISR
(its ISR becomes that replica alone) — acknowledged records the others had can be lost,
which is what the operator asked for; a partition with a live ISR member is elected
cleanly instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.eligible import elect, leader_acceptor
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError
from keeperless.metadata.image import PartitionInfo

__all__ = ["PREFERRED", "UNCLEAN", "balance_leaders", "elect_leaders"]

log = logging.getLogger(__name__)

PREFERRED, UNCLEAN = 0, 1
NO_LEADER = -1

ElectionResult = tuple[str, int, ApiError]


def _elect(
    live: Callable[[int], bool], p: PartitionInfo, election_type: int, where: str
) -> tuple[ApiError, int, tuple[int, ...] | None]:
    """(error, new leader, new ISR or None to keep it); ``live``: whether a replica may
    lead (its broker active, its log directory online)."""
    if election_type == PREFERRED:
        preferred = p.replicas[0] if p.replicas else NO_LEADER
        if p.leader == preferred:
            return ApiError(ErrorCode.election_not_needed), NO_LEADER, None
        if preferred not in p.isr or not live(preferred):
            state = "is fenced" if preferred in p.isr else f"is not in the ISR {list(p.isr)}"
            return (
                ApiError(
                    ErrorCode.preferred_leader_not_available,
                    f"Failed to elect the preferred leader {preferred} for {where}: it {state}",
                ),
                NO_LEADER,
                None,
            )
        return ApiError.none(), preferred, None
    if p.leader != NO_LEADER:
        return ApiError(ErrorCode.election_not_needed), NO_LEADER, None
    # a clean choice first: the ISR, else (KIP-966) an eligible replica or the last
    # known leader - the controller's own election rule
    clean, isr, _, _ = elect(p.replicas, p.isr, p.elr, p.last_known_elr, live)
    if clean >= 0:
        return ApiError.none(), clean, isr if isr != p.isr else None
    unclean = next((x for x in p.replicas if live(x)), None)
    if unclean is None:
        return (
            ApiError(
                ErrorCode.eligible_leaders_not_available,
                f"No replica of {where} is alive (replicas {list(p.replicas)})",
            ),
            NO_LEADER,
            None,
        )
    return ApiError.none(), unclean, (unclean,)


def elect_leaders(
    c: QuorumController,
    election_type: int,
    partitions: Sequence[tuple[str, int]] | None,
) -> Result[list[ElectionResult]]:
    """Elect leaders for ``partitions`` (None: every partition; then partitions that need
    no election are left out of the answer, as Kafka does)."""
    image = c.image
    if election_type not in (PREFERRED, UNCLEAN):
        err = ApiError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
        return Result([], [(t, p, err) for t, p in partitions or ()])
    live = {b.broker_id for b in image.brokers.values() if b.active}
    wanted: Sequence[tuple[str, int]]
    if partitions is None:
        wanted = [(t.name, idx) for t in image.topics.values() for idx in sorted(t.partitions)]
    else:
        wanted = partitions
    records: list[r.PartitionChangeRecord] = []
    results: list[ElectionResult] = []
    for name, idx in wanted:
        topic = image.topic(name)
        info = topic.partitions.get(idx) if topic is not None else None
        if topic is None or info is None:
            results.append(
                (
                    name,
                    idx,
                    ApiError(
                        ErrorCode.unknown_topic_or_partition,
                        f"The partition {name}-{idx} does not exist.",
                    ),
                )
            )
            continue
        err, leader, isr = _elect(
            leader_acceptor(image, live, info), info, election_type, f"{name}-{idx}"
        )
        if err.code == ErrorCode.election_not_needed and partitions is None:
            continue
        results.append((name, idx, err))
        if err.code == ErrorCode.none:
            elr: tuple[int, ...] | None = None
            last_known: tuple[int, ...] | None = None
            if isr is not None and (info.elr or info.last_known_elr):
                # from the ELR: it leaves the ELR; unclean: both are cleared (as Kafka)
                from_elr = leader in info.elr
                elr = tuple(b for b in info.elr if b != leader) if from_elr else ()
                last_known = info.last_known_elr if from_elr else ()
            rec = r.PartitionChangeRecord(
                partition_id=idx, topic_id=topic.topic_id, leader=leader, isr=isr,
                eligible_leader_replicas=elr, last_known_elr=last_known,
            )  # fmt: skip
            records.append(rec)
    if records:
        elected = [f"{t}-{p}" for t, p, e in results if e.code == ErrorCode.none]
        more = f" and {len(elected) - 10} more" if len(elected) > 10 else ""
        log.log(
            logging.WARNING if election_type == UNCLEAN else logging.INFO,
            "[node %d] %s leader election for %s%s",
            c.node_id,
            "Unclean" if election_type == UNCLEAN else "Preferred",
            ", ".join(elected[:10]),
            more,
        )
    return Result(list(records), results, atomic=False)


def balance_leaders(c: QuorumController, topic_ids: Sequence[UUID]) -> Result[list[str]]:
    """Kafka's automatic preferred leader balancing (auto.leader.rebalance.enable): each
    partition of ``topic_ids`` led by another replica than its first goes back to the
    first one, if that one is in the ISR and active (no reassignment of it running).
    Called in slices of the topics, so a large cluster's scan never holds the loop."""
    image = c.image
    live = {b.broker_id for b in image.brokers.values() if b.active}
    records: list[r.PartitionChangeRecord] = []
    moved: list[str] = []
    for tid in topic_ids:
        topic = image.topics.get(tid)
        if topic is None:
            continue
        for idx, info in topic.partitions.items():
            if info.reassigning or not info.replicas:
                continue
            preferred = info.replicas[0]
            if info.leader == preferred or preferred not in info.isr:
                continue
            if not leader_acceptor(image, live, info)(preferred):
                continue
            records.append(
                r.PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=preferred)
            )
            moved.append(f"{topic.name}-{idx}")
    if moved:
        log.info("[node %d] Preferred leaders restored (auto.leader.rebalance.enable) for %s%s",
                 c.node_id, ", ".join(moved[:10]),
                 f" and {len(moved) - 10} more" if len(moved) > 10 else "")  # fmt: skip
    return Result(list(records), moved, atomic=False)
