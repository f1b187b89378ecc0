"""The broker → partitions index follows appends, commits, lost leaderships and failed
appends by undoing only what was not committed (never by walking every partition)."""

from __future__ import annotations

import random
import uuid
from typing import Any

from keeperless.controller.quorum_controller import (
    CreatePartitionsRequest,
    NewTopic,
    QuorumController,
)
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataImage


def _expected(image: MetadataImage) -> dict[int, set[Any]]:
    idx: dict[int, set[Any]] = {}
    for t in image.topics.values():
        for p, info in t.partitions.items():
            for b in info.replicas:
                idx.setdefault(b, set()).add((t.topic_id, p))
    return idx


def _index(c: QuorumController) -> dict[int, set[Any]]:
    return {b: set(keys) for b, keys in c.partitions_by_broker.items() if keys}


class _Log:
    """The active controller's side: apply on append, commit later."""

    def __init__(self, c: QuorumController) -> None:
        self.c = c
        self.entries: list[tuple[list[Any], int]] = []
        self.offset = -1

    def append(self, records: list[Any]) -> None:
        self.offset += len(records)
        self.c.replay(records, self.offset)
        self.entries.append((records, self.offset))

    def commit(self, n: int) -> None:
        for records, last in self.entries[:n]:
            self.c.replay_committed(records, last)
        del self.entries[:n]


def _active() -> tuple[QuorumController, _Log]:
    c = QuorumController(
        1, random.Random(11), {"num.partitions": 5, "default.replication.factor": 2}
    )
    log = _Log(c)
    log.append([r.FeatureLevelRecord(name="metadata.version", feature_level=21)])
    for b in (1, 2, 3):
        epoch = log.offset + 1
        log.append(c.register_broker(b, uuid.uuid4(), [("P", "h", b)], None, epoch, 0).records)
        log.append(c.broker_heartbeat(b, epoch, False, True, 0).all_records())
    log.append(c.create_topics([NewTopic("a"), NewTopic("b", 3, 3)], False).records)
    log.commit(len(log.entries))
    return c, log


def _more_changes(c: QuorumController, log: _Log) -> None:
    log.append(c.create_topics([NewTopic("c", 7, 3)], False).records)
    log.append([r.RemoveTopicRecord(topic_id=c.image.topic_ids["a"])])
    log.append(c.broker_heartbeat(3, c.image.brokers[3].epoch, True, True, 100).all_records())
    log.append(c.create_partitions([CreatePartitionsRequest("b", 6)], False).records)


def test_lost_leadership_undoes_uncommitted_index_changes() -> None:
    c, log = _active()
    assert len(c.image.topic_ids) == 2
    committed = _index(c)
    assert committed == _expected(c.committed)
    _more_changes(c, log)
    assert _index(c) == _expected(c.image) != committed
    c.renounce()
    assert _index(c) == _expected(c.committed) == committed


def test_partly_committed_then_lost() -> None:
    c, log = _active()
    _more_changes(c, log)
    log.commit(2)
    c.renounce()
    assert c.image is c.committed
    assert _index(c) == _expected(c.committed)
    assert "c" in c.image.topic_ids
    assert "a" not in c.image.topic_ids


def test_failed_append_rolls_back_the_index() -> None:
    c, log = _active()
    before = c.image
    _more_changes(c, log)
    c.rollback(before)
    assert _index(c) == _expected(before)
