"""How a broker hands a client's admin request to the active controller, as Kafka
forwards (KIP-590): the request, unchanged, answered by the controller's own handler
for its API key — in process when this node's controller is the active one, otherwise
wrapped in an EnvelopeRequest (API 58) that carries the client's principal and address,
so that the controller authorizes the real user. The controller's answer goes back to
the client as it is. One path for every forwarded API: nothing here knows what any of
them means."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from keeperless.broker.controller_channel import ControllerUnavailableError, not_controller
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.context import session_of
from keeperless.protocol.framing import (
    RequestHeader,
    decode_response,
    encode_request,
    leading_error_code,
    request_class,
)
from keeperless.protocol.session import ANONYMOUS, encode_principal

__all__ = ["Forwarder", "UndecodableAnswerError"]


class UndecodableAnswerError(Exception):
    """The controller's answer could not be read whole (a delegation token refusal with
    Kafka's -1 timestamps); ``error_code`` is what it said."""

    def __init__(self, error_code: int) -> None:
        super().__init__(f"an answer with error code {error_code} that cannot be read whole")
        self.error_code = error_code


Handler = Callable[[RequestHeader, Any], Awaitable[Any]]


class _Remote(Protocol):
    def forward(
        self, api_key: int, version: int, req: Any, timeout_s: float | None = None
    ) -> Awaitable[Any]: ...


def _address(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b"\x7f\x00\x00\x01"


class Forwarder:
    def __init__(
        self,
        remote: _Remote,
        local: Callable[[], Awaitable[Mapping[int, Handler] | None]],
    ) -> None:
        self.remote = remote
        self.local = local  # the active controller's handlers when it runs here

    async def forward(self, header: RequestHeader, req: Any) -> Any:
        handlers = await self.local()
        if handlers is not None and header.api_key in handlers:
            resp = await handlers[header.api_key](header, req)
            if not not_controller(resp):
                return resp
        return await self._enveloped(header, req)

    async def _enveloped(self, header: RequestHeader, req: Any) -> Any:
        s = session_of(header)
        inner = encode_request(
            header.api_key, header.api_version, header.correlation_id, header.client_id or "", req
        )[4:]
        body = {
            "request_data": inner,
            "request_principal": (
                encode_principal(s.principal, s.token_authenticated)
                if s is not None
                else encode_principal(ANONYMOUS)
            ),
            "client_host_address": _address(s.host if s is not None else "127.0.0.1"),
        }
        envelope = build(request_class(ApiKey.ENVELOPE, 0), body)
        resp = await self.remote.forward(ApiKey.ENVELOPE, 0, envelope)
        if resp.error_code != ErrorCode.none:
            raise ControllerUnavailableError(
                f"the controller refused the forwarded request: {ErrorCode(resp.error_code).name}"
            )
        data = memoryview(resp.response_data)
        try:
            _, answer = decode_response(data, header.api_key, header.api_version)
        except Exception:
            raise UndecodableAnswerError(
                leading_error_code(data, header.api_key, header.api_version)
            ) from None
        return answer
