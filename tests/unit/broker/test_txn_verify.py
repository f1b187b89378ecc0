"""KIP-890 verification on the produce path: while a produce waits for the transaction
coordinator, a marker may end a transaction another of its partitions relied on; every
partition of such a request is checked again before appending (and only then: a request
that waited for nothing is not checked twice)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import Partition
from keeperless.broker.txn_verify import still_verified, verify_produce
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.records import build_batch
from keeperless.storage.log import LogConfig


def _partition(d: Path, name: str) -> Partition:
    p = Partition(name, 0, uuid.uuid4(), d / f"{name}-0", LogConfig(), 0)
    p.on_info(PartitionInfo((1,), (1,), 1, 0, 0), 0)
    return p


def _txn(seq: int) -> bytes:
    return build_batch([(b"k", b"v", ())], producer_id=7, producer_epoch=0, base_sequence=seq,
                       transactional=True)  # fmt: skip


def test_a_marker_during_the_wait_voids_the_other_partitions(tmp_path: Path) -> None:
    ongoing, fresh = _partition(tmp_path, "a"), _partition(tmp_path, "b")
    ongoing.append(_txn(0), 0, 1 << 20, 0)  # producer 7's transaction is open on "a"

    async def verify(
        tid: str, pid: int, epoch: int, parts: list[tuple[str, int]], add: bool
    ) -> dict:
        ongoing.append_marker(7, 0, False, 0, 0)  # the coordinator aborts meanwhile
        return dict.fromkeys(parts, ErrorCode.none)

    wanted = [("a", 0, ongoing, _txn(1)), ("b", 0, fresh, _txn(0))]
    refused, recheck = asyncio.run(verify_produce(verify, "tx", 11, wanted))
    assert refused == {}
    assert recheck == {("a", 0), ("b", 0)}
    assert not still_verified(ongoing, _txn(1))  # its transaction ended: refused
    assert still_verified(fresh, _txn(0))  # verified during this request


def test_a_request_that_waited_for_nothing_is_not_checked_again(tmp_path: Path) -> None:
    ongoing = _partition(tmp_path, "a")
    ongoing.append(_txn(0), 0, 1 << 20, 0)

    async def verify(
        tid: str, pid: int, epoch: int, parts: list[tuple[str, int]], add: bool
    ) -> dict:
        raise AssertionError("nothing needed verifying")

    refused, recheck = asyncio.run(verify_produce(verify, "tx", 11, [("a", 0, ongoing, _txn(1))]))
    assert (refused, recheck) == ({}, set())


def test_a_producer_id_is_written_only_under_its_own_transactional_id(tmp_path: Path) -> None:
    """Found by a helper's probe: a principal allowed its own transactional id wrote into
    another's open transaction by naming the other's producer id (the transaction was
    open, so nothing was verified). A producer id this broker has not seen confirmed is
    verified even where its transaction is open; one confirmed for another id is refused."""
    from keeperless.broker.txn_verify import TxnOwners

    ongoing = _partition(tmp_path, "a")
    ongoing.append(_txn(0), 0, 1 << 20, 0)  # producer 7's (alice-tx's) transaction is open
    asked: list[str] = []

    async def verify(
        tid: str, pid: int, epoch: int, parts: list[tuple[str, int]], add: bool
    ) -> dict:
        asked.append(tid)
        ok = tid == "alice-tx"  # the coordinator knows producer 7 as alice-tx's
        return dict.fromkeys(parts, ErrorCode.none if ok else ErrorCode.invalid_producer_id_mapping)

    owners = TxnOwners()
    wanted = [("a", 0, ongoing, _txn(1))]
    refused, _ = asyncio.run(verify_produce(verify, "bob-tx", 11, wanted, owners))
    assert asked == ["bob-tx"]  # verified although the transaction is open
    assert refused[("a", 0)].error == ErrorCode.invalid_producer_id_mapping
    refused, _ = asyncio.run(verify_produce(verify, "alice-tx", 11, wanted, owners))
    assert refused == {}
    assert owners.get(7) == "alice-tx"
    asked.clear()
    refused, _ = asyncio.run(verify_produce(verify, "bob-tx", 11, wanted, owners))
    assert asked == []  # confirmed for alice-tx: refused without asking
    assert refused[("a", 0)].error == ErrorCode.invalid_producer_id_mapping
    refused, _ = asyncio.run(verify_produce(verify, "alice-tx", 11, wanted, owners))
    assert (refused, asked) == ({}, [])  # its owner goes on without a verification


def test_a_producer_with_an_open_transaction_writes_only_transactionally(tmp_path: Path) -> None:
    """Found by a helper's second probe: a non-transactional batch under the producer id
    of another user's open transaction was appended - outside the transaction (it
    survived an abort) and breaking the owner's sequence. Kafka refuses it
    (INVALID_TXN_STATE, "Expected transactional write")."""
    p = _partition(tmp_path, "a")
    p.append(_txn(0), 0, 1 << 20, 0)  # producer 7's transaction is open
    end = p.log.log_end_offset
    plain = build_batch([(b"k", b"slipped", ())], producer_id=7, producer_epoch=0,
                        base_sequence=1)  # fmt: skip
    no_seq = build_batch([(b"k", b"slipped", ())], producer_id=7, producer_epoch=0)
    for batch in (plain, no_seq):
        res = p.append(batch, 0, 1 << 20, 0)
        assert res.error == ErrorCode.invalid_txn_state
        assert p.log.log_end_offset == end
    assert p.append(_txn(1), 0, 1 << 20, 0).error == ErrorCode.none  # the owner goes on
    p.append_marker(7, 0, True, 0, 0)
    assert p.append(plain, 0, 1 << 20, 0).error != ErrorCode.invalid_txn_state  # ended
