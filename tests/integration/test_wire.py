"""Kafka 4.x on the wire: requests answered at once where Kafka answers at once, and
the APIs and versions clients expect (issue 13)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.cluster import Node, _recv, wait_until


class Pipe:
    """One connection, requests written back to back before any answer is read (as
    clients pipeline them); answers are read in order with the time each took."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sent: list[tuple[int, int, float]] = []

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        from kio.index import load_request_schema

        from keeperless.protocol.build import build
        from keeperless.protocol.framing import encode_request

        req = build(load_request_schema(api_key, version), body)
        corr = len(self.sent) + 1
        self.sock.sendall(encode_request(api_key, version, corr, "test", req))
        self.sent.append((api_key, version, time.monotonic()))

    def receive(self) -> list[tuple[Any, float]]:
        from keeperless.protocol.framing import decode_response

        out = []
        for key, version, t0 in self.sent:
            size = struct.unpack(">i", _recv(self.sock, 4))[0]
            _, resp = decode_response(memoryview(_recv(self.sock, size)), key, version)
            out.append((resp, time.monotonic() - t0))
        self.sent = []
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def rf3_offsets(tmp_path: Path) -> Iterator[Node]:
    """One node whose __consumer_offsets cannot be created (replication factor 3)."""
    n = Node(tmp_path, extra={"offsets.topic.replication.factor": "3"})
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _fetch_body(topic_id: Any) -> dict[str, Any]:
    return {
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def test_requests_that_cannot_succeed_are_answered_at_once(rf3_offsets: Node) -> None:
    """A FindCoordinator that cannot be satisfied (no __consumer_offsets on one broker
    with replication factor 3) and a Metadata naming an illegal topic are answered at
    once with Kafka's errors; the requests behind them on the connection are not held
    (they were held 10 s each: a consumer with a group id read ~1,000 msg/s)."""
    node = rf3_offsets
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(20):
        p.produce("data", value=b"%d" % i)
    assert p.flush(30) == 0
    pipe = Pipe(node.port)
    try:
        for _ in range(3):
            pipe.send(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
            pipe.send(
                3,
                12,
                {
                    "topics": [
                        {"name": "bad topic!", "topic_id": None},
                        {"name": "data", "topic_id": None},
                        {"name": "fresh", "topic_id": None},
                    ],
                    "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False,
                },
            )
        answers = pipe.receive()
        find, meta = answers[0][0], answers[1][0]
        assert find.coordinators[0].error_code == ErrorCode.coordinator_not_available
        errors = {t.name: t.error_code for t in meta.topics}
        assert errors["bad topic!"] == ErrorCode.invalid_topic_exception
        assert errors["data"] == ErrorCode.none
        assert errors["fresh"] in (ErrorCode.leader_not_available, ErrorCode.none)
        # all six answered well inside the 10 s the broker used to hold each
        assert max(t for _, t in answers) < 5.0, [round(t, 2) for _, t in answers]
        topic_id = next(t.topic_id for t in meta.topics if t.name == "data")
        pipe.send(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        pipe.send(1, 17, _fetch_body(topic_id))
        (find, _), (fetch, waited) = pipe.receive()
        assert find.coordinators[0].error_code == ErrorCode.coordinator_not_available
        assert fetch.responses[0].partitions[0].error_code == ErrorCode.none
        assert waited < 5.0
    finally:
        pipe.close()
    # the auto-created topic appears; the refused coordinator topic is explained once
    wait_until(lambda: "Cannot create topic __consumer_offsets" in node.logs(), 10)
    assert "offsets.topic.replication.factor" in node.logs()
    assert node.logs().count("Cannot create topic __consumer_offsets") == 1
