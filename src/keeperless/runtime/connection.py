"""The Kafka listener: an asyncio Protocol per connection. Requests on one connection
are answered in order, one at a time, as Kafka does."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import API_NAMES, ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.context import RequestContext
from keeperless.protocol.fetch_response import fetch_replica_id
from keeperless.protocol.framing import (
    MAX_FRAME,
    FrameDecoder,
    NodeStopping,
    ProtocolError,
    RequestHeader,
    decode_request,
    encode_response,
    read_header,
    response_class,
)
from keeperless.security.listeners import ListenerSecurity, Session
from keeperless.security.sasl_state import SaslState, illegal_sasl_state

__all__ = ["KafkaProtocol", "RequestRouter"]

log = logging.getLogger(__name__)
# the throttle time the request just handled earned (client quotas), for its connection


SASL_MAX_RECEIVE = 524288
_MAX_QUEUED = 16  # requests read ahead of the one being handled, per connection
_SEND_STEP = 1 << 20  # response bytes written before the loop runs other work


class RequestRouter:
    """Maps (api key, version) to a handler, within the advertised ranges."""

    def __init__(
        self,
        node_id: int,
        apis: dict[int, tuple[int, int]],
        handlers: dict[int, Callable[[RequestHeader, Any], Awaitable[Any]]],
        api_versions_body: Callable[[ErrorCode], dict[str, Any]],
    ) -> None:
        self.node_id = node_id
        self.apis = apis
        self.handlers = handlers
        self.api_versions_body = api_versions_body
        self._last_warn: dict[str, float] = {}
        self.quotas: Any = None  # broker.quotas.QuotaManager on a broker listener
        self._suppressed: dict[str, int] = {}
        self.metrics: Any = None  # runtime.metrics.Metrics when enabled

    def error_allowed(self, key: str) -> tuple[bool, int]:
        """(log it now, how many like it were not logged since the last one)."""
        now = time.monotonic()
        if now - self._last_warn.get(key, -1e9) >= 10:
            self._last_warn[key] = now
            return True, self._suppressed.pop(key, 0)
        self._suppressed[key] = self._suppressed.get(key, 0) + 1
        return False, 0

    def warn(self, key: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last_warn.get(key, -1e9) >= 10:
            self._last_warn[key] = now
            log.warning("[node %d] " + msg, self.node_id, *args)

    async def handle(
        self, frame: memoryview, session: Session | None = None
    ) -> tuple[bytes | list[Any] | None, int]:
        """The answer to one request from ``session``'s connection, and how long (ms) a
        client over its quota is muted for."""
        header, pos = read_header(frame)
        if header.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            # no SASL exchange expected on this connection
            return illegal_sasl_state(frame), 0
        rng = self.apis.get(header.api_key)
        if header.api_key == ApiKey.API_VERSIONS and (rng is None or header.api_version > rng[1]):
            # Unknown ApiVersions version: answer v0 with UNSUPPORTED_VERSION (KIP-511).
            hdr = RequestHeader(ApiKey.API_VERSIONS, 0, header.correlation_id, header.client_id)
            body = self.api_versions_body(ErrorCode.unsupported_version)
            return encode_response(hdr, build(response_class(ApiKey.API_VERSIONS, 0), body)), 0
        if rng is None or not rng[0] <= header.api_version <= rng[1]:
            name = API_NAMES.get(header.api_key, f"api key {header.api_key}")
            raise ProtocolError(
                f"client {header.client_id!r} sent {name} v{header.api_version}, which this "
                f"node does not support ({f'versions {rng[0]}-{rng[1]}' if rng else 'not offered'})"
            )
        req = decode_request(header, frame, pos)
        ctx = RequestContext.of(header, session)
        t0 = time.perf_counter()
        if self.metrics is None:
            resp = await self.handlers[header.api_key](ctx, req)
        else:
            name = API_NAMES.get(header.api_key, str(header.api_key))
            t0 = time.perf_counter()
            try:
                resp = await self.handlers[header.api_key](ctx, req)
            except Exception:
                self.metrics.request_errors.labels(name).inc()
                raise
            self.metrics.requests.labels(name).inc()
            self.metrics.request_latency.labels(name).observe((time.perf_counter() - t0) * 1000)
        throttle = 0
        if self.quotas is not None and self.quotas.active:
            resp, throttle = self._throttled(
                ctx, req, frame, resp, (time.perf_counter() - t0) * 1000
            )
        if resp is None or isinstance(resp, list):
            return resp, throttle  # no response (acks=0), or a frame encoded as parts
        return encode_response(header, resp), throttle

    def _throttled(
        self, ctx: RequestContext, req: Any, frame: memoryview, resp: Any, ms: float
    ) -> tuple[Any, int]:
        """Client quotas: record the request, and if the client is over a quota, tell it
        to wait (throttle_time_ms) and mute its connection that long (KIP-219)."""
        header, s = ctx, ctx.session
        out_bytes = (
            sum(p.length if hasattr(p, "length") else len(p) for p in resp)
            if (isinstance(resp, list))
            else 0
        )
        replica = header.api_key == ApiKey.FETCH and fetch_replica_id(req) >= 0
        throttle = self.quotas.throttle(
            s.principal if s is not None else None, header.client_id, header.api_key,
            len(frame), out_bytes, ms, replica,
        )  # fmt: skip
        if throttle <= 0 or resp is None:
            return resp, 0
        if isinstance(resp, list):  # Fetch: throttle_time_ms follows the correlation id
            at = 4 + (1 if header.api_version >= 12 else 0)
            first = bytearray(resp[1])
            first[at : at + 4] = throttle.to_bytes(4, "big")
            return [resp[0], bytes(first), *resp[2:]], throttle
        if hasattr(resp, "throttle_time"):
            resp = dataclasses.replace(
                resp, throttle_time=datetime.timedelta(milliseconds=throttle)
            )
        return resp, throttle


def _failure_key(e: BaseException) -> str:
    """A failure's kind: its type and where it was raised."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
    return f"error:{type(e).__name__}:{where}"


class KafkaProtocol(asyncio.Protocol):
    def __init__(
        self,
        router: RequestRouter,
        security: ListenerSecurity | None = None,
        max_request_bytes: int = MAX_FRAME,
    ) -> None:
        self.router = router
        self.security = security
        self.max_request_bytes = max_request_bytes
        self.session = Session("", "PLAINTEXT", "?")
        self.sasl = SaslState(security) if security is not None and security.sasl else None
        # socket.request.max.bytes; before a SASL login, Kafka's
        # sasl.server.max.receive.size (512 KiB): a stranger cannot make us buffer more
        self.decoder = FrameDecoder(
            min(max_request_bytes, SASL_MAX_RECEIVE) if self.sasl is not None else max_request_bytes
        )
        self.queue: asyncio.Queue[memoryview | None] = asyncio.Queue()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.peer = "?"
        self._sock_fd = -1
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = False
        self._expires_at: float | None = None  # connections.max.reauth.ms
        self._previous: str | None = None  # the principal of a re-login in progress

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        self._sock_fd = sock.fileno() if sock is not None else -1
        if transport.get_extra_info("sslcontext") is not None:
            self._sock_fd = -1  # TLS: the bytes go through the transport, never sendfile
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sec = self.security
        if sec is not None:
            self.session = Session(sec.listener, sec.protocol, peer[0] if peer else "?")
            if sec.ssl_context is not None and not sec.sasl:
                self.session.principal = sec.ssl_principal(transport.get_extra_info("ssl_object"))
                self.session.authenticated = True
        else:
            self.session.host = peer[0] if peer else "?"
        self.task = asyncio.get_running_loop().create_task(self._serve())

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self.decoder.feed(data):
                self.queue.put_nowait(frame)
            if self.queue.qsize() >= _MAX_QUEUED and self.transport is not None:
                # requests are answered one at a time: stop reading a client that sends
                # faster (Kafka mutes the channel) rather than queue without bound
                self.transport.pause_reading()
                self._paused = True
        except ProtocolError as e:
            self.router.warn("frame", "Closing connection from %s: %s", self.peer, e)
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait(None)
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def _write_parts(self, parts: list[Any]) -> None:
        """Write a response given as bytes and file slices. A slice goes out with
        sendfile while nothing is queued ahead of it in the transport (so order holds);
        what the socket does not take at once is read and queued like any bytes. The
        loop runs other work after every ``_SEND_STEP`` bytes (a 50 MB fetch answer to a
        fast reader, sent in one go, held it 40-80 ms), and the slices still to send are
        read through duplicated descriptors from then on: retention may close a
        segment's own while this waits."""
        transport = self.transport
        assert transport is not None
        owned: dict[int, int] = {}  # a slice's descriptor -> our duplicate of it
        budget = _SEND_STEP
        try:
            for i, part in enumerate(parts):
                if isinstance(part, bytes):
                    transport.write(part)
                    budget -= len(part)
                    continue
                pos, left = part.position, part.length
                while left:
                    if budget <= 0:  # let the loop run: keep the rest's files open first
                        if not owned and not self._own_fds(parts[i:], owned):
                            budget = 1 << 62  # no descriptor to spare: the rest in one go
                            continue
                        await asyncio.sleep(0)
                        await self._writable.wait()
                        if transport.is_closing():
                            return
                        budget = _SEND_STEP
                    fd = owned.get(part.fd, part.fd)
                    n = min(left, budget)
                    sent = self._sendfile(fd, pos, n)
                    if sent <= 0:
                        data = os.pread(fd, n, pos)
                        if not data:
                            break  # the file ends before the slice (truncated under it)
                        transport.write(data)
                        sent = len(data)
                    pos += sent
                    left -= sent
                    budget -= sent
        finally:
            for dup in owned.values():
                os.close(dup)

    def _sendfile(self, fd: int, pos: int, n: int) -> int:
        """Up to ``n`` bytes of ``fd`` from ``pos`` straight to the socket, while the
        transport has nothing queued; how many went (0: none, the caller copies)."""
        transport = self.transport
        if self._sock_fd < 0 or transport is None or transport.get_write_buffer_size():
            return 0
        try:
            return os.sendfile(self._sock_fd, fd, pos, n)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            self._sock_fd = -1  # e.g. not a socket sendfile supports: copy instead
            return 0

    @staticmethod
    def _own_fds(parts: list[Any], owned: dict[int, int]) -> bool:
        """Duplicate the descriptors of the file slices in ``parts`` into ``owned``;
        False (and none kept) if the process has no descriptor to spare."""
        try:
            for part in parts:
                if not isinstance(part, bytes) and part.fd not in owned:
                    owned[part.fd] = os.dup(part.fd)
        except OSError:
            for dup in owned.values():
                os.close(dup)
            owned.clear()
            return False
        return True

    def _reauthenticating(self, frame: memoryview) -> bool:
        """KIP-368 on an authenticated SASL connection: a SaslHandshake starts a new
        login (for the same principal); a request after connections.max.reauth.ms
        without one closes the connection. False: close it."""
        assert self.security is not None
        api_key = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
        if api_key == ApiKey.SASL_HANDSHAKE:
            self._previous = self.session.principal
            self.session.authenticated = False
            self.sasl = SaslState(self.security)
            self.sasl.expected = self._previous
            return True
        if self._expires_at is not None and time.monotonic() > self._expires_at:
            msg = "Closing connection from %s: its session expired (connections.max.reauth.ms)"
            self.router.warn("reauth", msg, self.peer)
            return False
        return True

    def _logged_in(self) -> bool:
        """A login just completed: its session's expiry; False if a re-login named
        another principal (Kafka refuses that)."""
        assert self.security is not None
        if self._previous is not None and self._previous != self.session.principal:
            msg = "Closing connection from %s: re-authenticated as %s, not %s"
            self.router.warn("reauth", msg, self.peer, self.session.principal, self._previous)
            return False
        self._previous = None
        ms = self.security.reauth_ms
        self._expires_at = time.monotonic() + ms / 1000 if ms > 0 else None
        return True

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def _serve(self) -> None:
        while True:
            frame = await self.queue.get()
            if frame is None or self.transport is None or self.transport.is_closing():
                return
            if self._paused and self.queue.qsize() < _MAX_QUEUED // 2:
                self._paused = False
                self.transport.resume_reading()
            try:
                out: bytes | list[Any] | None
                throttle = 0
                relogin = self.sasl is not None and self.session.authenticated
                if relogin and not self._reauthenticating(frame):
                    self._close()
                    return
                if self.sasl is not None and not self.session.authenticated:
                    out, close = self.sasl.handle(frame, self.session)
                    if self.session.authenticated:
                        self.decoder.max_frame = self.max_request_bytes
                        close = close or not self._logged_in()
                    if out is None and not close:
                        out, _ = await self.router.handle(frame, self.session)  # ApiVersions
                    if close:
                        if out is not None and isinstance(out, bytes):
                            self.transport.write(out)
                        self.router.warn(
                            "sasl", "Closing connection from %s: %s", self.peer, self.sasl.failure
                        )
                        self._close()
                        return
                else:
                    out, throttle = await self.router.handle(frame, self.session)
            except ProtocolError as e:
                self.router.warn(str(e)[:60], "Closing connection from %s: %s", self.peer, e)
                self._close()
                return
            except NodeStopping:
                self._close()
                return
            except Exception as e:
                # with its traceback, once per 10 s per kind of failure: a client retrying
                # a request that fails this way must not flood the log (one line a request)
                shown, suppressed = self.router.error_allowed(_failure_key(e))
                if shown:
                    log.exception(
                        "[node %d] Error handling request from %s; closing connection%s",
                        self.router.node_id,
                        self.peer,
                        f" ({suppressed} more like it in the last 10 s)" if suppressed else "",
                    )
                self._close()
                return
            if out is None or self.transport.is_closing():
                if throttle:
                    await asyncio.sleep(throttle / 1000)  # muted: nothing more is read
                continue
            if isinstance(out, bytes):
                self.transport.write(out)
            else:
                await self._write_parts(out)
            await self._writable.wait()  # back-pressure from a slow reader
            if throttle:
                await asyncio.sleep(throttle / 1000)  # muted while throttled (KIP-219)
