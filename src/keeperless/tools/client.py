"""A small blocking Kafka client for the operator tools: one request, one response."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_request_schema

from keeperless.protocol.build import build
from keeperless.protocol.framing import decode_response, encode_request
from keeperless.tools.errors import ToolError

__all__ = ["QUIET", "ToolError", "call", "parse_servers"]

# librdkafka in the tools: errors only on stderr (no informational chatter such as
# "BGQUEUE ... Purging" when an admin client is destroyed); --command-config may override
QUIET = {"log_level": 3}


def parse_servers(value: str, flag: str) -> list[tuple[str, int]]:
    out = []
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise ToolError(f"{flag} {value!r}: expected host:port[,host:port...]")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    return out


def call(
    servers: list[tuple[str, int]],
    api_key: int,
    version: int,
    body: dict[str, Any],
    timeout_s: float = 10.0,
) -> Any:
    """Send the request to the first server that answers; raise ToolError naming every
    server tried if none does."""
    req = build(load_request_schema(api_key, version), body)
    frame = encode_request(api_key, version, 1, "keeperless-tool", req)
    errors = []
    for host, port in servers:
        try:
            with socket.create_connection((host, port), timeout=timeout_s) as s:
                s.sendall(frame)
                size = struct.unpack(">i", _recv(s, 4))[0]
                _, resp = decode_response(memoryview(_recv(s, size)), api_key, version)
                return resp
        except (OSError, struct.error) as e:
            errors.append(
                f"{host}:{port} ({e.strerror or e})"
                if isinstance(e, OSError)
                else f"{host}:{port} ({e})"
            )
    raise ToolError("could not reach " + ", ".join(errors))


def _recv(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed by the server")
        buf += chunk
    return bytes(buf)
