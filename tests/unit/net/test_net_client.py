"""The one network client every node-to-node request goes through: responses matched by
correlation id, request timeouts, reconnect backoff, reachability callbacks."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from keeperless.net import client as client_mod
from keeperless.net.client import Backoff, NetworkClient
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import (
    RequestHeader,
    encode_response,
    read_header,
    response_class,
)

Answer = Callable[[list[RequestHeader], asyncio.StreamWriter], Awaitable[None]]


def _answer(header: RequestHeader, error_code: int) -> bytes:
    resp = build(
        response_class(ApiKey.API_VERSIONS, 0),
        {"error_code": ErrorCode(error_code), "api_keys": []},
    )
    return encode_response(header, resp)


async def _peer(answer: Answer, port: int = 0) -> tuple[asyncio.Server, int, list[RequestHeader]]:
    """A peer that hands every request header it reads to ``answer``."""
    seen: list[RequestHeader] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, _ = read_header(memoryview(await reader.readexactly(size)))
                seen.append(header)
                await answer(seen, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    return server, server.sockets[0].getsockname()[1], seen


def _versions(client: NetworkClient, port: int, **kw: Any) -> Any:
    return client.request(("127.0.0.1", port), ApiKey.API_VERSIONS, 0, {}, **kw)


def test_pipelined_responses_are_matched_by_correlation_id() -> None:
    """Two requests in flight on one connection, answered in the reverse order: each
    caller gets its own answer (the error code tells them apart)."""

    async def reverse(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        if len(seen) == 2:
            writer.write(_answer(seen[1], 2) + _answer(seen[0], 1))

    async def main() -> None:
        server, port, seen = await _peer(reverse)
        client = NetworkClient("test")
        first = asyncio.ensure_future(_versions(client, port, timeout_s=5))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(_versions(client, port, timeout_s=5))
        a, b = await asyncio.gather(first, second)
        assert (a.error_code, b.error_code) == (1, 2)
        assert len({h.correlation_id for h in seen}) == 2
        assert {h.client_id for h in seen} == {"test"}
        client.close()
        server.close()

    asyncio.run(main())


def test_a_request_not_answered_in_time_fails_and_closes_its_connection() -> None:
    conns: list[asyncio.StreamWriter] = []

    async def ignore_one(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        conns.append(writer)
        if seen[-1].client_id != "ignored":
            writer.write(_answer(seen[-1], 0))

    async def main() -> None:
        server, port, seen = await _peer(ignore_one)
        client = NetworkClient("test")
        assert (await _versions(client, port, timeout_s=5)).error_code == 0  # connected
        with pytest.raises(TimeoutError, match="no response to API_VERSIONS within 100 ms"):
            await _versions(client, port, timeout_s=0.1, client_id="ignored")
        assert (await _versions(client, port, timeout_s=5)).error_code == 0
        assert len(seen) == 3
        assert conns[0] is conns[1]
        assert conns[2] is not conns[0]  # the stuck connection was closed, a new one made
        client.close()
        server.close()

    asyncio.run(main())


def test_an_unreachable_peer_is_retried_only_after_the_backoff() -> None:
    """A refused connection fails the request and starts the backoff: sends within it
    fail at once (no connection attempt); after it the peer is tried again and reached."""

    async def answer(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(seen[-1], 0))

    async def main() -> None:
        server, port, _ = await _peer(answer)
        server.close()
        await server.wait_closed()
        client = NetworkClient("test", backoff=Backoff(1.0, 1.0, jitter=0))
        events: list[str] = []
        client.on_unreachable = lambda dest, why: events.append(f"down {dest[1]}")
        client.on_reachable = lambda dest: events.append(f"up {dest[1]}")
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            await _versions(client, port, timeout_s=5)
        assert events == [f"down {port}"]
        with pytest.raises(OSError, match="reconnecting in"):
            await _versions(client, port, timeout_s=5)
        assert events == [f"down {port}"]  # no second attempt within the backoff
        server2, _, _ = await _peer(answer, port)
        await asyncio.sleep(1.05)
        assert (await _versions(client, port, timeout_s=5)).error_code == 0
        assert events == [f"down {port}", f"up {port}"]
        client.close()
        server2.close()

    asyncio.run(main())


def test_a_peer_closing_the_connection_fails_what_is_in_flight() -> None:
    async def hang_up(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def main() -> None:
        server, port, _ = await _peer(hang_up)
        client = NetworkClient("test")
        with pytest.raises(OSError, match="closed"):
            await _versions(client, port, timeout_s=5)
        client.close()
        server.close()

    asyncio.run(main())


def test_lanes_are_separate_connections() -> None:
    """A request held by the peer on one lane does not hold up another lane (Raft's
    long-polling fetches and its votes). The peer answers each connection's requests
    one at a time, in order, as Kafka's brokers do: a held fetch holds up everything
    behind it on its own connection, so the vote is answered only on another one."""
    release = asyncio.Event()

    async def hold_fetch_lane(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        header = seen[-1]
        if header.client_id == "fetch":
            await release.wait()  # this connection reads nothing more meanwhile
        writer.write(_answer(header, 0))

    async def main() -> None:
        server, port, _ = await _peer(hold_fetch_lane)
        client = NetworkClient("test")
        slow = asyncio.ensure_future(
            _versions(client, port, timeout_s=5, lane="fetch", client_id="fetch")
        )
        await asyncio.sleep(0.05)
        assert (await _versions(client, port, timeout_s=1, lane="vote")).error_code == 0
        assert not slow.done()
        release.set()
        assert (await slow).error_code == 0
        client.close()
        server.close()

    asyncio.run(main())


def test_a_request_timing_out_fails_the_others_on_its_connection_with_oserror() -> None:
    """Found by the fault harness: a request that timed out closed the connection and
    *cancelled* the others in flight on it; a broker's heartbeat loop, sharing the
    connection to the controller, took the CancelledError for its own and ended - the
    broker stayed fenced for good. The others fail with OSError (their callers retry)."""

    async def silent(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        return None

    async def main() -> None:
        server, port, _ = await _peer(silent)
        client = NetworkClient("test")
        patient = asyncio.ensure_future(_versions(client, port, timeout_s=30))
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            await _versions(client, port, timeout_s=0.1)
        with pytest.raises(OSError, match="timed out"):
            await patient
        assert not patient.cancelled()
        client.close()
        server.close()

    asyncio.run(main())


def test_the_client_holds_its_connection_tasks_and_ends_them_when_closed() -> None:
    """Found by the fault harness: a connection's reader task, referenced by nothing but
    the event loop's weak set, was collected while pending ("Task was destroyed but it
    is pending!"). The client holds every connection task and cancels them at close."""

    async def answer(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(seen[-1], 0))

    async def main() -> None:
        server, port, _ = await _peer(answer)
        client = NetworkClient("test")
        assert (await _versions(client, port, timeout_s=5)).error_code == 0
        tasks = list(client._tasks)
        assert len(tasks) == 1
        assert not tasks[0].done()  # reading, held by the client
        client.close()
        await asyncio.sleep(0.05)
        assert tasks[0].done()
        assert not client._tasks
        server.close()

    asyncio.run(main())


def test_a_connection_closed_as_it_opens_fails_its_queued_requests() -> None:
    """Seed 4415: the transport was closed between the connect and the first write
    (uvloop raises RuntimeError "the handler is closed"); the connection task died with
    it ("Task exception was never retrieved") and its requests waited for their timeout."""

    async def never(seen: list[RequestHeader], writer: asyncio.StreamWriter) -> None:
        return None

    async def main() -> None:
        server, port, _ = await _peer(never)
        client = NetworkClient("test")
        real_open = client_mod._Connection._open

        async def closed_open(self: Any) -> Any:
            reader, writer = await real_open(self)

            def write(_data: bytes) -> None:
                raise RuntimeError("unable to perform operation: the handler is closed")

            writer.write = write  # type: ignore[method-assign]
            return reader, writer

        client_mod._Connection._open = closed_open  # type: ignore[method-assign]
        try:
            with pytest.raises(OSError, match="closed before the requests were written"):
                await _versions(client, port, timeout_s=5)
        finally:
            client_mod._Connection._open = real_open  # type: ignore[method-assign]
            client.close()
            server.close()

    asyncio.run(main())


def test_a_request_failing_in_drain_leaves_no_unretrieved_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the fault harness (campaign seed 8438: 'Future exception was never
    retrieved' logged as an ERROR): a write to a connection closed under it fails the
    request's future, then drain raises too, and the failed future was never awaited."""
    import gc

    def failed_send(self: Any, api_key: int, version: int, frame: bytes, corr: int) -> Any:
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(OSError("unable to perform operation: the handler is closed"))
        return fut

    async def failed_drain(self: Any) -> None:
        raise OSError("connection lost")

    monkeypatch.setattr(client_mod._Connection, "send", failed_send)
    monkeypatch.setattr(client_mod._Connection, "drain", failed_drain)
    unretrieved: list[str] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, ctx: unretrieved.append(ctx["message"])
        )
        client = NetworkClient("test")
        with pytest.raises(OSError, match="connection lost"):
            await _versions(client, 1, timeout_s=1)
        client.close()
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(main())
    assert unretrieved == []
