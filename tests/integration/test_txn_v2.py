"""Transaction version 2 end to end (KIP-890 part 2), request by request as Kafka's Java
client sends it once ApiVersions shows transaction.version=2 finalized: no
AddPartitionsToTxn or AddOffsetsToTxn (Produce v12 and TxnOffsetCommit v5 add them),
EndTxn v5 answering the next epoch. No Python client speaks TV2 yet (librdkafka sends
Produce v10 and EndTxn v1; kafka-python and aiokafka older versions), so this is the
project's own raw client; confluent-kafka reads what it committed."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.records import build_batch
from keeperless.tools.client import call
from tests.integration.cluster import Node, keeperless, wait_until

TID = "java-like"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _send(n: Node, api: ApiKey, version: int, body: dict[str, Any]) -> Any:
    return call([("127.0.0.1", n.port)], api, version, body)


def _produce(n: Node, pid: int, epoch: int, seq: int, value: bytes) -> int:
    batch = build_batch([(b"k", value, ())], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=True)  # fmt: skip
    resp = _send(n, ApiKey.PRODUCE, 12, {
        "transactional_id": TID, "acks": -1, "timeout": datetime.timedelta(seconds=10),
        "topic_data": [{"name": "tv2", "partition_data": [{"index": 0, "records": batch}]}],
    })  # fmt: skip
    return int(resp.responses[0].partition_responses[0].error_code)


def _end(n: Node, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    resp = _send(n, ApiKey.END_TXN, 5, {"transactional_id": TID, "producer_id": pid,
                                         "producer_epoch": epoch, "committed": commit})  # fmt: skip
    return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)


def _until_ok(f: Any, what: str) -> Any:
    """Retry while the coordinator is finishing the previous transaction's markers
    (CONCURRENT_TRANSACTIONS, or NOT_ENOUGH_REPLICAS for a produce), as clients do."""
    got: list[Any] = []

    def ok() -> bool:
        got[:] = [f()]
        return got[0] == 0 or (isinstance(got[0], tuple) and got[0][0] == 0)

    try:
        wait_until(ok, 30, what=what)
    except TimeoutError as e:
        raise AssertionError(f"{what}: the last answer was {got}") from e
    return got[0]


def _read_committed(n: Node) -> list[bytes]:
    c = Consumer({"bootstrap.servers": n.bootstrap, "group.id": "reader",
                  "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition("tv2", 0), timeout=10)
        c.assign([TopicPartition("tv2", 0, lo)])
        out: list[bytes] = []

        def read() -> bool:
            for m in c.consume(100, 0.3):
                if m.error() is None:
                    out.append(m.value())
            pos = c.position([TopicPartition("tv2", 0)])[0].offset
            return pos >= hi

        wait_until(read, 30, what="a read_committed read to the end")
        return out
    finally:
        c.close()


def test_a_tv2_producer_commits_aborts_and_is_fenced_by_its_own_epoch(node: Node) -> None:
    n = node
    keeperless("topics", "--bootstrap-server", n.bootstrap, "--create", "--topic", "tv2",
               "--partitions", "1", check=True)  # fmt: skip
    # the client decides from the finalized feature, as Kafka's TransactionManager does
    versions = _send(n, ApiKey.API_VERSIONS, 3, {"client_software_name": "raw",
                                                 "client_software_version": "1"})  # fmt: skip
    finalized = {f.name: f.max_version_level for f in versions.finalized_features}
    assert finalized.get("transaction.version") == 2, finalized
    described = keeperless("features", "--bootstrap-server", n.bootstrap, "describe",
                           check=True).stdout  # fmt: skip
    line = next(ln for ln in described.splitlines() if "Feature: transaction.version" in ln)
    assert "FinalizedVersionLevel: 2" in line, described

    def init() -> Any:
        r = _send(n, ApiKey.INIT_PRODUCER_ID, 5, {
            "transactional_id": TID, "transaction_timeout": datetime.timedelta(seconds=60),
            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        return r

    wait_until(lambda: init().error_code == 0, 30, what="a transaction coordinator")
    got = init()
    pid, epoch = int(got.producer_id), int(got.producer_epoch)

    # transaction 1: a record (the partition added by the leader) and the group's offsets
    # (added by the group coordinator): no AddPartitionsToTxn, no AddOffsetsToTxn
    assert _until_ok(lambda: _produce(n, pid, epoch, 0, b"one"), "produce 1") == 0

    def commit_offsets() -> int:
        r = _send(n, ApiKey.TXN_OFFSET_COMMIT, 5, {
            "transactional_id": TID, "group_id": "copiers", "producer_id": pid,
            "producer_epoch": epoch, "generation_id": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "tv2", "partitions": [{
                "partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                "committed_metadata": ""}]}]})  # fmt: skip
        return int(r.topics[0].partitions[0].error_code)

    def find_group() -> int:  # the client's FindCoordinator (creates __consumer_offsets)
        r = _send(n, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                  "coordinator_keys": ["copiers"]})  # fmt: skip
        return int(r.coordinators[0].error_code)

    _until_ok(find_group, "the group's coordinator")
    assert _until_ok(commit_offsets, "TxnOffsetCommit v5") == 0
    err, pid1, epoch1 = _end(n, pid, epoch, commit=True)
    assert (err, pid1, epoch1) == (0, pid, epoch + 1)  # the next transaction's epoch
    # a retry of that EndTxn (its answer lost) gets the same answer
    assert _until_ok(lambda: _end(n, pid, epoch, True), "EndTxn retry") == (0, pid, epoch + 1)
    # a late write of transaction 1 (a retry delayed past its end) is fenced
    assert _produce(n, pid, epoch, 1, b"late") == 47  # INVALID_PRODUCER_EPOCH

    # transaction 2, aborted
    assert _until_ok(lambda: _produce(n, pid1, epoch1, 0, b"two"), "produce 2") == 0
    err, pid2, epoch2 = _until_ok(lambda: _end(n, pid1, epoch1, False), "abort 2")
    assert (pid2, epoch2) == (pid, epoch + 2)

    # transaction 3, with a late copy of transaction 2's marker arriving meanwhile (as a
    # coordinator's retry delayed on the network would): refused, transaction 3 stands
    assert _until_ok(lambda: _produce(n, pid2, epoch2, 0, b"three"), "produce 3") == 0
    late = _send(n, ApiKey.WRITE_TXN_MARKERS, 2, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch2, "transaction_result": False,
        "coordinator_epoch": 0, "transaction_version": 2,
        "topics": [{"name": "tv2", "partition_indexes": [0]}]}]})  # fmt: skip
    assert late.markers[0].topics[0].partitions[0].error_code == 47
    assert _until_ok(lambda: _end(n, pid2, epoch2, True), "commit 3")[0] == 0

    assert _read_committed(n) == [b"one", b"three"]
    c = Consumer({"bootstrap.servers": n.bootstrap, "group.id": "copiers"})
    try:
        [tp] = c.committed([TopicPartition("tv2", 0)], 30)
        assert tp.offset == 1  # committed with transaction 1
    finally:
        c.close()
