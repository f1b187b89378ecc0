"""The share coordinator's records and rules (coordinator/share_records.py,
coordinator/share_state.py; Kafka's ShareCoordinatorShard and PersisterStateBatchCombiner,
KIP-932): bytes laid out as Kafka's, batches combined as Kafka's, and state that changes
only when records are replayed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from keeperless.coordinator.outcome import Outcome
from keeperless.coordinator.share_records import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareRecordError,
    ShareSnapshot,
    ShareUpdate,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from keeperless.coordinator.share_state import Refusal, ShareState, ShareStateShard, combine_batches

TOPIC = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
KEY = ShareKey("g", TOPIC, 3)
AVAILABLE, ACKED, ARCHIVED = 0, 2, 4


def B(first: int, last: int, state: int, count: int) -> StateBatch:
    return StateBatch(first, last, state, count)


# -- records ---------------------------------------------------------------------------------


def test_a_snapshot_record_is_laid_out_as_kafkas() -> None:
    key = encode_key(SNAPSHOT, KEY)
    # int16 key version 0, string "g", uuid, int32 partition
    assert key == b"\x00\x00" + b"\x00\x01g" + TOPIC.bytes + b"\x00\x00\x00\x03"
    value = encode_value(ShareSnapshot(1, 2, 3, 10, (B(10, 12, ACKED, 1),)))
    assert value == (
        b"\x00\x00"  # value version 0
        + b"\x00\x01"  # snapshot epoch (uint16)
        + b"\x00\x00\x00\x02"  # state epoch
        + b"\x00\x00\x00\x03"  # leader epoch
        + (10).to_bytes(8, "big")  # start offset
        + b"\x02"  # compact array of 1
        + (10).to_bytes(8, "big") + (12).to_bytes(8, "big") + b"\x02" + b"\x00\x01"
        + b"\x00"  # the batch's tagged fields
        + b"\x00"  # the value's tagged fields
    )  # fmt: skip
    assert decode_key(key) == (SNAPSHOT, KEY)
    assert decode_value(SNAPSHOT, value) == ShareSnapshot(1, 2, 3, 10, (B(10, 12, ACKED, 1),))


def test_an_update_record_has_no_state_epoch_and_round_trips() -> None:
    key = encode_key(UPDATE, KEY)
    assert key[:2] == b"\x00\x01"
    value = encode_value(ShareUpdate(0, 5, -1, (B(1, 1, ARCHIVED, 5), B(2, 9, AVAILABLE, 2))))
    assert value[:4] == b"\x00\x00\x00\x00"
    assert value[4:8] == b"\x00\x00\x00\x05"  # the leader epoch follows the snapshot epoch
    assert decode_value(UPDATE, value) == ShareUpdate(
        0, 5, -1, (B(1, 1, ARCHIVED, 5), B(2, 9, AVAILABLE, 2))
    )


def test_damaged_or_unknown_records_are_refused_by_name() -> None:
    with pytest.raises(ShareRecordError, match="key version 7"):
        decode_key(b"\x00\x07" + encode_key(SNAPSHOT, KEY)[2:])
    with pytest.raises(ShareRecordError, match="damaged"):
        decode_key(encode_key(SNAPSHOT, KEY)[:10])
    with pytest.raises(ShareRecordError, match="value version 1"):
        decode_value(SNAPSHOT, b"\x00\x01" + encode_value(ShareUpdate(0, 1, 1, ()))[2:])
    with pytest.raises(ShareRecordError, match="damaged"):
        decode_value(SNAPSHOT, encode_value(ShareSnapshot(0, 1, 1, 1, (B(1, 2, 0, 1),)))[:20])


# -- combining batches -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("so_far", "new", "start", "expected"),
    [
        # nothing, or one list only
        ((), (), -1, ()),
        ((B(1, 5, AVAILABLE, 1),), (), -1, (B(1, 5, AVAILABLE, 1),)),
        # contiguous, same delivery: one batch
        ((B(1, 5, ACKED, 1),), (B(6, 9, ACKED, 1),), -1, (B(1, 9, ACKED, 1),)),
        # contiguous, another state: both
        ((B(1, 5, ACKED, 1),), (B(6, 9, ARCHIVED, 1),), -1,
         (B(1, 5, ACKED, 1), B(6, 9, ARCHIVED, 1))),
        # the higher delivery count wins where they overlap, whichever list it is in
        ((B(1, 10, AVAILABLE, 1),), (B(4, 6, AVAILABLE, 2),), -1,
         (B(1, 3, AVAILABLE, 1), B(4, 6, AVAILABLE, 2), B(7, 10, AVAILABLE, 1))),
        ((B(4, 6, AVAILABLE, 2),), (B(1, 10, AVAILABLE, 1),), -1,
         (B(1, 3, AVAILABLE, 1), B(4, 6, AVAILABLE, 2), B(7, 10, AVAILABLE, 1))),
        # same count: the higher state (acknowledged over available)
        ((B(1, 10, AVAILABLE, 1),), (B(1, 10, ACKED, 1),), -1, (B(1, 10, ACKED, 1),)),
        # nothing below the start offset; a batch across it is cut
        ((B(1, 10, ACKED, 1),), (B(12, 15, AVAILABLE, 1),), 5,
         (B(5, 10, ACKED, 1), B(12, 15, AVAILABLE, 1))),
        ((B(1, 4, ACKED, 1),), (), 5, ()),
    ],
)  # fmt: skip
def test_batches_are_combined_as_kafkas_combiner(
    so_far: tuple[StateBatch, ...],
    new: tuple[StateBatch, ...],
    start: int,
    expected: tuple[StateBatch, ...],
) -> None:
    assert combine_batches(so_far, new, start) == expected


# -- the shard ---------------------------------------------------------------------------


def _apply(shard: ShareStateShard, outcome: Outcome[Any]) -> None:
    for key, value in outcome.records:
        shard.replay(key, value)


def test_state_changes_only_when_its_records_are_replayed() -> None:
    shard = ShareStateShard()
    out = shard.write(KEY, 0, 1, 10, [B(10, 12, ACKED, 1)])
    assert out.response is None
    assert shard.states == {}  # written, not yet replayed
    assert shard.read(KEY, 1).response is None
    _apply(shard, out)
    assert shard.states[KEY] == ShareState(0, 0, 1, 10, (B(10, 12, ACKED, 1),))


def test_the_first_write_is_a_snapshot_then_updates_merge_until_the_next_snapshot() -> None:
    shard = ShareStateShard(updates_per_snapshot=2)
    kinds = []
    for i, batch in enumerate([B(0, 4, ACKED, 1), B(5, 5, ARCHIVED, 5), B(6, 9, AVAILABLE, 2),
                               B(10, 10, ACKED, 1)]):  # fmt: skip
        out = shard.write(KEY, 0, 1, 0 if i < 3 else 3, [batch])
        kinds.append(decode_key(out.records[0][0])[0])
        _apply(shard, out)
    assert kinds == [SNAPSHOT, UPDATE, UPDATE, SNAPSHOT]
    s = shard.states[KEY]
    assert s.snapshot_epoch == 1
    assert s.start_offset == 3
    assert s.batches == (B(3, 4, ACKED, 1), B(5, 5, ARCHIVED, 5), B(6, 9, AVAILABLE, 2),
                         B(10, 10, ACKED, 1))  # fmt: skip
    # a shard loaded from the same records has the same state
    again = ShareStateShard(updates_per_snapshot=2)
    for batch, start in [(B(0, 4, ACKED, 1), 0), (B(5, 5, ARCHIVED, 5), 0),
                         (B(6, 9, AVAILABLE, 2), 0), (B(10, 10, ACKED, 1), 3)]:  # fmt: skip
        _apply(again, again.write(KEY, 0, 1, start, [batch]))
    assert again.states == shard.states


def test_an_older_leader_or_state_epoch_is_fenced() -> None:
    shard = ShareStateShard()
    _apply(shard, shard.write(KEY, 2, 5, 0, []))
    stale_leader = shard.write(KEY, 2, 4, 0, [B(0, 1, ACKED, 1)])
    assert stale_leader.records == []
    assert isinstance(stale_leader.response, Refusal)
    assert stale_leader.response.code == ErrorCode.fenced_leader_epoch
    stale_state = shard.write(KEY, 1, 5, 0, [B(0, 1, ACKED, 1)])
    assert isinstance(stale_state.response, Refusal)
    assert stale_state.response.code == ErrorCode.fenced_state_epoch
    assert isinstance(shard.read(KEY, 4).response, Refusal)


def test_a_new_leader_reading_the_state_fences_the_old_one() -> None:
    shard = ShareStateShard()
    _apply(shard, shard.write(KEY, 0, 1, 0, [B(0, 3, ACKED, 1)]))
    out = shard.read(KEY, 2)
    assert isinstance(out.response, ShareState)
    assert out.response.batches == (B(0, 3, ACKED, 1),)
    assert len(out.records) == 1  # the new leader epoch, recorded
    _apply(shard, out)
    assert shard.states[KEY].batches == (B(0, 3, ACKED, 1),)  # nothing else changed
    late = shard.write(KEY, 0, 1, 0, [B(4, 4, ACKED, 1)])  # the old leader, too late
    assert isinstance(late.response, Refusal)
    assert late.response.code == ErrorCode.fenced_leader_epoch
    assert shard.read(KEY, 2).records == []  # the same leader again: nothing to record


def test_initialize_and_delete() -> None:
    shard = ShareStateShard()
    _apply(shard, shard.write(KEY, 0, 1, 0, [B(0, 3, ACKED, 1)]))
    _apply(shard, shard.initialize(KEY, 1, 100))
    assert shard.states[KEY] == ShareState(1, 1, 1, 100, ())
    older = shard.initialize(KEY, 0, 5)
    assert isinstance(older.response, Refusal)
    assert older.response.code == ErrorCode.fenced_state_epoch
    out = shard.delete(KEY)
    assert [v for _, v in out.records] == [None, None]
    _apply(shard, out)
    assert shard.states == {}
    assert shard.delete(KEY).records == []  # nothing left to delete
    bad = shard.write(ShareKey("", TOPIC, 0), 0, 0, 0, [])
    assert isinstance(bad.response, Refusal)
    assert bad.response.code == ErrorCode.invalid_group_id
    negative = shard.read(ShareKey("g", TOPIC, -1), 0)
    assert isinstance(negative.response, Refusal)
    assert negative.response.code == ErrorCode.invalid_request


def test_a_summary_for_an_admin_is_never_fenced_but_a_stale_leaders_is() -> None:
    shard = ShareStateShard()
    _apply(shard, shard.write(KEY, 1, 5, 7, [B(7, 9, AVAILABLE, 1)]))
    seen = shard.summary(KEY, -1)  # DescribeShareGroupOffsets: no leader epoch
    assert isinstance(seen, ShareState)
    assert (seen.start_offset, seen.leader_epoch, seen.state_epoch) == (7, 5, 1)
    stale = shard.summary(KEY, 4)
    assert isinstance(stale, Refusal)
    assert stale.code == ErrorCode.fenced_leader_epoch
    assert shard.summary(ShareKey("g", TOPIC, 0), -1) is None  # never written
    assert shard.summary(KEY, -1) == seen  # and nothing recorded by asking


def test_the_log_is_pruned_up_to_the_oldest_latest_snapshot() -> None:
    """What __share_group_state must keep: from the earliest of the share-partitions'
    latest snapshots (each is rebuilt from it and the updates after it)."""
    other = ShareKey("g", TOPIC, 4)
    shard = ShareStateShard(updates_per_snapshot=2)
    log: list[tuple[bytes, bytes | None]] = []

    def append(records: list[tuple[bytes, bytes | None]]) -> None:
        for k, v in records:
            shard.replay(k, v, len(log))
            log.append((k, v))

    def write(key: ShareKey, first: int) -> None:
        append(shard.write(key, 0, 1, first, [B(first, first, ACKED, 1)]).records)

    write(KEY, 0)  # 0: KEY's snapshot
    write(other, 0)  # 1: other's snapshot
    write(KEY, 1)  # 2, 3: updates
    write(KEY, 2)
    assert shard.prune_offset() == 0  # both snapshots still needed
    write(KEY, 3)  # 4: KEY's next snapshot (2 updates since the last)
    assert shard.prune_offset() == 1  # other's snapshot, at 1, is the oldest needed
    append(shard.delete(other).records)  # 5, 6: tombstones
    assert shard.prune_offset() == 4  # only KEY's latest snapshot is needed
    again = ShareStateShard()  # rebuilt from what is left after pruning: the same state
    for offset, (k, v) in enumerate(log[4:], start=4):
        again.replay(k, v, offset)
    assert again.states == shard.states
    assert ShareStateShard().prune_offset() == 0  # nothing replayed: nothing to prune


def test_an_idle_share_partition_gets_a_fresh_snapshot_so_pruning_goes_on() -> None:
    """An idle share-partition's old snapshot would hold the prune point back for ever:
    a cold-partition snapshot (Kafka's) of it moves the point past everything before."""
    idle = ShareKey("idle", TOPIC, 0)
    shard = ShareStateShard(updates_per_snapshot=1)
    log: list[tuple[bytes, bytes | None]] = []

    def append(records: list[tuple[bytes, bytes | None]]) -> None:
        for k, v in records:
            shard.replay(k, v, len(log))
            log.append((k, v))

    append(shard.write(idle, 0, 1, 5, [B(5, 6, AVAILABLE, 1)]).records)  # 0
    for first in range(1, 5):  # KEY busy: snapshots at 1, 3; updates at 2, 4
        append(shard.write(KEY, 0, 1, first, [B(first, first, ACKED, 1)]).records)
    assert shard.prune_offset() == 0  # the idle one's snapshot at 0
    out = shard.refresh_snapshots()
    assert out.response == 2  # idle's (records after it) and KEY's (an update after it)
    append(out.records)  # 5, 6
    assert shard.prune_offset() == 5
    again = ShareStateShard()
    for offset, (k, v) in enumerate(log[5:], start=5):
        again.replay(k, v, offset)
    assert again.states[idle].batches == shard.states[idle].batches
    assert again.states[KEY].start_offset == shard.states[KEY].start_offset
    # next time, only those with records after their snapshot: idle's, not KEY's (last)
    assert shard.refresh_snapshots().response == 1


def test_the_delivery_complete_count_is_of_offsets_past_the_start() -> None:
    """ReadShareGroupStateSummary v1's DeliveryCompleteCount (KIP-1226), which a
    share-partition's lag subtracts: acknowledged and archived offsets at or past the
    start offset, available and acquired ones not."""
    from keeperless.coordinator.share_records import StateBatch
    from keeperless.coordinator.share_state import ShareState, delivery_complete

    batches = (StateBatch(5, 12, 2, 1), StateBatch(13, 14, 0, 1), StateBatch(15, 20, 4, 5),
               StateBatch(21, 22, 1, 1), StateBatch(2, 4, 4, 1))  # fmt: skip
    assert delivery_complete(ShareState(0, 1, 0, 10, batches)) == 3 + 6
    assert delivery_complete(ShareState(0, 1, 0, 23, batches)) == 0
    assert delivery_complete(ShareState(0, 1, 0, 10, ())) == 0
