from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeperless.protocol.framing import FrameDecoder, ProtocolError


@given(st.lists(st.binary(max_size=50), max_size=8), st.lists(st.integers(1, 40), max_size=20))
def test_frames_survive_any_split(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    dec = FrameDecoder()
    got: list[bytes] = []
    pos = 0
    for c in [*cuts, len(stream)]:
        got.extend(bytes(f) for f in dec.feed(stream[pos : pos + c]))
        pos += c
        if pos >= len(stream):
            break
    got.extend(bytes(f) for f in dec.feed(stream[pos:]))
    assert got == payloads


def test_oversized_or_negative_frame_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder(max_frame=10).feed(struct.pack(">i", 11))
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", -1))
