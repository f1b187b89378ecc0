"""Broker liveness on the active controller: brokers that miss their session are fenced
and lose their leaderships; a broker that comes back (unfenced) takes the leaderless
partitions it holds in its ISR."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from uuid import UUID

from keeperless.controller.quorum_controller import PartitionKey, QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataImage, PartitionInfo

__all__ = [
    "fence_stale_brokers",
    "iter_leaders_after_fence",
    "iter_leaders_after_unfence",
    "leaders_after_fence",
    "leaders_after_unfence",
    "start_sessions",
]

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
    by_topic: dict[UUID, set[int]] = {}
    for b in brokers:
        for tid, idx in index.get(b, ()):
            by_topic.setdefault(tid, set()).add(idx)
    # in (topic id, partition) order, sorting ints rather than a million UUID pairs
    for tid in sorted(by_topic, key=lambda u: u.int):
        found = image.topics.get(tid)
        if found is None:
            continue
        parts = found.partitions
        for idx in sorted(by_topic[tid]):
            info = parts.get(idx)
            if info is not None:
                yield tid, idx, info


def iter_leaders_after_fence(
    image: MetadataImage,
    broker_id: int | Iterable[int],
    index: Mapping[int, set[PartitionKey]] | None = None,
) -> Iterator[Any]:
    """Partition changes for fenced brokers: they leave every ISR (a partition keeps its
    last ISR member), and where one led, the next live ISR member leads; with none left
    the partition is offline (leader -1). Generated lazily from ``image``: a broker of a
    million partitions yields a million changes, appended while they are computed."""
    gone = {broker_id} if isinstance(broker_id, int) else set(broker_id)
    live = {b.broker_id for b in image.brokers.values() if not b.fenced} - gone
    for tid, idx, p in _candidates(image, index, gone):
        if not gone.intersection(p.isr):
            continue
        isr = tuple(x for x in p.isr if x not in gone) or p.isr
        if p.leader in gone:
            new = next((x for x in p.replicas if x in live and x in isr), NO_LEADER)
            yield r.PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=new, isr=isr)
        elif isr != p.isr:
            yield r.PartitionChangeRecord(partition_id=idx, topic_id=tid, isr=isr)


def leaders_after_fence(
    image: MetadataImage,
    broker_id: int | Iterable[int],
    index: Mapping[int, set[PartitionKey]] | None = None,
) -> list[Any]:
    return list(iter_leaders_after_fence(image, broker_id, index))


def iter_leaders_after_unfence(
    image: MetadataImage, broker_id: int, index: Mapping[int, set[PartitionKey]] | None = None
) -> Iterator[Any]:
    """The leaderless partitions with ``broker_id`` in their ISR: it leads them again."""
    for tid, idx, p in _candidates(image, index, (broker_id,)):
        if p.leader == NO_LEADER and broker_id in p.isr:
            yield r.PartitionChangeRecord(partition_id=idx, topic_id=tid, leader=broker_id)


def leaders_after_unfence(
    image: MetadataImage, broker_id: int, index: Mapping[int, set[PartitionKey]] | None = None
) -> list[Any]:
    return list(iter_leaders_after_unfence(image, broker_id, index))


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
    # Kafka's order: the leaderships move first and the fence comes last, so that if a
    # failover cuts this (non-atomic) change short, the broker is still unfenced and the
    # next active controller fences it again, moving what is left
    fences = [r.FenceBrokerRecord(id=b, epoch=c.image.brokers[b].epoch) for b in stale]
    for b in stale:
        c._last_heartbeat_ms.pop(b, None)
    moves = iter_leaders_after_fence(c.image, stale, c.partitions_by_broker)
    return Result([], stale, atomic=False, more=itertools.chain(moves, fences))
