from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from keeperless.protocol.build import build
from keeperless.protocol.fetch_response import (
    MAX_VERSION,
    FetchPartition,
    NodeEndpoint,
    encode_fetch_response,
)
from keeperless.protocol.framing import RequestHeader, encode_response, response_class

partition_st = st.builds(
    FetchPartition,
    index=st.integers(0, 1000),
    error_code=st.sampled_from([0, 1, 3, 6]),
    high_watermark=st.integers(-1, 2**40),
    last_stable_offset=st.integers(-1, 2**40),
    log_start_offset=st.integers(-1, 2**40),
    records=st.one_of(st.none(), st.binary(max_size=300)),
    diverging_epoch=st.one_of(
        st.none(), st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40))
    ),
    current_leader=st.one_of(
        st.none(), st.tuples(st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1))
    ),
    preferred_read_replica=st.integers(-1, 100),
    aborted=st.one_of(
        st.none(), st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=3)
    ),
)
topics_st = st.lists(
    st.tuples(
        st.text("abc.-_", min_size=1, max_size=10),
        st.uuids(),
        st.lists(partition_st, max_size=3),
    ),
    max_size=3,
)
endpoints_st = st.lists(
    st.builds(
        NodeEndpoint,
        node_id=st.integers(0, 2**31 - 1),
        host=st.text(min_size=1, max_size=12),
        port=st.integers(0, 65535),
        rack=st.one_of(st.none(), st.text(max_size=5)),
    ),
    max_size=3,
)


@pytest.mark.parametrize("version", range(4, MAX_VERSION + 1))
@settings(max_examples=40, deadline=None)
@given(topics=topics_st, session_id=st.integers(0, 100), endpoints=endpoints_st)
def test_matches_kio_encoding(
    version: int, topics: list, session_id: int, endpoints: list[NodeEndpoint]
) -> None:
    keyed = [(tid if version >= 13 else name, parts) for name, tid, parts in topics]
    ours = b"".join(
        p
        for p in encode_fetch_response(
            version, 7, keyed, session_id=session_id, node_endpoints=endpoints
        )
        if isinstance(p, bytes)
    )
    resp = build(
        response_class(1, version),
        {
            "throttle_time": datetime.timedelta(0),
            "error_code": ErrorCode.none,
            "session_id": session_id,
            **(
                {
                    "node_endpoints": [
                        {"node_id": e.node_id, "host": e.host, "port": e.port, "rack": e.rack}
                        for e in endpoints
                    ]
                }
                if version >= 16
                else {}
            ),
            "responses": [
                {
                    **({"topic_id": tid} if version >= 13 else {"topic": name}),
                    "partitions": [
                        {
                            "partition_index": p.index,
                            "error_code": ErrorCode(p.error_code),
                            "high_watermark": p.high_watermark,
                            "last_stable_offset": p.last_stable_offset,
                            "log_start_offset": p.log_start_offset,
                            "aborted_transactions": None
                            if p.aborted is None
                            else [
                                {"producer_id": pid, "first_offset": first}
                                for pid, first in p.aborted
                            ],
                            "preferred_read_replica": p.preferred_read_replica,
                            "records": p.records,
                            **(
                                {
                                    "diverging_epoch": {
                                        "epoch": p.diverging_epoch[0],
                                        "end_offset": p.diverging_epoch[1],
                                    }
                                }
                                if p.diverging_epoch is not None and version >= 12
                                else {}
                            ),
                            **(
                                {
                                    "current_leader": {
                                        "leader_id": p.current_leader[0],
                                        "leader_epoch": p.current_leader[1],
                                    }
                                }
                                if p.current_leader is not None and version >= 12
                                else {}
                            ),
                        }
                        for p in parts
                    ],
                }
                for name, tid, parts in topics
            ],
        },
    )
    theirs = encode_response(RequestHeader(1, version, 7, None), resp)
    assert ours == theirs


class Slice:
    length = 5


def test_file_slices_are_parts_of_their_own() -> None:
    sl = Slice()
    parts = encode_fetch_response(12, 1, [("t", [FetchPartition(0, 0, 5, 5, 0, sl)])])
    assert sl in parts
    size = sum(len(p) if isinstance(p, bytes) else p.length for p in parts[1:])
    assert int.from_bytes(parts[0], "big") == size
