"""AlterPartition: ISR changes proposed by partition leaders (Kafka's KIP-497), checked
against the broker epoch, the leader epoch and the partition epoch so that a stale
leader can never overwrite a newer decision."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.controller.reassignment import change_partition
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError, IsrChange, IsrResult
from keeperless.metadata.image import PartitionInfo

__all__ = ["alter_partition"]

log = logging.getLogger(__name__)


def _check(
    c: QuorumController, broker_id: int, ch: IsrChange, info: PartitionInfo
) -> ApiError | None:
    where = f"partition {ch.partition} of topic {ch.topic_id}"
    if info.leader != broker_id:
        return ApiError(
            ErrorCode.invalid_request,
            f"Broker {broker_id} is not the leader of {where} (leader {info.leader})",
        )
    if ch.leader_epoch != info.leader_epoch:
        return ApiError(
            ErrorCode.fenced_leader_epoch,
            f"Leader epoch {ch.leader_epoch} of {where} is not the current {info.leader_epoch}",
        )
    if ch.partition_epoch != info.partition_epoch:
        return ApiError(
            ErrorCode.invalid_update_version,
            f"Partition epoch {ch.partition_epoch} of {where} is not the current "
            f"{info.partition_epoch}",
        )
    if broker_id not in ch.new_isr:
        return ApiError(ErrorCode.invalid_request, f"The new ISR of {where} must keep its leader")
    outside = [x for x in ch.new_isr if x not in info.replicas]
    if outside or len(set(ch.new_isr)) != len(ch.new_isr):
        return ApiError(
            ErrorCode.invalid_request,
            f"The new ISR {list(ch.new_isr)} of {where} is not a set of its replicas "
            f"{list(info.replicas)}",
        )
    for x in ch.new_isr:
        if x in info.isr:
            continue
        b = c.image.brokers.get(x)
        if b is None or b.fenced or b.in_controlled_shutdown:
            return ApiError(
                ErrorCode.ineligible_replica,
                f"Replica {x} of {where} cannot join the ISR: it is "
                f"{'not registered' if b is None else 'fenced or shutting down'}",
            )
    return None


def alter_partition(
    c: QuorumController, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
) -> Result[tuple[ApiError, list[IsrResult]]]:
    b = c.image.brokers.get(broker_id)
    if b is None or b.epoch != broker_epoch:
        return Result(
            [],
            (
                ApiError(
                    ErrorCode.stale_broker_epoch,
                    f"Broker {broker_id} epoch {broker_epoch} is not current",
                ),
                [],
            ),
        )
    records: list[r.PartitionChangeRecord] = []
    results: list[IsrResult] = []
    changed: list[str] = []
    for ch in changes:
        topic = c.image.topics.get(ch.topic_id)
        if topic is None:
            results.append(
                IsrResult(ch.topic_id, ch.partition, ApiError(ErrorCode.unknown_topic_id))
            )
            continue
        info = topic.partitions.get(ch.partition)
        if info is None:
            err = ApiError(ErrorCode.unknown_topic_or_partition)
            results.append(IsrResult(ch.topic_id, ch.partition, err))
            continue
        bad = _check(c, broker_id, ch, info)
        if bad is not None:
            results.append(IsrResult(ch.topic_id, ch.partition, bad, info))
            continue
        if tuple(ch.new_isr) == info.isr:
            results.append(IsrResult(ch.topic_id, ch.partition, ApiError.none(), info))
            continue
        # a reassignment whose new replicas are all in the ISR now completes with it
        rec, after = change_partition(c, ch.topic_id, ch.partition, info, isr=tuple(ch.new_isr))
        if rec is not None:
            records.append(rec)
        changed.append(f"{topic.name}-{ch.partition} {list(info.isr)} -> {list(after.isr)}"
                       + (f" (reassigned to {list(after.replicas)})"
                          if info.reassigning and not after.reassigning else ""))  # fmt: skip
        results.append(IsrResult(ch.topic_id, ch.partition, ApiError.none(), after))
    if changed:  # one line per request, however many partitions it changes
        log.info(
            "[node %d] ISR of %d partition(s) changed at the request of their leader %d: %s%s",
            c.node_id,
            len(changed),
            broker_id,
            ", ".join(changed[:5]),
            f" and {len(changed) - 5} more" if len(changed) > 5 else "",
        )
    return Result(list(records), (ApiError.none(), results))
