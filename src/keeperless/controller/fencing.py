"""Broker liveness on the active controller: brokers that miss their session are fenced
and lose their leaderships; a broker that comes back (unfenced) takes the leaderless
partitions it holds in its ISR."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from keeperless.controller.quorum_controller import PartitionKey, QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataImage, PartitionInfo

__all__ = ["fence_stale_brokers", "leaders_after_fence", "leaders_after_unfence", "start_sessions"]

NO_LEADER = -1


def start_sessions(c: QuorumController, now_ms: int) -> None:
    """A newly active controller gives every live broker a full session to heartbeat."""
    for b in c.image.brokers.values():
        if not b.fenced:
            c._last_heartbeat_ms.setdefault(b.broker_id, now_ms)


def _candidates(
    image: MetadataImage, index: Mapping[int, set[PartitionKey]] | None, brokers: Iterable[int]
) -> Iterable[tuple[UUID, int, PartitionInfo]]:
    """Partitions that have one of ``brokers`` as a replica: from the controller's index
    when given (work proportional to those partitions), else by walking the image."""
    if index is None:
        for topic in image.topics.values():
            for idx, p in topic.partitions.items():
                yield topic.topic_id, idx, p
        return
    keys: set[PartitionKey] = set()
    for b in brokers:
        keys |= index.get(b, set())
    for tid, idx in sorted(keys):
        found = image.topics.get(tid)
        info = found.partitions.get(idx) if found is not None else None
        if info is not None:
            yield tid, idx, info


def leaders_after_fence(
    image: MetadataImage,
    broker_id: int | Iterable[int],
    index: Mapping[int, set[PartitionKey]] | None = None,
) -> list[Any]:
    """Partition changes for fenced brokers: they leave every ISR (a partition keeps its
    last ISR member), and where one led, the next live ISR member leads; with none left
    the partition is offline (leader -1)."""
    gone = {broker_id} if isinstance(broker_id, int) else set(broker_id)
    live = {b.broker_id for b in image.brokers.values() if not b.fenced} - gone
    out: list[Any] = []
    for tid, idx, p in _candidates(image, index, gone):
        if not gone.intersection(p.isr):
            continue
        isr = tuple(x for x in p.isr if x not in gone) or p.isr
        if p.leader in gone:
            new = next((x for x in p.replicas if x in live and x in isr), NO_LEADER)
            out.append(r.PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=new, isr=isr))
        elif isr != p.isr:
            out.append(r.PartitionChangeRecord(partition_id=idx, topic_id=tid, isr=isr))
    return out


def leaders_after_unfence(
    image: MetadataImage, broker_id: int, index: Mapping[int, set[PartitionKey]] | None = None
) -> list[Any]:
    out: list[Any] = []
    for tid, idx, p in _candidates(image, index, (broker_id,)):
        if p.leader == NO_LEADER and broker_id in p.isr:
            out.append(r.PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=broker_id))
    return out


def fence_stale_brokers(c: QuorumController, now_ms: int) -> Result[list[int]]:
    stale = [
        b.broker_id
        for b in sorted(c.image.brokers.values(), key=lambda b: b.broker_id)
        if not b.fenced
        and (last := c._last_heartbeat_ms.get(b.broker_id)) is not None
        and now_ms - last > c.session_timeout_ms
    ]
    if not stale:
        return Result([], [])
    records: list[Any] = [r.FenceBrokerRecord(id=b, epoch=c.image.brokers[b].epoch) for b in stale]
    records.extend(leaders_after_fence(c.image, stale, c.partitions_by_broker))
    for b in stale:
        c._last_heartbeat_ms.pop(b, None)
    return Result(records, stale, atomic=False)
