"""Committed offsets are as durable as acks=all writes, and a coordinator that loses a
group's partition forgets the group (found by the fault harness: a coordinator answered
commits before its followers had them; killed, its successor went back in time)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_fetch.v8 import request as of

from keeperless.broker.broker import Broker
from keeperless.coordinator.group_shard import offset_key, offset_value
from keeperless.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, GroupSettings
from keeperless.group.offsets import GroupOffsets
from keeperless.metadata import _records_gen as r
from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.records import build_batch
from tests.unit.brokers import make_broker

TID = uuid.uuid4()
GROUP = "g"


def _broker(tmp_path: Path) -> Broker:
    return make_broker(tmp_path, offsets_rf=2)


def _setup(tmp_path: Path) -> tuple[Broker, GroupOffsets]:
    b = _broker(tmp_path)
    gc = GroupCoordinator(b, GroupSettings(offsets_commit_timeout_ms=60_000))
    b.on_committed(
        [
            r.TopicRecord(name=OFFSETS_TOPIC, topic_id=TID),
            r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1, 2), isr=(1, 2), leader=1),
            r.TopicRecord(name="t", topic_id=uuid.uuid4()),
        ],
        3,
    )
    return b, GroupOffsets(gc)


def _commit(offset: int) -> Any:
    part = oc.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
    )
    return oc.OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(oc.OffsetCommitRequestTopic(name="t", partitions=(part,)),),
    )


def _header(key: int, version: int = 8) -> RequestHeader:
    return RequestHeader(key, version, 1, "test")


async def _committed(offsets: GroupOffsets) -> int:
    req = of.OffsetFetchRequest(
        groups=(of.OffsetFetchRequestGroup(group_id=GROUP, topics=None),), require_stable=False
    )
    resp = await offsets.offset_fetch(_header(9), req)
    topics = resp.groups[0].topics
    return -1 if not topics else int(topics[0].partitions[0].committed_offset)


def test_a_commit_is_answered_only_once_the_in_sync_replicas_have_it(tmp_path: Path) -> None:
    async def go() -> None:
        b, offsets = _setup(tmp_path)
        task = asyncio.create_task(offsets.offset_commit(_header(8), _commit(42)))
        await asyncio.sleep(0.05)
        assert not task.done(), "acknowledged before follower 2 had the commit"
        # a fetch meanwhile is answered once the commit is durable, never before
        fetch = asyncio.create_task(_committed(offsets))
        await asyncio.sleep(0.05)
        assert not fetch.done(), "an offset answered before it was durable"
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        p.record_follower_fetch(2, p.log.log_end_offset, 0)
        resp = await asyncio.wait_for(task, 5)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.none
        assert await asyncio.wait_for(fetch, 5) == 42
        assert await _committed(offsets) == 42
        b.close()

    asyncio.run(go())


def test_a_commit_that_loses_its_leader_is_refused_and_not_visible(tmp_path: Path) -> None:
    async def go() -> None:
        b, offsets = _setup(tmp_path)
        task = asyncio.create_task(offsets.offset_commit(_header(8), _commit(42)))
        await asyncio.sleep(0.05)
        b.on_committed(
            [r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=2, isr=(2,))], 4
        )
        resp = await asyncio.wait_for(task, 5)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.not_coordinator
        b.close()

    asyncio.run(go())


def test_a_coordinator_that_leads_again_reads_what_was_committed_meanwhile(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        b, offsets = _setup(tmp_path)
        task = asyncio.create_task(offsets.offset_commit(_header(8), _commit(10)))
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        await asyncio.sleep(0)
        p.record_follower_fetch(2, p.log.log_end_offset, 0)
        await asyncio.wait_for(task, 5)
        assert await _committed(offsets) == 10
        # broker 2 becomes the coordinator; a commit of 20 reaches this broker as a replica
        b.on_committed(
            [r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=2, isr=(1, 2))], 4
        )
        assert p.is_leader is False
        batch = bytearray(
            build_batch([(offset_key(GROUP, "t", 0), offset_value(20, -1, "", 0), ())])
        )
        batch[0:8] = p.log.log_end_offset.to_bytes(8, "big")
        batch[12:16] = (1).to_bytes(4, "big")
        from keeperless.protocol.records import iter_batches, patch_offsets

        for pos, _ in iter_batches(batch):
            patch_offsets(batch, pos, p.log.log_end_offset, 1)
        p.append_replica(bytes(batch), 0)
        # leadership comes back: the group is read again, not served from the old cache
        b.on_committed(
            [r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=1, isr=(1, 2))], 5
        )
        assert await _committed(offsets) == 20
        b.close()

    asyncio.run(go())


def test_a_txn_offset_commit_is_pending_from_its_append_so_an_early_marker_ends_it(
    tmp_path: Path,
) -> None:
    """Offsets committed in a transaction are pending (not fetched as stable) from the
    moment they are in the log: the transaction's marker can follow them before the
    followers acknowledge them (the coordinator aborting it on timeout) - found by the
    fault harness, where such offsets stayed pending for ever and every stable offset
    fetch of the group failed."""
    from kio.schema.txn_offset_commit.v3 import request as tc

    from keeperless.txn.offsets import TxnOffsets

    async def go() -> None:
        b, offsets = _setup(tmp_path)
        gc = offsets.gc
        txn = TxnOffsets(gc, offsets)
        req = tc.TxnOffsetCommitRequest(
            transactional_id="x", group_id=GROUP, producer_id=7, producer_epoch=0,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=(tc.TxnOffsetCommitRequestTopic(name="t", partitions=(
                tc.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                   committed_leader_epoch=-1,
                                                   committed_metadata=""),)),),
        )  # fmt: skip
        task = asyncio.create_task(txn.txn_offset_commit(RequestHeader(28, 3, 1, "c"), req))
        await asyncio.sleep(0.05)
        assert not task.done()  # appended, waiting for replica 2
        assert gc.pending_partitions(GROUP) == {("t", 0)}
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        p.append_marker(7, 1, False, 0, 0)  # aborted on timeout, epoch bumped
        txn.on_marker(0, 7, False)
        assert gc.pending_partitions(GROUP) == set()
        p.record_follower_fetch(2, p.log.log_end_offset, 0)
        await asyncio.wait_for(task, 5)
        assert gc.pending_partitions(GROUP) == set()
        assert gc.offsets.get(GROUP, {}).get(("t", 0)) is None  # aborted: never applied
        # the fenced producer's late commit is refused
        late = await txn.txn_offset_commit(RequestHeader(28, 3, 2, "c"), req)
        assert late.topics[0].partitions[0].error_code == ErrorCode.invalid_producer_epoch
        b.close()

    asyncio.run(go())


def _txn_commit(member: str, generation: int, offset: int = 5) -> Any:
    from kio.schema.txn_offset_commit.v3 import request as tc

    part = tc.TxnOffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
        committed_metadata="",
    )  # fmt: skip
    return tc.TxnOffsetCommitRequest(
        transactional_id="x", group_id=GROUP, producer_id=7, producer_epoch=0,
        generation_id=generation, member_id=member, group_instance_id=None,
        topics=(tc.TxnOffsetCommitRequestTopic(name="t", partitions=(part,)),),
    )  # fmt: skip


def _stable_group(offsets: GroupOffsets, member: str, generation: int) -> Any:
    from keeperless.coordinator.classic_group import Group, GroupState, Member
    from keeperless.coordinator.runtime import LoopTimer

    g = Group(GROUP, 0, LoopTimer(), 1)
    g.members[member] = Member(member, None, "c", "h", 6000, 6000, "consumer", [("range", b"")])
    g.generation, g.state, g.protocol_type = generation, GroupState.STABLE, "consumer"
    offsets.gc.groups[GROUP] = g
    return g


def test_a_txn_offset_commit_of_a_member_the_coordinator_does_not_know_is_refused(
    tmp_path: Path,
) -> None:
    """Found by the fault harness (seed 101): the copier's group coordinator failed over
    while its transaction waited; the new coordinator, whose group had no members yet,
    took the old member's offsets - after the group's next member had fetched the
    offsets before them and read those records again: copied twice, both committed.
    Kafka refuses a member the group does not have (UNKNOWN_MEMBER_ID)."""
    from keeperless.txn.offsets import TxnOffsets

    async def go() -> None:
        b, offsets = _setup(tmp_path)
        txn = TxnOffsets(offsets.gc, offsets)
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        end = p.log.log_end_offset
        for other in (None, "new-member"):  # a group it does not know, then other members
            if other is not None:
                _stable_group(offsets, other, 1)
            resp = await txn.txn_offset_commit(RequestHeader(28, 3, 1, "c"), _txn_commit("old", 1))
            assert resp.topics[0].partitions[0].error_code == ErrorCode.unknown_member_id, other
            assert offsets.gc.pending_partitions(GROUP) == set()
            assert p.log.log_end_offset == end  # nothing written
        b.close()

    asyncio.run(go())


def test_a_rebalance_while_a_txn_offset_commit_is_verified_fences_it(tmp_path: Path) -> None:
    """The member is checked after the transaction coordinator's verification, with
    nothing between the check and the append: a member whose generation ended during
    the wait no longer writes the offsets of partitions now assigned elsewhere."""
    from keeperless.txn.offsets import TxnOffsets

    async def go() -> None:
        b, offsets = _setup(tmp_path)
        txn = TxnOffsets(offsets.gc, offsets)
        g = _stable_group(offsets, "m1", 3)
        verifying = asyncio.Event()
        release = asyncio.Event()

        async def verify(tid: str, pid: int, epoch: int, keys: Any, add: bool) -> Any:
            verifying.set()
            await release.wait()
            return {k: ErrorCode.none for k in keys}

        txn.verify = verify
        task = asyncio.create_task(
            txn.txn_offset_commit(RequestHeader(28, 3, 1, "c"), _txn_commit("m1", 3))
        )
        await asyncio.wait_for(verifying.wait(), 5)
        g.generation = 4  # the group rebalanced meanwhile
        release.set()
        resp = await asyncio.wait_for(task, 5)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
        assert offsets.gc.pending_partitions(GROUP) == set()
        # the member at the group's generation commits; so does a producer that names
        # no member (TxnOffsetCommit before v3: Kafka lets it commit)
        txn.verify = None
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        for member, generation in (("m1", 4), ("", -1)):
            task = asyncio.create_task(
                txn.txn_offset_commit(RequestHeader(28, 3, 2, "c"), _txn_commit(member, generation))
            )
            await asyncio.sleep(0.05)
            assert offsets.gc.pending_partitions(GROUP) == {("t", 0)}, member  # appended
            p.record_follower_fetch(2, p.log.log_end_offset, 0)
            resp = await asyncio.wait_for(task, 5)
            assert resp.topics[0].partitions[0].error_code == ErrorCode.none, member
        b.close()

    asyncio.run(go())


def test_a_coordinator_loads_offsets_written_past_every_read_window(tmp_path: Path) -> None:
    """Loading a group's partition reads all of it, whatever its size (it read 1 MiB
    slices and failed at the first batch one of them cut: issue 23's audit)."""
    from keeperless.protocol.records import iter_batches, patch_offsets
    from keeperless.storage.batch_scan import SCAN_WINDOW_BYTES

    async def go() -> None:
        b, offsets = _setup(tmp_path)
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        b.on_committed(
            [r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=2, isr=(1, 2))], 4
        )
        metadata = "m" * 30_000  # batches of ~330 KB straddle every window boundary
        last = 0
        while p.log.size_bytes < 3 * SCAN_WINDOW_BYTES:
            last += 1
            key = offset_key(GROUP, "t", 0)
            batch = bytearray(
                build_batch(
                    [(key, offset_value(last * 11 + i, -1, metadata, 0), ()) for i in range(11)]
                )
            )
            for pos, _ in iter_batches(batch):
                patch_offsets(batch, pos, p.log.log_end_offset, 1)
            p.append_replica(bytes(batch), 0)
        b.on_committed(
            [r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=1, isr=(1, 2))], 5
        )
        assert await _committed(offsets) == last * 11 + 10
        b.close()

    asyncio.run(go())


def test_a_join_waiting_in_a_group_deleted_meanwhile_is_answered(tmp_path: Path) -> None:
    """DeleteGroups of an empty classic group writes its tombstones; a JoinGroup that
    came during that write waits in the group, which is then deleted: the join is told
    NOT_COORDINATOR at once (it looks the coordinator up again and joins a new group),
    not left to a timer of a group nobody holds (found by a fresh-eyes review)."""
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

    from keeperless.coordinator.classic_group import JoinResult
    from keeperless.coordinator.deferred import Deferred
    from keeperless.coordinator.runtime import wait
    from tests.unit.broker.test_groups import _req

    async def go() -> ErrorCode:
        b, offsets = _setup(tmp_path)
        gc = offsets.gc
        g = gc.new_group(GROUP)
        g.initial_delay_ms = 60_000  # the first generation waits for its timer
        gc.groups[GROUP] = g
        release = asyncio.Event()

        async def slow_store(*_a: object, **_k: object) -> None:
            await release.wait()

        gc.store = slow_store  # type: ignore[method-assign]
        deleting = asyncio.create_task(
            offsets.delete_groups(_header(42, 2), DeleteGroupsRequest(groups_names=(GROUP,)))
        )
        await asyncio.sleep(0.05)
        joined = g.join(_req(), "c", "/h", 9, 0.0)  # came during the write
        if not isinstance(joined, Deferred):
            joined = g.join(_req(joined.member_id), "c", "/h", 9, 0.0)
        assert isinstance(joined, Deferred)
        release.set()
        await deleting
        assert GROUP not in gc.groups
        res: JoinResult = await asyncio.wait_for(wait(joined), 1)
        b.close()
        return res.error

    assert asyncio.run(go()) == ErrorCode.not_coordinator


def test_plain_and_transactional_commits_the_later_record_wins_live_and_on_reload(
    tmp_path: Path,
) -> None:
    """Kafka's rule where a group's plain and transactional commits of one partition
    mix: the commit written later in the log wins, whichever order the transaction's
    marker and the plain commit's acknowledgement come in. Before, the coordinator took
    whichever was applied last: a marker after a later plain commit put the older
    transactional offset back, and a plain commit acknowledged after a later
    transaction's marker hid it - while the coordinator that read the partition again
    found the other one (an offset that changes at a coordinator failover)."""
    from keeperless.txn.offsets import TxnOffsets

    def reloaded(b: Broker) -> int:
        return _reloaded(b).offsets[GROUP][("t", 0)].offset

    async def go(txn_first: bool) -> tuple[int, int]:
        path = tmp_path / str(txn_first)
        path.mkdir()
        b, offsets = _setup(path)
        txn = TxnOffsets(offsets.gc, offsets)
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        tasks = []
        for txn_now in (txn_first, not txn_first):
            req = _txn_commit("", -1, 5) if txn_now else _commit(9)
            handler = txn.txn_offset_commit if txn_now else offsets.offset_commit
            tasks.append(asyncio.create_task(handler(RequestHeader(28 if txn_now else 8,
                                                                   3 if txn_now else 8, 1, "c"),
                                                     req)))  # fmt: skip
            await asyncio.sleep(0.05)  # appended, waiting for replica 2
        p.append_marker(7, 0, True, 0, 0)  # the transaction commits
        txn.on_marker(0, 7, True)
        p.record_follower_fetch(2, p.log.log_end_offset, 0)
        for t in tasks:
            await asyncio.wait_for(t, 5)
        live = await _committed(offsets)
        on_reload = reloaded(b)
        b.close()
        return live, on_reload

    assert asyncio.run(go(txn_first=True)) == (9, 9)  # the plain commit is later
    assert asyncio.run(go(txn_first=False)) == (5, 5)  # the transaction's is later


def test_deleted_offsets_stay_deleted_when_an_open_transaction_commits(tmp_path: Path) -> None:
    """Kafka's rule (found by review): DeleteGroups and OffsetDelete also write
    tombstones for offsets only an open transaction holds, and a tombstone drops the
    partition from the group's open transactions, so that the transaction's commit
    marker does not bring a deleted offset back - live, and on reload."""
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

    from keeperless.txn.offsets import TxnOffsets

    async def go() -> tuple[int, bool]:
        b, offsets = _setup(tmp_path)
        txn = TxnOffsets(offsets.gc, offsets)
        await _acked(b, txn.txn_offset_commit(RequestHeader(28, 3, 1, "c"), _txn_commit("", -1, 5)))
        assert offsets.gc.pending_partitions(GROUP) == {("t", 0)}
        resp = await _acked(b, offsets.delete_groups(
            _header(42, 2), DeleteGroupsRequest(groups_names=(GROUP,))))  # fmt: skip
        assert resp.results[0].error_code == ErrorCode.none  # (a group of pending offsets)
        assert offsets.gc.pending_partitions(GROUP) == set()
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        assert p is not None
        p.append_marker(7, 0, True, 0, 0)  # the transaction commits afterwards
        txn.on_marker(0, 7, True)
        live = await _committed(offsets)
        shard = _reloaded(b)
        b.close()
        return live, ("t", 0) in shard.offsets.get(GROUP, {})

    assert asyncio.run(go()) == (-1, False)


def test_a_tombstone_read_back_drops_the_partition_from_open_transactions() -> None:
    from keeperless.coordinator.group_shard import GroupShard

    s = GroupShard()
    s.replay(offset_key(GROUP, "t", 0), offset_value(3, 0, "", 0), 9)
    s.replay(offset_key(GROUP, "t", 0), offset_value(5, 0, "", 0), 10, 11, transactional=True)
    s.replay(offset_key(GROUP, "t", 1), offset_value(6, 0, "", 0), 11, 11, transactional=True)
    s.replay(offset_key(GROUP, "t", 0), None, 12)  # DeleteGroups / OffsetDelete
    s.replay_marker(11, commit=True)
    assert ("t", 0) not in s.offsets.get(GROUP, {})
    assert s.offsets[GROUP][("t", 1)].offset == 6  # not deleted: committed


# found by a second review: OffsetDelete of pending-only offsets, and no empty group left
async def _acked(b: Any, coro: Any) -> Any:
    task = asyncio.create_task(coro)
    await asyncio.sleep(0.05)
    p = b.partitions.get(OFFSETS_TOPIC, 0)
    p.record_follower_fetch(2, p.log.log_end_offset, 0)
    return await asyncio.wait_for(task, 5)


def test_offset_delete_of_a_group_with_only_pending_offsets_tombstones_them(tmp_path: Path) -> None:
    """Kafka: a transactional offset replay creates a (simple) group, so OffsetDelete
    finds it and tombstones the pending offset; the commit marker then does not bring
    the offset back."""
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )

    from keeperless.txn.offsets import TxnOffsets

    async def go() -> tuple[int, int]:
        b, offsets = _setup(tmp_path)
        txn = TxnOffsets(offsets.gc, offsets)
        await _acked(b, txn.txn_offset_commit(RequestHeader(28, 3, 1, "c"), _txn_commit("", -1, 5)))
        req = OffsetDeleteRequest(
            group_id=GROUP,
            topics=(
                OffsetDeleteRequestTopic(
                    name="t", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
                ),
            ),
        )
        resp = await _acked(b, offsets.offset_delete(_header(47, 0), req))
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        p.append_marker(7, 0, True, 0, 0)
        txn.on_marker(0, 7, True)
        live = await _committed(offsets)
        b.close()
        return int(resp.error_code), live

    assert asyncio.run(go()) == (ErrorCode.none, -1)


def test_a_deleted_group_does_not_come_back_empty_when_a_transaction_commits(
    tmp_path: Path,
) -> None:
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
    from kio.schema.list_groups.v4.request import ListGroupsRequest

    from keeperless.txn.offsets import TxnOffsets

    async def go() -> list[str]:
        b, offsets = _setup(tmp_path)
        txn = TxnOffsets(offsets.gc, offsets)
        await _acked(b, txn.txn_offset_commit(RequestHeader(28, 3, 1, "c"), _txn_commit("", -1, 5)))
        resp = await _acked(
            b, offsets.delete_groups(_header(42, 2), DeleteGroupsRequest(groups_names=(GROUP,)))
        )
        assert resp.results[0].error_code == ErrorCode.none
        p = b.partitions.get(OFFSETS_TOPIC, 0)
        p.append_marker(7, 0, True, 0, 0)
        txn.on_marker(0, 7, True)
        lg = await offsets.list_groups(_header(16, 4), ListGroupsRequest(states_filter=()))
        b.close()
        return [g.group_id for g in lg.groups]

    assert asyncio.run(go()) == []


def test_a_replayed_deletion_leaves_no_empty_group() -> None:
    from keeperless.coordinator.group_shard import GroupShard

    s = GroupShard()
    s.replay(offset_key(GROUP, "t", 0), offset_value(3, 0, "", 0), 9)
    s.replay(offset_key(GROUP, "t", 0), None, 10)
    assert GROUP not in s.offsets  # live forget() deletes the group's entry


def _reloaded(b: Broker) -> Any:
    """The group coordinator's shard as a new coordinator reads __consumer_offsets-0."""
    from keeperless.broker.coordinator_log import BrokerPartitionLog
    from keeperless.coordinator.group_shard import GroupShard
    from keeperless.coordinator.runtime import TxnMarker

    shard = GroupShard()
    for e in BrokerPartitionLog(b).records(OFFSETS_TOPIC, 0):
        if isinstance(e, TxnMarker):
            shard.replay_marker(e.producer_id, e.commit)
        else:
            shard.replay(e.key, e.value, e.offset, e.producer_id, e.transactional)
    return shard


def test_a_member_commits_while_its_group_prepares_a_rebalance(tmp_path: Path) -> None:
    """Kafka's validateOffsetCommit: a member of the current generation commits while
    the group waits for its members to join again (an eager consumer commits as it gives
    its partitions up); only between the join and the sync is it told to rejoin. Refused
    in PreparingRebalance too, librdkafka's eager groups read again what they had
    consumed and kafka-python's commits raised (found by a helper's client tests)."""
    from keeperless.coordinator.classic_group import GroupState

    _b, offsets = _setup(tmp_path)
    g = _stable_group(offsets, "m1", 3)
    for state, generation, want in (
        (GroupState.STABLE, 3, None),
        (GroupState.PREPARING, 3, None),  # another member joins: m1 has not yet
        (GroupState.PREPARING, 2, ErrorCode.illegal_generation),
        (GroupState.COMPLETING, 3, ErrorCode.rebalance_in_progress),
    ):
        g.state = state
        assert offsets.member_error(GROUP, "m1", generation, None) == want, (state, generation)
        assert offsets.member_error(GROUP, "m1", generation, None, transactional=True) == (
            None if want == ErrorCode.rebalance_in_progress else want
        ), (state, generation)
    assert offsets.member_error(GROUP, "stranger", 3, None) == ErrorCode.unknown_member_id
