"""A response of bytes and file slices (a fetch answer) reaches the client whole and in
order, whatever the socket takes at once; the event loop runs other work while a big
one is sent (a 50 MB fetch answer to a fast reader held it 40-80 ms in one step); and a
segment closed by retention while the answer waits is still sent from the file it
named, not from whatever file took its descriptor number."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from keeperless.runtime.connection import KafkaProtocol, RequestRouter
from keeperless.storage.segment import FileSlice

MIB = 1 << 20


def _run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


async def _connected() -> tuple[KafkaProtocol, asyncio.StreamReader, asyncio.StreamWriter, Any]:
    loop = asyncio.get_running_loop()
    proto = KafkaProtocol(RequestRouter(0, {}, {}, lambda e: {}))
    server = await loop.create_server(lambda: proto, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(1000):
        if proto.transport is not None:
            break
        await asyncio.sleep(0.001)
    assert proto.transport is not None
    return proto, reader, writer, server


async def _read(reader: asyncio.StreamReader, n: int, pause_s: float) -> bytes:
    out = bytearray()
    while len(out) < n:
        out += await reader.read(min(64 * 1024, n - len(out)))
        if pause_s:
            await asyncio.sleep(pause_s)
    return bytes(out)


def _file(tmp_path: Path, name: str, size: int) -> tuple[int, bytes]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY), data


async def _close(proto: KafkaProtocol, writer: asyncio.StreamWriter, server: Any) -> None:
    writer.close()
    assert proto.transport is not None
    proto.transport.close()
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("pause_s", [0.0, 0.002], ids=["fast-reader", "slow-reader"])
def test_a_response_of_bytes_and_slices_arrives_whole_and_in_order(
    tmp_path: Path, pause_s: float
) -> None:
    fd, data = _file(tmp_path, "seg.log", 8 * MIB)

    async def body() -> None:
        proto, reader, writer, server = await _connected()
        parts: list[Any] = [
            b"head",
            FileSlice(fd, 100, 3 * MIB),
            b"middle",
            FileSlice(fd, 4 * MIB, 4 * MIB),
            FileSlice(fd, 7, 10),
            b"tail",
        ]
        expected = b"head" + data[100 : 100 + 3 * MIB] + b"middle" + data[4 * MIB :]
        expected += data[7:17] + b"tail"
        got, _ = await asyncio.gather(
            _read(reader, len(expected), pause_s), proto._write_parts(parts)
        )
        assert got == expected
        await _close(proto, writer, server)

    try:
        _run(body)
    finally:
        os.close(fd)


def test_the_loop_runs_other_work_while_a_big_response_is_sent(tmp_path: Path) -> None:
    fd, data = _file(tmp_path, "seg.log", 16 * MIB)

    async def body() -> None:
        proto, reader, writer, server = await _connected()
        ticks = 0
        sending = True

        async def ticker() -> None:
            nonlocal ticks
            while sending:
                ticks += 1
                await asyncio.sleep(0)

        read = asyncio.ensure_future(_read(reader, len(data), 0.0))
        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        await proto._write_parts([FileSlice(fd, 0, len(data))])
        during = ticks - before
        sending = False
        assert await read == data
        await tick
        # one step of the loop per MiB at most: 16 MiB give the others 15 turns or more
        assert during >= 15, f"the loop ran other work {during} times during 16 MiB"
        await _close(proto, writer, server)

    try:
        _run(body)
    finally:
        os.close(fd)


def test_a_slice_whose_segment_is_closed_meanwhile_is_sent_from_its_file(
    tmp_path: Path,
) -> None:
    fd, data = _file(tmp_path, "seg.log", 6 * MIB)
    other = tmp_path / "other.log"
    other.write_bytes(b"\0" * (6 * MIB))
    reused: list[int] = []

    async def body() -> None:
        proto, reader, writer, server = await _connected()

        async def retention() -> None:
            await asyncio.sleep(0)  # the first step of the send is done
            os.close(fd)  # the segment is deleted; its number goes to another file
            reused.append(os.open(other, os.O_RDONLY))

        got, _, _ = await asyncio.gather(
            _read(reader, len(data), 0.001),
            proto._write_parts([FileSlice(fd, 0, len(data))]),
            retention(),
        )
        assert reused == [fd], "the test did not reuse the descriptor number"
        assert got == data, "bytes of another file were sent"
        await _close(proto, writer, server)

    try:
        _run(body)
    finally:
        for r in reused:
            os.close(r)


class _QueuingTransport:
    """A transport that keeps what it is given until flushed (a socket that took none
    of it yet), over a real socket the protocol may also sendfile to."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.queued = bytearray()

    def write(self, data: bytes) -> None:
        self.queued += data

    def get_write_buffer_size(self) -> int:
        return len(self.queued)

    def is_closing(self) -> bool:
        return False

    def flush(self) -> None:
        self.sock.sendall(self.queued)
        self.queued.clear()


def test_nothing_is_sent_past_bytes_still_queued_in_the_transport(tmp_path: Path) -> None:
    fd, data = _file(tmp_path, "seg.log", 64 * 1024)
    ours, theirs = socket.socketpair()

    async def body() -> None:
        proto = KafkaProtocol(RequestRouter(0, {}, {}, lambda e: {}))
        transport = _QueuingTransport(ours)
        proto.transport = transport  # type: ignore[assignment]
        proto._sock_fd = ours.fileno()
        await proto._write_parts([b"head", FileSlice(fd, 0, len(data))])
        transport.flush()

    try:
        _run(body)
        theirs.settimeout(10)
        got = bytearray()
        while len(got) < 4 + len(data):
            got += theirs.recv(1 << 20)
        assert bytes(got) == b"head" + data, "the slice went out ahead of the queued bytes"
    finally:
        os.close(fd)
        ours.close()
        theirs.close()


def test_without_a_descriptor_to_spare_the_rest_is_sent_in_one_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMFILE when the send would wait: nothing is duplicated, so nothing waits - the
    rest of the answer goes out at once (as before the loop ran between steps), whole."""
    fd, data = _file(tmp_path, "seg.log", 5 * MIB)
    copied: list[int] = []
    real_pread = os.pread

    def no_dup(_fd: int) -> int:
        raise OSError(24, "Too many open files")

    def pread(f: int, n: int, pos: int) -> bytes:
        copied.append(n)
        return real_pread(f, n, pos)

    real_sendfile = os.sendfile

    def sendfile(out: int, f: int, pos: int, n: int) -> int:
        copied.append(n)
        return real_sendfile(out, f, pos, n)

    async def body() -> None:
        proto, reader, writer, server = await _connected()
        monkeypatch.setattr(os, "dup", no_dup)
        monkeypatch.setattr(os, "pread", pread)
        monkeypatch.setattr(os, "sendfile", sendfile)
        parts: list[Any] = [FileSlice(fd, 0, 2 * MIB), FileSlice(fd, 2 * MIB, 3 * MIB)]
        got, _ = await asyncio.gather(_read(reader, len(data), 0.0), proto._write_parts(parts))
        assert got == data
        assert all(n > 1 for n in copied), f"sent a byte at a time: {copied}"
        await _close(proto, writer, server)

    try:
        _run(body)
    finally:
        os.close(fd)
