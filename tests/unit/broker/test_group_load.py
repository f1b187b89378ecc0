"""The group coordinator's load through the coordinator runtime: a partition is read
only once its log is open here as the leader, and one that cannot be read fails once
per leader epoch without holding up the other metadata listeners (both found by a
fresh-eyes review of the move onto the runtime)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from keeperless.coordinator.group_shard import offset_key, offset_value
from keeperless.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, GroupSettings
from keeperless.metadata import _records_gen as r
from keeperless.protocol.records import build_batch
from tests.unit.brokers import make_broker

TID = uuid.uuid4()


def _records() -> list[Any]:
    return [
        r.TopicRecord(name=OFFSETS_TOPIC, topic_id=TID),
        r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1,), isr=(1,), leader=1),
    ]


def _write(tmp_path: Path, records: list[tuple[bytes, bytes]]) -> None:
    b = make_broker(tmp_path)
    b.on_committed(_records(), 2)
    p = b.partitions.get(OFFSETS_TOPIC, 0)
    assert p is not None
    assert p.info is not None
    p.append(build_batch([(k, v, ()) for k, v in records]), p.info.leader_epoch, 1 << 20, 0)
    p.maybe_advance_hw()
    b.close()


def test_offsets_of_a_partition_opened_after_the_first_image_are_loaded(tmp_path: Path) -> None:
    """A restarted broker publishes images while it catches up, before its partitions
    are open: the offsets partition is read when it opens (at the same leader epoch),
    not taken as empty for the whole leadership."""
    _write(tmp_path, [(offset_key("g", "t", 0), offset_value(42, -1, "", 0))])

    async def go() -> dict[str, Any]:
        b = make_broker(tmp_path, caught_up=False)
        gc = GroupCoordinator(b, GroupSettings())
        b.on_committed(_records(), 2)
        assert b.partitions.get(OFFSETS_TOPIC, 0) is None
        b.catch_up_to(2)  # live: the partition opens
        assert b.partitions.get(OFFSETS_TOPIC, 0) is not None
        out = dict(gc.offsets)
        b.close()
        return out

    assert asyncio.run(go())["g"][("t", 0)][:3] == (42, -1, "")


def test_a_partition_that_cannot_be_read_fails_once_and_the_rest_goes_on(
    tmp_path: Path,
) -> None:
    """A record the group coordinator cannot read is skipped; a load that fails all
    the same is logged once for its leader epoch, and the listeners after the group
    coordinator still see every image."""
    _write(tmp_path, [(b"\x00", b"?"), (offset_key("g", "t", 0), offset_value(7, -1, "", 0))])

    async def go() -> tuple[dict[str, Any], int]:
        b = make_broker(tmp_path, caught_up=False)
        gc = GroupCoordinator(b, GroupSettings())
        seen: list[int] = []
        b.on_image.append(lambda _img: seen.append(1))
        b.on_committed(_records(), 2)
        b.catch_up_to(2)
        b.on_committed([r.TopicRecord(name="other", topic_id=uuid.uuid4())], 3)
        out = dict(gc.offsets)
        b.close()
        return out, len(seen)

    offsets, images = asyncio.run(go())
    assert offsets["g"][("t", 0)][:3] == (7, -1, "")  # the bad record skipped
    assert images == 3
