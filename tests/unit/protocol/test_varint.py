from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeperless.protocol.varint import (
    VarintError,
    read_uvarint,
    read_varint,
    write_uvarint,
    write_varint,
)


@given(st.integers(0, 2**63 - 1))
def test_uvarint_roundtrip(n: int) -> None:
    out = bytearray()
    write_uvarint(out, n)
    assert read_uvarint(bytes(out), 0) == (n, len(out))


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_roundtrip(n: int) -> None:
    out = bytearray()
    write_varint(out, n)
    assert read_varint(bytes(out), 0) == (n, len(out))


def test_known_encodings_and_errors() -> None:
    out = bytearray()
    write_varint(out, -1)
    assert out == b"\x01"
    with pytest.raises(VarintError):
        read_uvarint(b"\x80", 0)
    with pytest.raises(VarintError):
        read_uvarint(b"\xff" * 11, 0)
