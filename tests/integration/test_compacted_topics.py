"""Compacted topics (issue 15): a record without a key is refused as Kafka refuses it
(INVALID_RECORD, with the rejected records' indexes in Produce v8+ record_errors)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.cluster import Node, _recv, keeperless


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    n.format()
    n.start()
    try:
        keeperless(
            "topics", "--bootstrap-server", n.bootstrap, "--create", "--topic", "keyed",
            "--partitions", "1", "--config", "cleanup.policy=compact", check=True,
        )  # fmt: skip
        yield n
    finally:
        n.stop()


def _produce(port: int, version: int, records: bytes) -> object:
    from kio.index import load_request_schema

    from keeperless.protocol.build import build
    from keeperless.protocol.framing import decode_response, encode_request

    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 5000,
        "topic_data": [{"name": "keyed", "partition_data": [{"index": 0, "records": records}]}],
    }
    req = build(load_request_schema(0, version), body)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(encode_request(0, version, 1, "test", req))
        size = struct.unpack(">i", _recv(s, 4))[0]
        return decode_response(memoryview(_recv(s, size)), 0, version)[1]


def test_a_compacted_topic_refuses_records_without_a_key(node: Node) -> None:
    from confluent_kafka import KafkaError, Producer

    from keeperless.protocol.records import build_batch

    # on the wire: the indexes of the key-less records, nothing appended
    batch = build_batch([(b"k0", b"a", ()), (None, b"b", ()), (b"k2", b"c", ()), (None, b"d", ())])
    resp = _produce(node.port, 9, batch)
    part = resp.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert part.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    assert "without key" in (part.record_errors[0].batch_index_error_message or "")
    assert "compact" in (part.error_message or "")
    # with keys, accepted
    resp = _produce(node.port, 9, build_batch([(b"k", b"v", ())]))
    part = resp.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)
    # a client is told INVALID_RECORD
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": node.bootstrap, "retries": 0})
    p.produce("keyed", value=b"no key", on_delivery=lambda err, _m: errors.append(err))
    p.produce("keyed", key=b"k", value=b"v2", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    codes = sorted(str(e.name()) if e is not None else "ok" for e in errors)
    assert codes == ["INVALID_RECORD", "ok"], codes
