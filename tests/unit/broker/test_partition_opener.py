"""New partitions past a publication's budget are opened a slice at a time, the event
loop running between slices: a CreateTopics of 10,000 partitions held a node's loop for
seconds (each new partition makes a directory and files). Each queued partition opens
as the image says when its turn comes: deleted meanwhile, it is not opened; re-created,
it opens with the new topic id. The broker's listeners hear of each slice."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from keeperless.broker import partition_opener
from keeperless.broker.broker import Broker
from keeperless.metadata import _records_gen as r
from tests.unit.brokers import make_broker


def _topic(name: str, tid: uuid.UUID, partitions: int) -> list[Any]:
    return [
        r.TopicRecord(name=name, topic_id=tid),
        *(
            r.PartitionRecord(partition_id=p, topic_id=tid, replicas=(1,), isr=(1,), leader=1)
            for p in range(partitions)
        ),
    ]


@pytest.fixture
def one_per_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """No budget: a publication opens its first AT_ONCE partitions, a slice opens one."""
    monkeypatch.setattr(partition_opener, "SLICE_S", 0.0)


async def _until_opened(b: Broker) -> None:
    for _ in range(2000):
        if not b.opener.queued:
            return
        await asyncio.sleep(0)
    raise AssertionError("the queued partitions were never opened")


def test_a_big_creation_is_opened_in_slices_with_the_loop_running_between(
    tmp_path: Path, one_per_slice: None
) -> None:
    b = make_broker(tmp_path)
    heard: list[list[tuple[str, int]]] = []
    b.on_image.append(lambda _img: heard.append(list(b.changed_partitions)))
    ticks = [0]
    at_slice: list[int] = []
    b.on_image.append(lambda _img: at_slice.append(ticks[0]))

    async def main() -> None:
        async def ticker() -> None:
            while True:
                ticks[0] += 1
                await asyncio.sleep(0)

        t = asyncio.get_running_loop().create_task(ticker())
        tid = uuid.uuid4()
        b.on_committed(_topic("t", tid, 40), 5)
        assert len(b.partitions.partitions) < 40  # not all in the publication
        assert b.opener.queued > 0
        await _until_opened(b)
        t.cancel()

    asyncio.run(main())
    assert sorted(b.partitions.partitions) == [("t", p) for p in range(40)]
    # every partition was published once, in the publication or in a slice
    assert sorted(k for keys in heard for k in keys) == [("t", p) for p in range(40)]
    assert len(heard) > 2  # slices, each told to the listeners
    assert len(set(at_slice)) == len(at_slice)  # the loop ran between every two slices
    b.close()


def test_a_queued_partition_opens_as_the_image_says_when_its_turn_comes(
    tmp_path: Path, one_per_slice: None
) -> None:
    b = make_broker(tmp_path)
    gone, old, new = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()

    async def main() -> None:
        b.on_committed(_topic("filler", uuid.uuid4(), partition_opener.AT_ONCE + 5), 5)  # queued
        b.on_committed(_topic("gone", gone, 3) + _topic("again", old, 3), 6)
        assert b.partitions.get("gone", 0) is None
        # before their turn: one topic deleted, the other deleted and made again
        b.on_committed([r.RemoveTopicRecord(topic_id=gone), r.RemoveTopicRecord(topic_id=old)], 7)
        b.on_committed(_topic("again", new, 2), 8)
        await _until_opened(b)

    asyncio.run(main())
    assert all(b.partitions.get("gone", p) is None for p in range(3))
    assert not any(d.name.startswith("gone-") for d in tmp_path.iterdir())
    again = [b.partitions.get("again", p) for p in range(3)]
    assert [p.topic_id if p is not None else None for p in again] == [new, new, None]
    b.close()


def test_without_a_running_loop_everything_opens_in_the_publication(tmp_path: Path) -> None:
    b = make_broker(tmp_path)
    b.on_committed(_topic("t", uuid.uuid4(), 30), 5)
    assert len(b.partitions.partitions) == 30
    assert b.opener.queued == 0
    b.close()


def test_internal_topics_open_in_the_publication_that_makes_them(
    tmp_path: Path, one_per_slice: None
) -> None:
    """Their coordinators serve them as soon as the image says they lead them."""
    b = make_broker(tmp_path)

    async def main() -> None:
        b.on_committed(_topic("__consumer_offsets", uuid.uuid4(), 10), 5)
        assert len(b.partitions.partitions) == 10
        assert b.opener.queued == 0

    asyncio.run(main())
    b.close()


def test_a_small_creation_opens_in_its_publication_however_slow(
    tmp_path: Path, one_per_slice: None
) -> None:
    """A topic of a few partitions is served as soon as its creation is published."""
    b = make_broker(tmp_path)

    async def main() -> None:
        b.on_committed(_topic("small", uuid.uuid4(), partition_opener.AT_ONCE), 5)
        assert len(b.partitions.partitions) == partition_opener.AT_ONCE
        b.on_committed(_topic("big", uuid.uuid4(), partition_opener.AT_ONCE + 5), 6)
        assert b.opener.queued == 5
        await _until_opened(b)

    asyncio.run(main())
    assert len(b.partitions.partitions) == 2 * partition_opener.AT_ONCE + 5
    b.close()
