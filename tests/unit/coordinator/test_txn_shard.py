"""The transaction coordinator's shard (pure): its state changes only when records are
replayed, an operation returns the record of the next state with its answer, what the
records do not hold (the epoch before a bump) is kept for its own writes only, and a
rule that needs a producer id says so."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from keeperless.coordinator.outcome import Outcome
from keeperless.coordinator.txn_records import TxnStatus, parse_txn_record
from keeperless.coordinator.txn_shard import MAX_EPOCH, Reply, TxnRules, TxnShard

NOW = 1_000_000


def commit(shard: TxnShard, out: Outcome[Reply], offset: int = 0) -> Reply:
    """The runtime's part: the records committed, replayed in order."""
    for i, (key, value) in enumerate(out.records):
        shard.replay(key, value, offset + i)
    return out.response


def init(shard: TxnShard, pid: int | None = 7, hint: tuple[int, int] = (-1, -1)) -> Reply:
    return commit(shard, shard.init_producer_id("x", 60000, *hint, NOW, 0, pid))


def test_state_changes_only_when_the_records_are_replayed() -> None:
    shard = TxnShard(TxnRules())
    asked = shard.init_producer_id("x", 60000, -1, -1, NOW, 0)
    assert asked.response.need_producer_id
    assert not asked.records
    out = shard.init_producer_id("x", 60000, -1, -1, NOW, 0, 7)
    assert (out.response.error, out.response.producer_id, out.response.producer_epoch) == (
        ErrorCode.none, 7, 0,
    )  # fmt: skip
    assert "x" not in shard.txns  # not yet committed
    commit(shard, out)
    assert (shard.txns["x"].producer_id, shard.txns["x"].state) == (7, TxnStatus.EMPTY)
    add = shard.add_partitions("x", 7, 0, [("t", 0)], [], False, 0, NOW, 0)
    assert shard.txns["x"].state == TxnStatus.EMPTY
    commit(shard, add)
    assert shard.txns["x"].state == TxnStatus.ONGOING
    assert shard.txns["x"].partitions == {("t", 0)}
    # the same partition again: nothing to write
    again = shard.add_partitions("x", 7, 0, [("t", 0)], [], False, 0, NOW, 0)
    assert again.records == []
    assert again.response.error == ErrorCode.none


def test_end_prepares_then_complete_finishes() -> None:
    shard = TxnShard(TxnRules())
    init(shard)
    commit(shard, shard.add_partitions("x", 7, 0, [("t", 0)], [], False, 0, NOW, 0))
    end = shard.end_txn("x", 7, 0, True, 0, NOW, 0)
    assert end.response.end == "x"  # the markers are to be written
    commit(shard, end, offset=5)
    assert shard.prepared_at == {"x": 5}  # the record that prepared it
    assert shard.txns["x"].state == TxnStatus.PREPARE_COMMIT
    assert [md.transactional_id for md in shard.preparing()] == ["x"]
    busy = shard.add_partitions("x", 7, 0, [("t", 1)], [], False, 0, NOW, 0)
    assert busy.response.error == ErrorCode.concurrent_transactions
    stale = shard.complete("x", True, 4, NOW, 0)  # another transaction's completion
    assert stale.records == []
    assert stale.response is False
    done = shard.complete("x", True, 5, NOW, 0)
    commit(shard, done, offset=6)
    assert shard.prepared_at == {}
    assert shard.txns["x"].state == TxnStatus.COMPLETE_COMMIT
    assert shard.txns["x"].partitions == set()
    retry = shard.end_txn("x", 7, 0, True, 0, NOW, 0)
    assert (retry.records, retry.response.error) == ([], ErrorCode.none)


def test_the_epoch_before_a_bump_is_kept_for_own_writes_not_after_a_reload() -> None:
    """KIP-360: after the coordinator aborted a timed-out transaction (bumping the
    epoch), the producer may still name its old epoch; a shard read from the log does
    not know it (Kafka's lastProducerEpoch is memory only)."""
    shard = TxnShard(TxnRules())
    init(shard)
    commit(shard, shard.add_partitions("x", 7, 0, [("t", 0)], [], False, 0, NOW, 0))
    later = NOW + 61_000
    assert shard.timed_out(later) == ["x"]
    log = []
    out = shard.abort_timed_out("x", later, 0)
    log += out.records
    commit(shard, out)
    md = shard.txns["x"]
    assert (md.state, md.producer_epoch, md.prev_epoch) == (TxnStatus.PREPARE_ABORT, 1, 0)
    # read again from the records alone: the previous epoch is unknown
    fresh = TxnShard(TxnRules())
    for key, value in log:
        fresh.replay(key, value, 0)
    assert fresh.txns["x"].prev_epoch == -1
    # the producer retrying its abort with the old epoch: the coordinator's abort was it
    retry = shard.end_txn("x", 7, 0, False, 0, later, 0)
    assert retry.response.error == ErrorCode.concurrent_transactions  # still preparing
    assert fresh.end_txn("x", 7, 0, False, 0, later, 0).response.error == (
        ErrorCode.producer_fenced
    )


def test_a_write_not_replayed_leaves_no_trace() -> None:
    """A write the runtime could not commit is never replayed here (the shard is read
    again): its next state must not leak into a later replay of another record."""
    shard = TxnShard(TxnRules())
    init(shard)
    lost = shard.add_partitions("x", 7, 0, [("t", 0)], [], False, 0, NOW, 0)
    assert lost.records
    other = shard.add_partitions("x", 7, 0, [("t", 1)], [], False, 0, NOW + 1, 0)
    commit(shard, other)
    assert shard.txns["x"].partitions == {("t", 1)}
    # a record this shard did not ask for (another write lost meanwhile): as written
    lost = shard.add_partitions("x", 7, 0, [("t", 2)], [], False, 0, NOW + 2, 0)
    assert lost.records
    elsewhere = TxnShard(TxnRules())
    init(elsewhere)
    commit(shard, elsewhere.add_partitions("x", 7, 0, [("u", 0)], [], False, 0, NOW + 3, 0))
    assert shard.txns["x"].partitions == {("u", 0)}


def test_an_exhausted_epoch_asks_for_a_new_producer_id() -> None:
    shard = TxnShard(TxnRules())
    init(shard)
    shard.txns["x"].producer_epoch = MAX_EPOCH
    asked = shard.init_producer_id("x", 60000, -1, -1, NOW, 0)
    assert asked.response.need_producer_id
    assert not asked.records
    got = init(shard, 8)
    assert (got.producer_id, got.producer_epoch) == (8, 0)


def test_the_records_are_kafkas() -> None:
    shard = TxnShard(TxnRules())
    out = shard.init_producer_id("x", 60000, -1, -1, NOW, 2, 7)
    [(key, value)] = out.records
    parsed = parse_txn_record(key, value)
    assert parsed is not None
    assert parsed[1] is not None
    assert (parsed[0], parsed[1].producer_id, parsed[1].state) == ("x", 7, TxnStatus.EMPTY)
    assert value is not None
    assert value[:2] == b"\x00\x01"


def test_an_idle_id_expires_with_a_tombstone() -> None:
    shard = TxnShard(TxnRules(id_expiration_ms=1000))
    init(shard)
    assert shard.expire("x", NOW + 10).records == []  # not idle long enough
    out = shard.expire("x", NOW + 5000)
    assert out.records == [(out.records[0][0], None)]
    assert out.response is True
    commit(shard, out)
    assert "x" not in shard.txns
