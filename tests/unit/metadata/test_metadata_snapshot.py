from __future__ import annotations

import itertools
import pickle
import random
import uuid
from typing import Any

import pytest

from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata import snapshot as snapshot_mod
from keeperless.metadata.admin import NewTopic
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import (
    SnapshotWriter,
    image_records,
)
from keeperless.protocol.records import iter_batches
from keeperless.runtime.metadata_log import decode_entry


def _controller_with_state() -> QuorumController:
    c = QuorumController(
        1, random.Random(7), {"num.partitions": 3, "default.replication.factor": 2}
    )
    c.replay([r.FeatureLevelRecord(name="metadata.version", feature_level=21)], 0)
    for b in (1, 2, 3):
        res = c.register_broker(b, uuid.uuid4(), [("PLAINTEXT", "h", 9000 + b)], "r1", 10 * b, 0)
        c.replay(res.records, 10 * b)
        hb = c.broker_heartbeat(b, 10 * b, False, True, 0)
        c.replay(hb.all_records(), 10 * b + 1)
    res2 = c.create_topics(
        [NewTopic("a", 4, 3, configs={"retention.ms": "1000"}), NewTopic("b")], False
    )
    c.replay(res2.records, 100)
    c.replay(c.allocate_producer_ids(1, 10).records, 101)
    return c


def test_snapshot_rebuilds_the_image() -> None:
    c = _controller_with_state()
    data = SnapshotWriter().write(c.image, 1234)
    delta = MetadataDelta(MetadataImage())
    for rec in decode_entry(data):
        delta.replay(rec)
    delta.offset = c.image.offset
    rebuilt = delta.apply()
    assert rebuilt.features == c.image.features
    assert rebuilt.brokers == c.image.brokers
    assert dict(rebuilt.topics) == dict(c.image.topics)
    assert dict(rebuilt.topic_ids) == dict(c.image.topic_ids)
    assert {k: dict(v) for k, v in rebuilt.configs.items()} == {
        k: dict(v) for k, v in c.image.configs.items()
    }
    assert rebuilt.next_producer_id == c.image.next_producer_id == 1000


@pytest.mark.parametrize("written_by", ["itself", "a child"])
def test_writer_reencodes_only_changed_topics(
    monkeypatch: pytest.MonkeyPatch, written_by: str
) -> None:
    """A running node's writer adopts the batches from the snapshot its forked child
    wrote (the child's copy of the writer dies with it)."""
    c = _controller_with_state()
    c.replay(c.create_topics([NewTopic("kept", 3, 2)], False).records, 150)
    writer = SnapshotWriter()
    if written_by == "itself":
        first = writer.write(c.image, 1234)
    else:
        child = SnapshotWriter()
        first = child.write(c.image, 1234)
        writer.adopt(c.image, first, pickle.loads(pickle.dumps(child.spans)))
    assert decode_entry(first) == list(image_records(c.image))

    encoded: list[str] = []
    real = snapshot_mod.encode_record

    def counting(rec: Any, version: int | None = None) -> bytes:
        if isinstance(rec, r.PartitionRecord):
            encoded.append(c.image.topics[rec.topic_id].name)
        return real(rec, version)

    monkeypatch.setattr(snapshot_mod, "encode_record", counting)
    # one ISR change in topic "a", a new topic "c", topic "b" deleted
    tid = c.image.topic_ids["a"]
    p0 = c.image.topics[tid].partitions[0]
    c.replay(
        [
            r.PartitionChangeRecord(topic_id=tid, partition_id=0, isr=p0.isr[:1]),
            r.RemoveTopicRecord(topic_id=c.image.topic_ids["b"]),
        ],
        200,
    )
    c.replay(c.create_topics([NewTopic("c", 2, 1)], False).records, 201)
    second = writer.write(c.image, 5678)
    assert sorted(encoded) == ["a"] * 4 + ["c"] * 2  # "kept"'s batches were reused
    # the same records as a snapshot written from scratch, at the same offsets
    assert decode_entry(second) == list(image_records(c.image))
    # consecutive offsets from 0 (header) to the footer, every CRC valid
    spans = [(h.base_offset, h.last_offset) for _, h in iter_batches(second)]
    assert spans[0][0] == 0
    assert all(b == a_last + 1 for (_, a_last), (b, _) in itertools.pairwise(spans))
    assert spans[-1][1] == len(decode_entry(second)) + 1


def test_a_delta_follows_a_topic_removed_and_made_again_between_its_partitions() -> None:
    """A delta keeps the last topic's partitions at hand while a topic's records follow
    one another; a topic removed and made again with its id between them still ends
    with each partition where it was written."""
    tid, other = uuid.uuid4(), uuid.uuid4()

    def part(t: uuid.UUID, p: int) -> r.PartitionRecord:
        return r.PartitionRecord(partition_id=p, topic_id=t, replicas=(1,), isr=(1,), leader=1)

    d = MetadataDelta(MetadataImage())
    for rec in (r.TopicRecord(name="a", topic_id=tid), part(tid, 0), part(tid, 1),
                r.RemoveTopicRecord(topic_id=tid), r.TopicRecord(name="a", topic_id=tid),
                part(tid, 2), r.TopicRecord(name="b", topic_id=other), part(other, 0),
                part(tid, 3)):  # fmt: skip
        d.replay(rec)
    img = d.apply()
    assert sorted(img.topics[tid].partitions) == [2, 3]
    assert sorted(img.topics[other].partitions) == [0]
    assert d.changed_topics == {tid, other}
    assert d.changed_partitions >= {(tid, 2), (tid, 3), (other, 0)}
    d = MetadataDelta(img)  # a change of a partition marks its topic changed
    d.replay(r.PartitionChangeRecord(partition_id=0, topic_id=other, leader=-1))
    assert d.changed_topics == {other}
    assert d.apply().topics[other].partitions[0].leader == -1
