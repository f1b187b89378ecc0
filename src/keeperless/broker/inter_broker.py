"""Requests one broker sends another over its broker listener (the transaction
coordinator's WriteTxnMarkers): one connection per peer, one request at a time."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from kio.index import load_request_schema

from keeperless.protocol.build import build
from keeperless.protocol.framing import decode_response, encode_request

__all__ = ["InterBrokerClient"]


class InterBrokerClient:
    def __init__(
        self,
        node_id: int,
        timeout_s: float = 30.0,
        connect: Callable[[str, int], Awaitable[tuple[Any, Any]]] | None = None,
    ) -> None:
        self.client_id = f"broker-{node_id}"
        self._connect = connect
        self.timeout_s = timeout_s
        self._conns: dict[tuple[str, int], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._corr = itertools.count(1)

    async def request(
        self, host: str, port: int, api_key: int, version: int, body: dict[str, Any]
    ) -> Any:
        """Send one request and return the decoded response; OSError (or TimeoutError)
        when the peer cannot be reached or answers nothing in time."""
        key = (host, port)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            try:
                return await asyncio.wait_for(
                    self._exchange(key, api_key, version, body), self.timeout_s
                )
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
                self._drop(key)
                raise OSError(f"{host}:{port}: {e or type(e).__name__}") from None

    async def _exchange(
        self, key: tuple[str, int], api_key: int, version: int, body: dict[str, Any]
    ) -> Any:
        conn = self._conns.get(key)
        if conn is None:
            if self._connect is not None:
                conn = await self._connect(*key)
            else:
                conn = await asyncio.open_connection(*key)
            self._conns[key] = conn
        reader, writer = conn
        corr = next(self._corr)
        req = build(load_request_schema(api_key, version), body)
        writer.write(encode_request(api_key, version, corr, self.client_id, req))
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        got, resp = decode_response(memoryview(await reader.readexactly(size)), api_key, version)
        if got != corr:
            raise OSError(f"correlation id {got} != {corr}")
        return resp

    def _drop(self, key: tuple[str, int]) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn[1].close()

    def close(self) -> None:
        for key in list(self._conns):
            self._drop(key)
