"""What one ``__consumer_offsets`` partition holds, read back from its records (the
replay half of Kafka's ``GroupCoordinatorShard``: ``OffsetMetadataManager.replay`` and
``GroupMetadataManager.replay``).

Record keys, by the version that starts them: 0 and 1 an offset commit (group, topic,
partition; its value the offset, leader epoch, metadata, commit time), 2 a classic
group's metadata (``group_records.py``), 3-8 a consumer-protocol group's
(``consumer_group_records.py``), 9-12 a share group's (``share_group_records.py``). A
null value is a tombstone: the last record of a key wins.

Offsets committed in a transaction (a transactional batch) are held per producer until
that producer's marker on this partition commits them or drops them; a committed one
applies unless the group's offset for that partition was committed later in the log.
The shard is the live state of the partition's offsets: the coordinator's writes are
replayed into it as they are appended, and a transaction's marker as it is written. The
groups' stored metadata is kept as read; the coordinator builds the live groups from it
once the whole partition is read, and keeps them itself from then on (``hand_over``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from keeperless.coordinator.consumer_group_records import CONSUMER_GROUP_KEY_TYPES, key_group
from keeperless.coordinator.group_records import (
    GROUP_KEY_VERSION,
    GroupSnapshot,
    decode_group_value,
)
from keeperless.coordinator.share_group_records import (
    SHARE_GROUP_KEY_TYPES,
    StoredShareGroup,
    decode,
    group_of,
)

__all__ = [
    "Committed",
    "GroupShard",
    "Offsets",
    "install",
    "materialize",
    "offset_key",
    "offset_value",
]

_S16 = struct.Struct(">h")


class Committed(NamedTuple):
    """A committed offset, and where its commit record is in the log."""

    offset: int
    leader_epoch: int
    metadata: str | None
    record_offset: int = -1


# a group's committed offsets: (topic, partition) -> its commit
Offsets = dict[tuple[str, int], Committed]


def install(offsets: Offsets, tp: tuple[str, int], commit: Committed) -> None:
    """Take ``commit`` unless the group has a commit of that partition written after it.
    Kafka's rule (OffsetMetadataManager) where plain and transactional commits mix: the
    record later in the log wins, whichever order the transaction's marker and the
    acknowledgement of a plain commit come in, so that the coordinator that reads the
    partition again finds what was answered."""
    cur = offsets.get(tp)
    if cur is None or commit.record_offset > cur.record_offset:
        offsets[tp] = commit


def drop_pending(
    pending_txn: dict[int, dict[str, Offsets]], group: str, tps: list[tuple[str, int]]
) -> None:
    """A group's offsets deleted (DeleteGroups, OffsetDelete): gone from every open
    transaction too, so that a transaction committed later does not bring them back
    (Kafka's OffsetMetadataManager replays a tombstone so)."""
    for pid, pending in list(pending_txn.items()):
        offsets = pending.get(group)
        if offsets:
            for tp in tps:
                offsets.pop(tp, None)
        if group in pending and not offsets:
            del pending[group]  # (no group of nothing, to come back at the marker)
        if not pending:
            del pending_txn[pid]


def forget(
    offsets: dict[str, Offsets], group: str, deleted: list[tuple[tuple[str, int], int]]
) -> None:
    """Tombstones acknowledged ((partition, the tombstone's offset) each): a commit written
    after a tombstone (a transaction's, applied at its marker) stays."""
    mine = offsets.get(group)
    if mine is None:
        return
    for tp, at in deleted:
        cur = mine.get(tp)
        if cur is not None and cur.record_offset < at:
            del mine[tp]
    if not mine:
        del offsets[group]


def materialize(into: dict[str, Offsets], pending: dict[str, Offsets]) -> None:
    """A committed transaction's offsets, each installed as ``install`` says."""
    for gid, offsets in pending.items():
        if not offsets:
            continue  # (a group whose pending offsets were all deleted)
        mine = into.setdefault(gid, {})
        for tp, commit in offsets.items():
            install(mine, tp, commit)


def _str(s: str | None) -> bytes:
    if s is None:
        return _S16.pack(-1)
    b = s.encode()
    return _S16.pack(len(b)) + b


def _read_str(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = _S16.unpack_from(buf, pos)
    if n < 0:
        return None, pos + 2
    return buf[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


def offset_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey version 1."""
    return _S16.pack(1) + _str(group) + _str(topic) + struct.pack(">i", partition)


def offset_value(offset: int, leader_epoch: int, metadata: str | None, ts: int) -> bytes:
    """OffsetCommitValue version 3."""
    return (
        _S16.pack(3)
        + struct.pack(">qi", offset, leader_epoch)
        + _str(metadata or "")
        + struct.pack(">q", ts)
    )


def _decode_offset(value: bytes) -> tuple[int, int, str | None]:
    (vv,) = _S16.unpack_from(value, 0)
    (offset,) = struct.unpack_from(">q", value, 2)
    epoch, pos = (-1, 10)
    if vv >= 3:
        (epoch,) = struct.unpack_from(">i", value, 10)
        pos = 14
    metadata, _ = _read_str(value, pos)
    return offset, epoch, metadata


@dataclass
class GroupShard:
    offsets: dict[str, Offsets] = field(default_factory=dict)
    # offsets of open transactions: producer id -> group -> offsets
    pending_txn: dict[int, dict[str, Offsets]] = field(default_factory=dict)
    # stored metadata, the last record of each group (None: deleted)
    classic: dict[str, GroupSnapshot | None] = field(default_factory=dict)
    consumer: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    share: dict[str, StoredShareGroup | None] = field(default_factory=dict)
    offsets_read: int = 0  # offset commits and their tombstones replayed
    skipped: int = 0  # records that do not parse as any of the coordinator's
    # the coordinator took the groups' metadata: later records of it are not kept here
    handed_over: bool = False

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int,
        producer_id: int = -1,
        transactional: bool = False,
    ) -> None:
        try:
            self._replay(key, value, offset, producer_id, transactional)
        except (struct.error, ValueError, IndexError, KeyError):
            # a record no coordinator wrote (Kafka's loader skips unknown record types)
            self.skipped += 1

    def _replay(
        self, key: bytes, value: bytes | None, offset: int, producer_id: int, transactional: bool
    ) -> None:
        (version,) = _S16.unpack_from(key, 0)
        if version in (0, 1):
            group, pos = _read_str(key, 2)
            topic, pos = _read_str(key, pos)
            (partition,) = struct.unpack_from(">i", key, pos)
            if group is None or topic is None:
                return
            into = self.pending_txn.setdefault(producer_id, {}) if transactional else self.offsets
            self.offsets_read += 1
            if value is None:
                offsets = into.get(group, {})
                offsets.pop((topic, partition), None)
                if not offsets:
                    into.pop(group, None)  # (a deleted group leaves nothing behind)
                if not transactional:  # (and from every open transaction, as Kafka's)
                    drop_pending(self.pending_txn, group, [(topic, partition)])
            else:
                offsets = into.setdefault(group, {})
                offsets[(topic, partition)] = Committed(*_decode_offset(value), offset)
        elif transactional or self.handed_over:
            return  # only offsets are written in transactions; the live groups are kept
        elif version == GROUP_KEY_VERSION:
            gid, _ = _read_str(key, 2)
            if gid is not None:
                self.classic[gid] = None if value is None else decode_group_value(value)
        elif version in CONSUMER_GROUP_KEY_TYPES:
            _kind, gid, _member = key_group(key)
            records = self.consumer.setdefault(gid, {})
            if value is None:
                records.pop(key, None)
            elif version != 4:  # (the partition metadata is looked up again)
                records[key] = value
        elif version in SHARE_GROUP_KEY_TYPES:
            gid = group_of(key)
            if value is None:  # the share group was deleted
                self.share[gid] = None
            else:
                stored = self.share.get(gid) or StoredShareGroup()
                decode(key, value, stored)
                self.share[gid] = stored

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """A transaction's marker on this partition: its offsets apply, or go."""
        pending = self.pending_txn.pop(producer_id, None)
        if pending and commit:
            materialize(self.offsets, pending)

    def carry_over(self, previous: object) -> None:
        """(The coordinator keeps its live groups itself; the offsets are all in the
        records.)"""

    def hand_over(self) -> None:
        """The coordinator took the groups' metadata that was read and keeps the live
        groups: forget it here (the offsets stay: they are this shard's)."""
        self.classic, self.consumer, self.share = {}, {}, {}
        self.handed_over = True
