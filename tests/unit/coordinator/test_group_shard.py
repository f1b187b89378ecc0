"""Reading a __consumer_offsets partition back (the group coordinator's load): offsets
with their tombstones, offsets of transactions applied or dropped by their markers, and
each kind of group's stored metadata, the last record of a key winning."""

from __future__ import annotations

from keeperless.coordinator.group_records import (
    GroupSnapshot,
    MemberSnapshot,
    encode_group_value,
    group_key,
)
from keeperless.coordinator.group_shard import GroupShard, offset_key, offset_value


def test_offsets_the_last_commit_wins_and_a_tombstone_deletes() -> None:
    s = GroupShard()
    s.replay(offset_key("g", "t", 0), offset_value(5, 2, "m", 1), 0)
    s.replay(offset_key("g", "t", 0), offset_value(9, 3, None, 2), 1)
    s.replay(offset_key("g", "t", 1), offset_value(4, -1, "", 2), 2)
    s.replay(offset_key("g", "t", 1), None, 3)
    assert s.offsets == {"g": {("t", 0): (9, 3, "", 1)}}  # (its record's offset last)
    assert s.offsets_read == 4


def test_transactional_offsets_wait_for_their_producers_marker() -> None:
    s = GroupShard()
    s.replay(offset_key("g", "t", 0), offset_value(1, 0, "", 0), 0)
    s.replay(offset_key("g", "t", 0), offset_value(7, 0, "", 0), 1, 11, transactional=True)
    s.replay(offset_key("h", "t", 0), offset_value(8, 0, "", 0), 2, 12, transactional=True)
    assert s.offsets == {"g": {("t", 0): (1, 0, "", 0)}}  # nothing open is visible
    s.replay_marker(12, commit=False)  # aborted: gone
    s.replay_marker(11, commit=True)
    assert s.offsets == {"g": {("t", 0): (7, 0, "", 1)}}
    assert s.pending_txn == {}
    s.replay_marker(11, commit=True)  # a marker with nothing open: nothing
    assert s.offsets == {"g": {("t", 0): (7, 0, "", 1)}}


def test_a_committed_transactions_offset_gives_way_to_a_plain_commit_written_after_it() -> None:
    """Kafka's rule: of a plain and a transactional commit of one partition, the one
    written later in the log wins (a transaction's offsets apply at its marker, which
    can come after a later plain commit)."""
    s = GroupShard()
    s.replay(offset_key("g", "t", 0), offset_value(5, 0, "", 0), 10, 11, transactional=True)
    s.replay(offset_key("g", "t", 1), offset_value(6, 0, "", 0), 11, 11, transactional=True)
    s.replay(offset_key("g", "t", 0), offset_value(9, 0, "", 0), 12)  # plain, later
    s.replay_marker(11, commit=True)
    assert s.offsets["g"][("t", 0)].offset == 9
    assert s.offsets["g"][("t", 1)].offset == 6  # no later commit of that one
    s.replay(offset_key("g", "t", 0), offset_value(3, 0, "", 0), 13, 12, transactional=True)
    s.replay_marker(12, commit=True)
    assert s.offsets["g"][("t", 0)] == (3, 0, "", 13)  # the transaction's is later


def test_a_classic_groups_last_metadata_wins_and_a_tombstone_marks_it_deleted() -> None:
    member = MemberSnapshot("m1", None, "c", "/h", 300, 10, b"sub", b"as")
    first = GroupSnapshot("consumer", 1, "range", "m1", 5, (member,))
    second = GroupSnapshot("consumer", 2, "range", "m1", 6, (member,))
    s = GroupShard()
    s.replay(group_key("g"), encode_group_value(first), 0)
    s.replay(group_key("g"), encode_group_value(second), 1)
    s.replay(group_key("gone"), encode_group_value(first), 2)
    s.replay(group_key("gone"), None, 3)
    assert s.classic == {"g": second, "gone": None}
    # group metadata in a transactional batch is not a group's: ignored
    s.replay(group_key("x"), encode_group_value(first), 4, 9, transactional=True)
    assert "x" not in s.classic
    assert s.offsets_read == 0


def test_once_handed_over_the_shard_keeps_offsets_not_group_metadata() -> None:
    """The coordinator keeps the live groups after a load; the shard stays the live
    state of the offsets (replayed as the coordinator writes) and keeps no copy of the
    groups' metadata, which would only grow."""
    snap = GroupSnapshot("consumer", 1, "range", "m1", 5, ())
    s = GroupShard()
    s.replay(group_key("g"), encode_group_value(snap), 0)
    assert "g" in s.classic
    s.hand_over()
    assert s.classic == {}
    s.replay(group_key("g"), encode_group_value(snap), 1)
    s.replay(offset_key("g", "t", 0), offset_value(5, 0, "", 0), 2)
    assert s.classic == {}
    assert s.offsets == {"g": {("t", 0): (5, 0, "", 2)}}
