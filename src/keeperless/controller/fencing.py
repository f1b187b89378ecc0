"""Broker liveness on the active controller: brokers that miss their session are fenced
and lose their leaderships; a broker that comes back (unfenced) takes the leaderless
partitions it holds in its ISR."""

from __future__ import annotations

from typing import Any

from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataImage

__all__ = ["fence_stale_brokers", "leaders_after_fence", "leaders_after_unfence", "start_sessions"]

NO_LEADER = -1


def start_sessions(c: QuorumController, now_ms: int) -> None:
    """A newly active controller gives every live broker a full session to heartbeat."""
    for b in c.image.brokers.values():
        if not b.fenced:
            c._last_heartbeat_ms.setdefault(b.broker_id, now_ms)


def leaders_after_fence(image: MetadataImage, broker_id: int) -> list[Any]:
    """Partition changes moving leadership away from a fenced broker: the next live ISR
    member leads; with none left the partition is offline (leader -1, ISR kept)."""
    live = {b.broker_id for b in image.brokers.values() if not b.fenced} - {broker_id}
    out: list[Any] = []
    for topic in image.topics.values():
        for idx, p in topic.partitions.items():
            if broker_id not in p.isr:
                continue
            isr = tuple(x for x in p.isr if x != broker_id) or p.isr
            if p.leader == broker_id:
                new = next((x for x in p.replicas if x in live and x in isr), NO_LEADER)
                out.append(
                    r.PartitionChangeRecord(
                        partition_id=idx, topic_id=topic.topic_id, leader=new, isr=isr
                    )
                )
            elif isr != p.isr:
                out.append(
                    r.PartitionChangeRecord(partition_id=idx, topic_id=topic.topic_id, isr=isr)
                )
    return out


def leaders_after_unfence(image: MetadataImage, broker_id: int) -> list[Any]:
    out: list[Any] = []
    for topic in image.topics.values():
        for idx, p in topic.partitions.items():
            if p.leader == NO_LEADER and broker_id in p.isr:
                out.append(
                    r.PartitionChangeRecord(
                        partition_id=idx, topic_id=topic.topic_id, leader=broker_id
                    )
                )
    return out


def fence_stale_brokers(c: QuorumController, now_ms: int) -> Result[list[int]]:
    records: list[Any] = []
    fenced: list[int] = []
    for b in sorted(c.image.brokers.values(), key=lambda b: b.broker_id):
        last = c._last_heartbeat_ms.get(b.broker_id)
        if b.fenced or last is None or now_ms - last <= c.session_timeout_ms:
            continue
        records.append(r.FenceBrokerRecord(id=b.broker_id, epoch=b.epoch))
        records.extend(leaders_after_fence(c.image, b.broker_id))
        c._last_heartbeat_ms.pop(b.broker_id, None)
        fenced.append(b.broker_id)
    return Result(records, fenced)
