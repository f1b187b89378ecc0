"""A share-partition's lag in DescribeShareGroupOffsets v1 (KIP-1226): the partition's
high watermark, less the start offset, less the records past the start whose delivery
completed; unknown (-1) where the start or the high watermark is, and not in v0."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace as N
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import ApiKey
from keeperless.share.offsets import ShareOffsetsApis
from keeperless.share.persister import ReadResult

TID = uuid.uuid4()


def _apis(summary: ReadResult, hw: int | None) -> ShareOffsetsApis:
    async def read(_g: str, _t: uuid.UUID, _p: int) -> ReadResult:
        return summary

    led = None if hw is None else N(is_leader=True, high_watermark=hw)
    broker = N(
        image=N(topic=lambda name: N(topic_id=TID, partitions={0: N(leader=1)}), brokers={}),
        partitions=N(get=lambda name, idx: led),
        node_id=1,
        inter_broker_listener="PLAINTEXT",
    )
    shares: Any = N(broker=broker, persister=N(summary=read))
    return ShareOffsetsApis(shares)


def _lag(summary: ReadResult, hw: int | None, with_lag: bool = True) -> int:
    got = asyncio.run(_apis(summary, hw)._partition("g", "t", 0, False, with_lag))
    return int(got["lag"])


def test_the_lag_subtracts_the_start_and_the_records_delivered_past_it() -> None:
    assert _lag(ReadResult(ErrorCode.none, None, 1, 10, delivery_complete=3), 20) == 7
    assert _lag(ReadResult(ErrorCode.none, None, 1, 10, delivery_complete=0), 20) == 10
    assert _lag(ReadResult(ErrorCode.none, None, 1, 20, delivery_complete=0), 20) == 0


def test_an_unknown_start_or_high_watermark_is_an_unknown_lag() -> None:
    assert _lag(ReadResult(ErrorCode.none, None, 0, -1), 20) == -1  # never read
    # no leader to ask (its broker not registered): -1, not a made-up number
    assert _lag(ReadResult(ErrorCode.none, None, 1, 10, delivery_complete=0), None) == -1
    assert _lag(ReadResult(ErrorCode.none, None, 1, 10, delivery_complete=-1), 20) == -1
    assert _lag(ReadResult(ErrorCode.none, None, 1, 10, delivery_complete=3), 20, False) == -1


def test_the_high_watermark_of_a_partition_led_elsewhere_is_asked_of_its_leader() -> None:
    asked: list[Any] = []

    async def request(dest: Any, api: Any, version: int, body: Any, **kw: Any) -> Any:
        asked.append((dest, api, body["topics"][0]["partitions"][0]["timestamp"]))
        return N(topics=[N(partitions=[N(offset=25, error_code=0)])])

    apis = _apis(ReadResult(ErrorCode.none, None, 1, 10, delivery_complete=5), None)
    broker: Any = apis.broker
    broker.image.brokers = {1: N(endpoint=lambda listener: ("h", 9))}
    broker.peers = N(request=request)
    got = asyncio.run(apis._partition("g", "t", 0, False, True))
    assert got["lag"] == 25 - 10 - 5
    assert asked == [(("h", 9), ApiKey.LIST_OFFSETS, -1)]  # the latest offset


def test_a_leader_that_does_not_answer_is_an_unknown_lag() -> None:
    async def request(*a: Any, **kw: Any) -> Any:
        raise TimeoutError("no answer")

    apis = _apis(ReadResult(ErrorCode.none, None, 1, 10, delivery_complete=5), None)
    broker: Any = apis.broker
    broker.image.brokers = {1: N(endpoint=lambda listener: ("h", 9))}
    broker.peers = N(request=request)
    assert asyncio.run(apis._partition("g", "t", 0, False, True))["lag"] == -1
