"""Who is on the other end of a connection: its Session (principal, client address,
listener), which the router puts in the RequestContext of every request it hands to a
handler (``protocol/context.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from keeperless.protocol.varint import read_uvarint, write_uvarint

__all__ = [
    "ANONYMOUS",
    "Session",
    "decode_principal",
    "encode_principal",
]

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    listener: str
    protocol: str
    host: str
    principal: str = ANONYMOUS
    authenticated: bool = False
    mechanism: str | None = None
    # authenticated with a delegation token (SCRAM with tokenauth=true): as its owner
    token_authenticated: bool = False


def encode_principal(principal: str, token_authenticated: bool = False) -> bytes:
    """A principal as Kafka's DefaultKafkaPrincipalBuilder serializes it for
    EnvelopeRequest (DefaultPrincipalData v0: type, name, token-authenticated)."""
    kind, _, name = principal.partition(":")
    out = bytearray(b"\x00\x00")  # version 0
    for text in (kind, name):
        data = text.encode()
        write_uvarint(out, len(data) + 1)
        out += data
    out += b"\x01" if token_authenticated else b"\x00"
    out += b"\x00"  # no tagged fields
    return bytes(out)


def decode_principal(data: bytes) -> tuple[str, bool]:
    """The inverse of ``encode_principal``: (principal, token-authenticated); ValueError
    if it is not one."""
    if len(data) < 2 or data[:2] != b"\x00\x00":
        raise ValueError("not a version 0 principal")
    pos = 2
    parts = []
    for _ in range(2):
        n, pos = read_uvarint(data, pos)
        if n < 1 or pos + n - 1 > len(data):
            raise ValueError("a truncated principal")
        parts.append(data[pos : pos + n - 1].decode())
        pos += n - 1
    if pos >= len(data):
        raise ValueError("a truncated principal")
    return f"{parts[0]}:{parts[1]}", data[pos] != 0
