"""Every version of every transaction API the broker advertises is handled and answered
(aiokafka's TxnOffsetCommit v0 has no generation id: the handler failed on it and the
client retried for ever - found by a new user). A request of each version, built by kio
from one description, goes through its handler; the response encodes for that version."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from keeperless.broker.txn_markers import TxnMarkerWriter
from keeperless.coordinator.txn_records import TxnStatus, valid_transition
from keeperless.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, GroupSettings
from keeperless.group.offsets import GroupOffsets
from keeperless.metadata import _records_gen as r
from keeperless.protocol.apis import BROKER_APIS
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, encode_response
from keeperless.txn.admin import TxnAdmin
from keeperless.txn.coordinator import TXN_TOPIC, TxnCoordinator, TxnSettings
from keeperless.txn.offsets import TxnOffsets
from tests.unit.brokers import make_broker


def _topic(name: str) -> list[Any]:
    tid = uuid.uuid4()
    return [
        r.TopicRecord(name=name, topic_id=tid),
        r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1,), isr=(1,), leader=1),
    ]


def test_every_version_of_the_transaction_apis_is_answered(tmp_path: Path) -> None:
    async def go() -> None:
        b = make_broker(tmp_path)
        b._producer_ids = [1000]  # a block the controller gave (there is no controller here)
        gc = GroupCoordinator(b, GroupSettings())
        markers = TxnMarkerWriter(b)
        tc = TxnCoordinator(b, TxnSettings(partitions=1), markers, gc.find_coordinator)
        txo = TxnOffsets(gc, GroupOffsets(gc))
        markers.on_offsets_marker = txo.on_marker
        handlers = {**tc.handlers(), **txo.handlers(), **TxnAdmin(b, tc).handlers()}
        b.on_committed([*_topic(TXN_TOPIC), *_topic(OFFSETS_TOPIC), *_topic("t")], 10)
        topics = [{"name": "t", "partitions": [0]}]
        pid_epoch = {"producer_id": -1, "producer_epoch": -1}

        def body(api: int) -> dict[str, Any]:
            p = {"producer_id": pid_epoch["producer_id"],
                 "producer_epoch": pid_epoch["producer_epoch"]}  # fmt: skip
            return {
                22: {"transactional_id": "x", "transaction_timeout": datetime.timedelta(seconds=60),
                     **p},
                24: {"v3_and_below_transactional_id": "x",
                     "v3_and_below_producer_id": p["producer_id"],
                     "v3_and_below_producer_epoch": p["producer_epoch"],
                     "v3_and_below_topics": topics,
                     "transactions": [{"transactional_id": "x", **p, "verify_only": False,
                                       "topics": topics}]},
                25: {"transactional_id": "x", **p, "group_id": "g"},
                28: {"transactional_id": "x", "group_id": "g", **p, "generation_id": -1,
                     "member_id": "", "group_instance_id": None,
                     "topics": [{"name": "t", "partitions": [
                         {"partition_index": 0, "committed_offset": 3,
                          "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
                26: {"transactional_id": "x", **p, "committed": True},
                27: {"markers": [{**p, "transaction_result": False, "coordinator_epoch": 0,
                                  "topics": [{"name": "t", "partition_indexes": [0]}]}]},
                61: {"topics": [{"name": "t", "partition_indexes": [0]}]},
                65: {"transactional_ids": ["x", "unknown"]},
                66: {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                     "transactional_id_pattern": "x.*"},
            }[api]  # fmt: skip

        answered = 0
        for api in (22, 24, 25, 28, 26, 27, 61, 65, 66):
            lo, hi = BROKER_APIS[api]
            for version in range(lo, hi + 1):
                header = RequestHeader(api, version, 1, "c")
                req = build(load_request_schema(api, version), body(api))
                resp = await handlers[api](header, req)
                encode_response(header, resp)  # answerable in this version
                answered += 1
                if api == 22 and resp.error_code == 0:
                    pid_epoch.update(producer_id=resp.producer_id,
                                     producer_epoch=resp.producer_epoch)  # fmt: skip
                if api == 26:
                    await asyncio.sleep(0.05)  # the markers, then CompleteCommit
        assert answered == sum(BROKER_APIS[a][1] - BROKER_APIS[a][0] + 1
                               for a in (22, 24, 25, 28, 26, 27, 61, 65, 66))  # fmt: skip
        assert gc.offsets.get("g", {})[("t", 0)][:3] == (3, -1, "")  # committed by EndTxn
        tc.stop()
        b.close()

    asyncio.run(go())


def test_add_offsets_to_txn_creates_the_offsets_topic(tmp_path: Path) -> None:
    """A transaction's first group on a new cluster: AddOffsetsToTxn asks for
    __consumer_offsets (aiokafka otherwise asked again for ever: nothing created it)."""

    async def go() -> None:
        b = make_broker(tmp_path)
        b._producer_ids = [1000]
        gc = GroupCoordinator(b, GroupSettings())
        asked: list[int] = []

        def ensure() -> ErrorCode:  # the group coordinator's, which asks the controller
            asked.append(1)
            return ErrorCode.coordinator_not_available

        tc = TxnCoordinator(b, TxnSettings(partitions=1), TxnMarkerWriter(b),
                            gc.find_coordinator, ensure)  # fmt: skip
        b.on_committed([*_topic(TXN_TOPIC), *_topic("t")], 10)
        init = build(load_request_schema(22, 4), {
            "transactional_id": "y", "transaction_timeout": datetime.timedelta(seconds=60),
            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        got = await tc.init_producer_id(RequestHeader(22, 4, 1, "c"), init)
        req = build(load_request_schema(25, 3), {
            "transactional_id": "y", "producer_id": got.producer_id,
            "producer_epoch": got.producer_epoch, "group_id": "g"})  # fmt: skip
        resp = await tc.add_offsets_to_txn(RequestHeader(25, 3, 2, "c"), req)
        assert resp.error_code == 15  # COORDINATOR_NOT_AVAILABLE: ask again
        assert asked == [1]
        tc.stop()
        b.close()

    asyncio.run(go())


_T = TxnStatus
_IDLE = {_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}
_KAFKA_PREVIOUS = {  # Kafka 4.x TransactionState.validPreviousStates, written out again
    _T.EMPTY: _IDLE,
    _T.ONGOING: {_T.ONGOING} | _IDLE,
    _T.PREPARE_COMMIT: {_T.ONGOING},
    _T.PREPARE_ABORT: {_T.ONGOING, _T.PREPARE_EPOCH_FENCE} | _IDLE,
    _T.COMPLETE_COMMIT: {_T.PREPARE_COMMIT},
    _T.COMPLETE_ABORT: {_T.PREPARE_ABORT},
    _T.DEAD: _IDLE,
    _T.PREPARE_EPOCH_FENCE: {_T.ONGOING},
}


@pytest.mark.parametrize(("src", "dst"), [(a, b) for a in _T for b in _T])
def test_transaction_transitions_row_by_row(src: TxnStatus, dst: TxnStatus) -> None:
    assert valid_transition(src, dst) == (src in _KAFKA_PREVIOUS[dst])
