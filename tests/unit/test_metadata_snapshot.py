from __future__ import annotations

import random
import uuid

from keeperless.controller.quorum_controller import NewTopic, QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import snapshot_bytes
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
        c.replay(hb.records, 10 * b + 1)
    res2 = c.create_topics(
        [NewTopic("a", 4, 3, configs={"retention.ms": "1000"}), NewTopic("b")], False
    )
    c.replay(res2.records, 100)
    c.replay(c.allocate_producer_ids(1, 10).records, 101)
    return c


def test_snapshot_rebuilds_the_image() -> None:
    c = _controller_with_state()
    data = snapshot_bytes(c.image, 1234)
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
