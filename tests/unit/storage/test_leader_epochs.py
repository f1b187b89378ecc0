"""The leader-epoch cache as Kafka's (LeaderEpochFileCache): it always says what the log
holds, and answers "where does epoch E end?" for any E. Found by the fault harness at
volume (seed 2309, combined, rolls): a producer's retry was appended at offset 0 by the
leader of epoch 1 while the followers kept the first leader's copy under epoch 0; asked
where epoch 0 ends, the leader (whose log starts with epoch 1) answered "undefined",
which the followers took for no divergence: they fetched nothing and stayed out of the
ISR for good (the partition below min.insync.replicas, its replicas differing). Kafka
answers (0, where epoch 1 starts) and the followers truncate there."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from keeperless.broker.partitions import Partition
from keeperless.metadata.image import PartitionInfo
from keeperless.storage.epochs import UNDEFINED, LeaderEpochCache
from keeperless.storage.log import LogConfig


def test_an_older_epoch_assigned_replaces_the_entries_it_contradicts(tmp_path: Path) -> None:
    c = LeaderEpochCache(tmp_path)
    c.assign(1, 0)  # a leader of epoch 1 that wrote nothing
    c.assign(0, 0)  # then, as a follower, a batch of epoch 0 at offset 0
    assert c.entries == [(0, 0)]
    c.assign(0, 5)  # the same epoch again, later: nothing to note
    c.assign(2, 10)
    c.assign(3, 10)  # epoch 2 wrote nothing before 3 began
    assert c.entries == [(0, 0), (3, 10)]
    c.assign(3, 7)  # the same epoch starting earlier wins
    assert c.entries == [(0, 0), (3, 7)]
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (3, 7)]  # and is on disk


def test_the_end_of_any_epoch_is_answered_as_kafka_does(tmp_path: Path) -> None:
    c = LeaderEpochCache(tmp_path)
    assert c.end_offset_for(0, 10) == UNDEFINED  # nothing held
    c.assign(2, 5)
    c.assign(4, 9)
    c.assign(7, 20)
    assert c.end_offset_for(1, 30) == (1, 5)  # older than any held: where the oldest starts
    assert c.end_offset_for(2, 30) == (2, 9)
    assert c.end_offset_for(3, 30) == (2, 9)  # the largest epoch at or below it
    assert c.end_offset_for(5, 30) == (4, 20)
    assert c.end_offset_for(7, 30) == (7, 30)  # the latest ends at the log end
    assert c.end_offset_for(-1, 30) == UNDEFINED


def test_a_new_epoch_is_written_at_once_and_made_durable_by_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two fsyncs at a leadership's first append held the event loop 5-13 ms: the entry
    is written without them (a process crash keeps it), and ``flush`` - at a roll or a
    clean stop, before a recovery point - makes it durable."""
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    cache = LeaderEpochCache(tmp_path)
    cache.assign(3, 100)
    assert synced == [], "the produce path waited for the disk"
    assert LeaderEpochCache(tmp_path).entries == [(3, 100)]
    cache.flush()
    assert len(synced) == 2, "a file and its directory"
    cache.flush()
    assert len(synced) == 2, "nothing new to make durable"


@pytest.mark.parametrize("text", ["", "0\n", "0\n2\n1 0\n", "0\nx\n", "7\n1\n1 0\n"], ids=repr)
def test_a_torn_checkpoint_is_not_loaded(tmp_path: Path, text: str) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text(text)
    cache = LeaderEpochCache(tmp_path)
    assert not cache.loaded, "a torn checkpoint was trusted"
    assert cache.entries == []


def test_a_leadership_begins_its_epoch_at_the_log_end_before_any_write(tmp_path: Path) -> None:
    """Found by a Connect test (a worker's offset topic after two broker restarts): an
    empty partition's new leader held no epoch, so asked where epoch 0 ends it answered
    UNDEFINED; librdkafka took it for a truncation, reset its position and read nothing
    more from that partition. Kafka's makeLeader begins the epoch at the log end, written
    or not: the answer is (0, 0), as for any epoch older than the cache holds."""
    tid = uuid.uuid4()
    p = Partition("t", 0, tid, tmp_path / "t-0", LogConfig(), 0)
    p.node_id = 1
    p.on_info(PartitionInfo((1,), (1,), 1, 2, 2), 0)  # led at epoch 2, nothing written
    assert p.end_offset_for_epoch(0) == (0, 0), "a consumer at epoch 0 told its log was cut"
    assert p.end_offset_for_epoch(2) == (2, 0)
    p.epochs.flush()  # a roll or a clean stop: the entry reaches the checkpoint
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(2, 0)]
    follower = Partition("u", 0, tid, tmp_path / "u-0", LogConfig(), 0)
    follower.node_id = 1
    follower.on_info(PartitionInfo((2, 1), (2, 1), 2, 2, 2), 0)
    assert follower.epochs.entries == [], "a follower's epochs are its leader's batches'"
