"""The broker → partitions index follows appends, commits, lost leaderships and failed
appends by undoing only what was not committed (never by walking every partition)."""

from __future__ import annotations

from typing import Any

from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import CreatePartitionsRequest, NewTopic
from keeperless.metadata.image import MetadataImage
from tests.unit.controller_log import ActiveLog, active_cluster


def _expected(image: MetadataImage) -> dict[int, set[Any]]:
    idx: dict[int, set[Any]] = {}
    for t in image.topics.values():
        for p, info in t.partitions.items():
            for b in info.replicas:
                idx.setdefault(b, set()).add((t.topic_id, p))
    return idx


def _index(c: QuorumController) -> dict[int, set[Any]]:
    return {b: set(keys) for b, keys in c.partitions_by_broker.items() if keys}


def _more_changes(c: QuorumController, log: ActiveLog) -> None:
    log.append(c.create_topics([NewTopic("c", 7, 3)], False).records)
    log.append([r.RemoveTopicRecord(topic_id=c.image.topic_ids["a"])])
    log.append(c.broker_heartbeat(3, c.image.brokers[3].epoch, True, True, 100).all_records())
    log.append(c.create_partitions([CreatePartitionsRequest("b", 6)], False).records)


def test_lost_leadership_undoes_uncommitted_index_changes() -> None:
    c, log = active_cluster()
    assert len(c.image.topic_ids) == 2
    committed = _index(c)
    assert committed == _expected(c.committed)
    _more_changes(c, log)
    assert _index(c) == _expected(c.image) != committed
    c.renounce()
    assert _index(c) == _expected(c.committed) == committed


def test_partly_committed_then_lost() -> None:
    c, log = active_cluster()
    _more_changes(c, log)
    log.commit(2)
    c.renounce()
    assert c.image is c.committed
    assert _index(c) == _expected(c.committed)
    assert "c" in c.image.topic_ids
    assert "a" not in c.image.topic_ids


def test_failed_append_rolls_back_the_index() -> None:
    c, log = active_cluster()
    before = c.image
    _more_changes(c, log)
    c.rollback(before)
    assert _index(c) == _expected(before)


def test_a_failed_append_keeps_what_committed_meanwhile() -> None:
    c, log = active_cluster()
    before = c.image
    _more_changes(c, log)
    log.commit(2)  # a big operation's first chunks committed before the append failed
    c.rollback(before)
    assert c.image is c.committed
    assert _index(c) == _expected(c.committed)
