"""Core Raft messages survive the trip through Kafka's RPCs and kio's wire encoding."""

from __future__ import annotations

import pytest

from keeperless.protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_header,
)
from keeperless.protocol.records import build_batch
from keeperless.raft import messages as m
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.runtime.raft_rpc import (
    RAFT_APIS,
    request_of,
    request_to_message,
    response_of,
    response_to_message,
)


def _entry() -> Entry:
    b = bytearray(build_batch([(None, b"x", ())]))
    b[0:8] = (5).to_bytes(8, "big")
    b[12:16] = (3).to_bytes(4, "big")
    return Entry(5, 5, 3, bytes(b))


CASES = [
    (
        m.VoteRequest(1, 2, 5, 4, 100, True, request_id=7),
        m.VoteResponse(2, 1, 5, True, -1, True, request_id=7),
    ),
    (
        m.VoteRequest(1, 2, 5, 4, 100, False, request_id=8),
        m.VoteResponse(2, 1, 6, False, 3, False, request_id=8),
    ),
    (m.BeginQuorumEpoch(1, 2, 5, 1), None),
    (m.EndQuorumEpoch(1, 2, 5, 1, (3, 2)), None),
    (
        m.FetchRequest(3, 1, 5, 10, 4, 500, request_id=9),
        m.FetchResponse(1, 3, 5, 1, 0, 6, 0, (_entry(),), SnapshotId(7, 2), None, 10, 4, 9),
    ),
    (
        m.FetchRequest(3, 1, 5, 0, 0, 500, request_id=10),
        m.FetchResponse(1, 3, 5, 1, 0, 6, 4, (), None, SnapshotId(4, 1), 0, 0, 10),
    ),
    (
        m.FetchRequest(3, 1, 5, 0, 0, 500, request_id=11),
        m.FetchResponse(1, 3, 7, 2, 6, fetch_offset=0, last_fetched_epoch=0, request_id=11),
    ),
    (
        m.FetchSnapshotRequest(3, 1, 5, SnapshotId(10, 4), 0, 1000, request_id=12),
        m.FetchSnapshotResponse(1, 3, 5, 1, 0, SnapshotId(10, 4), 100, 0, b"abc", 12),
    ),
]


@pytest.mark.parametrize(("request_msg", "response_msg"), CASES)
def test_roundtrip(request_msg: m.Message, response_msg: m.Message | None) -> None:
    """The wire carries every field; the request id is the transport's (it rides beside
    the correlation id) and comes back on the response to the request it names."""
    key, obj = request_of(request_msg, "cluster", ("127.0.0.1", 9093))
    frame = memoryview(encode_request(key, RAFT_APIS[key], 9, "keeperless", obj))[4:]
    hdr, pos = read_header(frame)
    rid = getattr(request_msg, "request_id", 0)
    decoded_req = decode_request(hdr, frame, pos)
    assert request_to_message(key, decoded_req, request_msg.dst, rid) == request_msg
    kresp = response_of(key, RAFT_APIS[key], response_msg, 1, 5)
    out = memoryview(encode_response(RequestHeader(key, RAFT_APIS[key], 9, None), kresp))[4:]
    corr, decoded = decode_response(out, key, RAFT_APIS[key])
    assert corr == 9
    assert response_to_message(key, decoded, request_msg) == response_msg


def test_inconsistent_voter_set_travels() -> None:
    req = m.VoteRequest(4, 1, 3, 2, 10, True, request_id=3)
    resp = m.VoteResponse(1, 4, 2, False, 2, True, m.INCONSISTENT_VOTER_SET, 3)
    key, _ = request_of(req, "c", ("h", 1))
    kresp = response_of(key, RAFT_APIS[key], resp, 2, 2)
    out = memoryview(encode_response(RequestHeader(key, RAFT_APIS[key], 1, None), kresp))[4:]
    _, decoded = decode_response(out, key, RAFT_APIS[key])
    assert response_to_message(key, decoded, req) == resp
