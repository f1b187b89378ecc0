"""Transaction version 2 (KIP-890 part 2): every transaction ends with an epoch bump that
EndTxn v5 hands to the producer, its markers carry the bumped epoch, a partition leader
adds a TV2 producer's partitions itself (AddPartitionsToTxn v5 for a Produce v12), a
producer whose epoch runs out gets a new id, and a partition holds a TV2 marker to a
strictly newer epoch - a late copy of one transaction's marker cannot end the next."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import Partition
from keeperless.broker.txn_markers import TxnMarkerWriter
from keeperless.coordinator.txn_records import (
    TxnMetadata,
    TxnStatus,
    parse_txn_record,
    txn_key,
    txn_value,
)
from keeperless.group.coordinator import GroupCoordinator, GroupSettings
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.records import build_batch
from keeperless.storage.log import LogConfig
from keeperless.tools.offsets_decoder import decode_transaction_record
from keeperless.txn.coordinator import TXN_TOPIC, TxnCoordinator, TxnSettings
from tests.unit.brokers import make_broker


def _topic(name: str) -> list[Any]:
    tid = uuid.uuid4()
    return [
        r.TopicRecord(name=name, topic_id=tid),
        r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1,), isr=(1,), leader=1),
    ]


async def _call(tc: TxnCoordinator, api: ApiKey, version: int, body: dict[str, Any]) -> Any:
    handler = tc.handlers()[api]
    return await handler(
        RequestHeader(api, version, 1, "c"), build(load_request_schema(api, version), body)
    )


def _setup(tmp_path: Path) -> tuple[Any, TxnCoordinator]:
    b = make_broker(tmp_path)
    b._producer_ids = list(range(1000, 1010))  # blocks the controller gave
    gc = GroupCoordinator(b, GroupSettings())
    tc = TxnCoordinator(b, TxnSettings(partitions=1), TxnMarkerWriter(b), gc.find_coordinator)
    b.on_committed([*_topic(TXN_TOPIC), *_topic("t")], 10)
    return b, tc


async def _init(tc: TxnCoordinator) -> tuple[int, int]:
    resp = await _call(tc, ApiKey.INIT_PRODUCER_ID, 5, {
        "transactional_id": "x", "transaction_timeout": datetime.timedelta(seconds=60),
        "producer_id": -1, "producer_epoch": -1})  # fmt: skip
    assert resp.error_code == ErrorCode.none
    return resp.producer_id, resp.producer_epoch


async def _end(tc: TxnCoordinator, version: int, pid: int, epoch: int, commit: bool = True) -> Any:
    return await _call(tc, ApiKey.END_TXN, version, {
        "transactional_id": "x", "producer_id": pid, "producer_epoch": epoch,
        "committed": commit})  # fmt: skip


async def _completed(tc: TxnCoordinator) -> TxnMetadata:
    for _ in range(200):
        md = tc.txns["x"]
        if md.state in (TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT) and not tc._tasks:
            return md
        await asyncio.sleep(0.01)
    raise AssertionError(f"not completed: {tc.txns['x']}")


def test_a_tv2_transaction_ends_with_an_epoch_bump_its_markers_carry(tmp_path: Path) -> None:
    async def go() -> None:
        b, tc = _setup(tmp_path)
        pid, epoch = await _init(tc)
        # the partition leader adds the partition for the producer's Produce v12
        got = await tc.verify("x", pid, epoch, [("t", 0)], add=True)
        assert got == {("t", 0): ErrorCode.none}
        md = tc.txns["x"]
        assert (md.state, md.partitions, md.client_tv) == (TxnStatus.ONGOING, {("t", 0)}, 2)
        p = b.partitions.get("t", 0)
        data = build_batch([(b"k", b"v", ())], producer_id=pid, producer_epoch=epoch,
                           base_sequence=0, transactional=True)  # fmt: skip
        assert p.append(data, 0, 1 << 20, 0).error == ErrorCode.none
        resp = await _end(tc, 5, pid, epoch)
        assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, pid, epoch + 1)
        md = await _completed(tc)
        assert (md.producer_id, md.producer_epoch) == (pid, epoch + 1)
        assert p.producers[pid].epoch == epoch + 1  # the marker carried the bumped epoch
        assert pid not in p.txns.ongoing
        # a retry of the EndTxn (its answer was lost) is answered with the new epoch
        again = await _end(tc, 5, pid, epoch)
        assert (again.error_code, again.producer_epoch) == (0, epoch + 1)
        assert (await _end(tc, 5, pid, epoch, commit=False)).error_code == (
            ErrorCode.invalid_txn_state
        )
        # a late write of the ended transaction: fenced at the partition and by the
        # coordinator (its epoch is behind)
        late = build_batch([(b"k", b"late", ())], producer_id=pid, producer_epoch=epoch,
                           base_sequence=1, transactional=True)  # fmt: skip
        assert p.append(late, 0, 1 << 20, 0).error == ErrorCode.invalid_producer_epoch
        assert await tc.verify("x", pid, epoch, [("t", 0)], add=True) == {
            ("t", 0): ErrorCode.producer_fenced
        }
        # the next transaction, with the new epoch, sequences from 0
        assert await tc.verify("x", pid, epoch + 1, [("t", 0)], add=True) == {
            ("t", 0): ErrorCode.none
        }
        nxt = build_batch([(b"k", b"next", ())], producer_id=pid, producer_epoch=epoch + 1,
                          base_sequence=0, transactional=True)  # fmt: skip
        assert p.append(nxt, 0, 1 << 20, 0).error == ErrorCode.none
        resp = await _end(tc, 5, pid, epoch + 1, commit=False)
        assert (resp.error_code, resp.producer_epoch) == (0, epoch + 2)
        await _completed(tc)
        tc.stop()
        b.close()

    asyncio.run(go())


def test_a_tv1_transaction_keeps_its_epoch(tmp_path: Path) -> None:
    """EndTxn v4 and below (every Python client today): no bump, as before; and a TV2
    add cannot reopen that epoch."""

    async def go() -> None:
        b, tc = _setup(tmp_path)
        pid, epoch = await _init(tc)
        add = await _call(tc, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "x", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})  # fmt: skip
        assert (
            add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        )
        resp = await _end(tc, 4, pid, epoch)
        assert resp.error_code == ErrorCode.none
        md = await _completed(tc)
        assert (md.producer_epoch, md.client_tv) == (epoch, 0)
        # a Produce v12 now (a late write of that transaction, same epoch) cannot begin
        # one: TRANSACTION_ABORTABLE, not a transaction opened by a stale record
        assert await tc.verify("x", pid, epoch, [("t", 0)], add=True) == {
            ("t", 0): ErrorCode.transaction_abortable
        }
        assert tc.txns["x"].state == TxnStatus.COMPLETE_COMMIT
        # a producer moving to TV2 (Kafka's client decides at each beginTransaction)
        # aborts on that error: nothing is open, it gets the next epoch, and goes on
        resp = await _end(tc, 5, pid, epoch, commit=False)
        assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, pid, epoch + 1)
        await _completed(tc)  # (PrepareAbort, then CompleteAbort: nothing to mark)
        assert await tc.verify("x", pid, epoch + 1, [("t", 0)], add=True) == {
            ("t", 0): ErrorCode.none
        }
        tc.stop()
        b.close()

    asyncio.run(go())


def test_a_tv2_producer_whose_epoch_runs_out_gets_a_new_id(tmp_path: Path) -> None:
    async def go() -> None:
        b, tc = _setup(tmp_path)
        pid, _ = await _init(tc)
        tc.txns["x"].producer_epoch = 32766  # as after 32766 transactions
        assert await tc.verify("x", pid, 32766, [("t", 0)], add=True) == {("t", 0): ErrorCode.none}
        resp = await _end(tc, 5, pid, 32766)
        assert resp.error_code == ErrorCode.none
        new_pid = resp.producer_id
        assert new_pid != pid
        assert resp.producer_epoch == 0
        md = await _completed(tc)
        assert (md.producer_id, md.producer_epoch, md.prev_producer_id) == (new_pid, 0, pid)
        assert md.next_producer_id == -1
        assert b.partitions.get("t", 0).producers[pid].epoch == 32767  # the last marker
        again = await _end(tc, 5, pid, 32766)  # a retry with the old id
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, new_pid, 0)
        assert await tc.verify("x", new_pid, 0, [("t", 0)], add=True) == {("t", 0): ErrorCode.none}
        tc.stop()
        b.close()

    asyncio.run(go())


def test_the_transaction_log_keeps_a_tv2_transaction_across_a_failover(tmp_path: Path) -> None:
    """Value v1 (flexible, once transaction.version >= 1): the client's transaction
    version and the producer ids survive a reload, so a retried EndTxn is known."""

    async def go() -> None:
        b, tc = _setup(tmp_path)
        b.on_committed([r.FeatureLevelRecord(name="transaction.version", feature_level=2)], 11)
        pid, epoch = await _init(tc)
        await tc.verify("x", pid, epoch, [("t", 0)], add=True)
        await _end(tc, 5, pid, epoch)
        await _completed(tc)
        tc.stop()
        fresh = TxnCoordinator(b, TxnSettings(partitions=1), TxnMarkerWriter(b), tc._find_group)
        fresh.runtime.on_leadership()  # read from the log
        md = fresh.txns["x"]
        assert (md.producer_epoch, md.client_tv, md.state) == (
            epoch + 1,
            2,
            TxnStatus.COMPLETE_COMMIT,
        )
        again = await _end(fresh, 5, pid, epoch)
        assert (again.error_code, again.producer_epoch) == (0, epoch + 1)
        fresh.stop()
        b.close()

    asyncio.run(go())


def test_value_records_of_both_versions_read_back(tmp_path: Path) -> None:
    md = TxnMetadata("x", 7, 3, 60000, TxnStatus.ONGOING, {("t", 0), ("t", 2), ("u", 1)},
                     start_ms=5, update_ms=9, client_tv=2, prev_producer_id=4,
                     next_producer_id=8)  # fmt: skip
    for version in (0, 1):
        parsed = parse_txn_record(txn_key("x"), txn_value(md, version))
        assert parsed is not None
        assert parsed[1] is not None
        got = parsed[1]
        assert (got.producer_id, got.producer_epoch, got.state, got.partitions) == (
            7,
            3,
            TxnStatus.ONGOING,
            md.partitions,
        )
        assert (got.start_ms, got.update_ms) == (5, 9)
        tags = (got.client_tv, got.prev_producer_id, got.next_producer_id)
        assert tags == ((2, 4, 8) if version == 1 else (0, -1, -1))
    text = decode_transaction_record(txn_key("x"), txn_value(md, 1))
    assert '"version":"1"' in text, text
    assert '"clientTransactionVersion":2' in text, text
    assert '"partitionIds":[0,2]' in text, text


def _partition(d: Path) -> Partition:
    p = Partition("t", 0, uuid.uuid4(), d / "t-0", LogConfig(), 0)
    p.node_id = 1
    p.on_info(PartitionInfo((1,), (1,), 1, 0, 0), 0)
    return p


def _txn(pid: int, epoch: int, seq: int) -> bytes:
    return build_batch([(b"k", b"v", ())], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, transactional=True)  # fmt: skip


def test_a_late_tv2_marker_cannot_end_the_next_transaction(tmp_path: Path) -> None:
    """Jepsen's delayed-marker anomaly: a copy of transaction N's marker arriving during
    N+1. With TV2 N+1 writes with the epoch N's marker bumped to, so the copy is not newer
    and is refused; with TV1 (one epoch for both) the copy ends N+1 here - the anomaly
    TV2 exists for."""
    for tv, refused in ((2, True), (0, False)):
        p = _partition(tmp_path / f"tv{tv}")
        ended = 1 if tv == 2 else 0  # the epoch transaction N's marker carries
        assert p.append(_txn(7, 0, 0), 0, 1 << 20, 0).error == ErrorCode.none
        assert p.append_marker(7, ended, True, 0, 0, tv).error == ErrorCode.none
        end = p.log.log_end_offset
        # a retry of N's marker before N+1 writes here: acknowledged (TV2: not written)
        assert p.append_marker(7, ended, True, 0, 0, tv).error == ErrorCode.none
        assert p.log.log_end_offset == (end if tv == 2 else end + 1)
        seq = 0 if tv == 2 else 1
        assert p.append(_txn(7, ended, seq), 0, 1 << 20, 0).error == ErrorCode.none
        assert 7 in p.txns.ongoing
        late = p.append_marker(7, ended, True, 0, 0, tv)
        if refused:
            assert late.error == ErrorCode.invalid_producer_epoch
            assert 7 in p.txns.ongoing  # N+1 is still open here
        else:
            assert late.error == ErrorCode.none
            assert 7 not in p.txns.ongoing
        p.log.close()


def test_transitions_outside_kafkas_table_are_refused() -> None:
    """Kafka's TransactionState table: e.g. Empty -> PrepareCommit is a bug, refused and
    not written; the table allows what the coordinator does."""
    from keeperless.coordinator.txn_records import valid_transition
    from keeperless.coordinator.txn_shard import TxnRules, TxnShard

    assert not valid_transition(TxnStatus.EMPTY, TxnStatus.PREPARE_COMMIT)
    assert not valid_transition(TxnStatus.ONGOING, TxnStatus.COMPLETE_COMMIT)
    assert valid_transition(TxnStatus.COMPLETE_COMMIT, TxnStatus.PREPARE_ABORT)  # TV2
    shard = TxnShard(TxnRules())
    md = TxnMetadata("x", 7, 0, 60000, TxnStatus.EMPTY)
    shard.txns["x"] = md
    got = shard._transition(md, 1, 0, state=TxnStatus.PREPARE_COMMIT)
    assert got == ErrorCode.invalid_txn_state  # no record to write
    assert shard.txns["x"].state == TxnStatus.EMPTY
    # EndTxn of an Empty transaction: INVALID_TXN_STATE, nothing written
    out = shard.end_txn("x", 7, 0, True, 0, 1, 0)
    assert (out.records, out.response.error) == ([], ErrorCode.invalid_txn_state)


def test_the_next_transactions_write_before_the_previous_marker_is_verified(
    tmp_path: Path,
) -> None:
    """A TV2 producer's next transaction (epoch N+1) can reach a partition before the
    marker of transaction N (the coordinator writes markers after EndTxn answers). Taken
    unverified, the batch joined N's open transaction there, N's marker was then refused
    as not newer, and N+1's EndTxn found nothing added - the chaos Jepsen workload's
    inconsistent offsets. It must be verified (the coordinator answers
    CONCURRENT_TRANSACTIONS until N is complete)."""
    from keeperless.broker.txn_verify import needs_verification

    p = _partition(tmp_path)
    assert p.append(_txn(7, 0, 0), 0, 1 << 20, 0).error == ErrorCode.none
    assert needs_verification(p, _txn(7, 0, 1)) is None  # N's own next write
    assert needs_verification(p, _txn(7, 1, 0)) is not None  # N+1's, N still open here
    p.log.close()


def test_a_tv2_commit_in_the_ended_transactions_epoch_is_fenced(tmp_path: Path) -> None:
    """After a TV2 transaction ended (epoch bumped to N+1), an EndTxn with N+1 is the next
    transaction's, for which nothing was added: Kafka answers PRODUCER_FENCED, never a
    success that would acknowledge writes no marker will end."""

    async def go() -> None:
        b, tc = _setup(tmp_path)
        pid, epoch = await _init(tc)
        assert await tc.verify("x", pid, epoch, [("t", 0)], add=True) == {("t", 0): ErrorCode.none}
        resp = await _end(tc, 5, pid, epoch)
        assert (resp.error_code, resp.producer_epoch) == (0, epoch + 1)
        await _completed(tc)
        nothing = await _end(tc, 5, pid, epoch + 1)
        assert nothing.error_code == ErrorCode.producer_fenced
        tc.stop()
        b.close()

    asyncio.run(go())
