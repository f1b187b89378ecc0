"""The broker → partitions index follows appends, commits, lost leaderships and failed
appends by undoing only what was not committed (never by walking every partition)."""

from __future__ import annotations

import uuid
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


def _names(image: MetadataImage) -> set[str]:
    return set(image.topic_ids)


def test_the_active_commits_the_images_it_built_when_appending() -> None:
    """Replaying its own records again at commit doubled the active controller's work
    per record (a million at a controlled shutdown of a broker at 1M partitions): the
    image built at the append becomes the committed one, and it is what a replay of
    the committed records onto the last committed image gives."""
    c, log = active_cluster()
    _more_changes(c, log)
    built = [img for _, img in c._appended]
    assert len(built) == 4
    log.commit(2)
    assert c.committed is built[1]
    log.commit()
    assert c.committed is built[3] is c.image
    # a standby, replaying the same log, ends at the same state
    standby = QuorumController(2, c.rng, c.defaults)
    for records, last in log.history:
        standby.replay_committed(records, last)
    assert _names(standby.committed) == _names(c.committed)
    assert standby.committed.topics == c.committed.topics
    assert _index(standby) == _index(c)


def test_records_of_another_leader_at_the_same_offsets_are_replayed() -> None:
    """Leadership lost before its records committed, the next leader committed others
    at those offsets: what committed is replayed, not the image built for ours."""
    c, log = active_cluster()
    ours = c.create_topics([NewTopic("ours", 1, 1)], False).records
    log.append(ours)
    last = log.offset
    c.renounce()
    tid = uuid.UUID(int=77)
    theirs: list[Any] = [
        r.TopicRecord(name="theirs", topic_id=tid),
        r.PartitionRecord(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1),
    ]
    assert len(theirs) == len(ours)
    c.replay_committed(theirs, last)
    assert "theirs" in _names(c.committed)
    assert "ours" not in _names(c.committed)
    assert c.image is c.committed


def test_after_a_failed_append_the_images_built_on_it_are_not_committed() -> None:
    c, log = active_cluster()
    first = c.create_topics([NewTopic("kept", 1, 1)], False).records
    log.append(first)
    kept = c.image
    log.append(c.create_topics([NewTopic("lost", 1, 1)], False).records)
    lost_entry = log.entries.pop()  # its append failed
    log.offset -= len(lost_entry[0])
    c.rollback(kept)
    log.append(c.create_topics([NewTopic("instead", 1, 1)], False).records)
    log.commit()
    assert {"kept", "instead"} <= _names(c.committed)
    assert "lost" not in _names(c.committed)
    assert c.committed is c.image


def test_an_image_not_built_on_what_committed_before_it_is_not_committed() -> None:
    """Records another leader appended before ours commit first: the image built for
    ours lacks them, and the committed state is their replay, then ours."""
    c, log = active_cluster()
    start = log.offset
    tid = uuid.UUID(int=78)
    earlier: list[Any] = [
        r.TopicRecord(name="earlier", topic_id=tid),
        r.PartitionRecord(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1),
    ]
    ours = c.create_topics([NewTopic("ours", 1, 1)], False).records
    c.replay(ours, start + len(earlier) + len(ours))  # appended after theirs
    c.replay_committed(earlier, start + len(earlier))
    c.replay_committed(ours, start + len(earlier) + len(ours))
    assert {"earlier", "ours"} <= _names(c.committed)
