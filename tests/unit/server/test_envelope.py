"""Forwarding (issue 17): a broker's Forwarder wraps a client's admin request in an
EnvelopeRequest with the client's principal and address; the controller answers it with
its handler for the inner API, seeing that client as the requester."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from keeperless.broker.controller_channel import ControllerUnavailableError
from keeperless.broker.forwarder import Forwarder
from keeperless.protocol.build import build, build_filled
from keeperless.protocol.context import RequestContext, session_of
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.protocol.session import Session
from keeperless.server.envelope import envelope_handler

SEEN: list[tuple[str, str]] = []


async def unregister(header: RequestHeader, req: Any) -> Any:
    s = session_of(header)
    assert s is not None
    SEEN.append((s.principal, s.host))
    return build_filled(response_class(64, header.api_version), {"error_code": ErrorCode.none})


class FakeRemote:
    def __init__(self, active: bool) -> None:
        self.handler = envelope_handler({64: unregister}, lambda: active)

    async def forward(self, api_key: int, version: int, req: Any, timeout_s: Any = None) -> Any:
        assert api_key == 58
        outer = Session("CONTROLLER", "PLAINTEXT", "10.0.0.9", "User:broker-7", True)
        return await self.handler(RequestContext(58, version, 3, "broker-7", outer), req)


async def nothing_local() -> None:
    return None


def test_the_controller_sees_the_client_not_the_broker() -> None:
    async def go() -> Any:
        fwd = Forwarder(FakeRemote(active=True), nothing_local)
        alice = Session("SASL_SSL", "SASL_SSL", "192.0.2.4", "User:alice", True)
        req = build(load_request_schema(64, 0), {"broker_id": 5})
        return await fwd.forward(RequestContext(64, 0, 41, "admin-client", alice), req)

    SEEN.clear()
    resp = asyncio.run(go())
    assert resp.error_code == ErrorCode.none
    assert SEEN == [("User:alice", "192.0.2.4")]


def test_only_the_active_controller_takes_envelopes_and_only_forwardable_apis() -> None:
    async def inactive() -> Any:
        fwd = Forwarder(FakeRemote(active=False), nothing_local)
        req = build(load_request_schema(64, 0), {"broker_id": 5})
        return await fwd.forward(RequestHeader(64, 0, 1, "c"), req)

    with pytest.raises(ControllerUnavailableError, match="not_controller"):
        asyncio.run(inactive())

    async def vote_inside() -> Any:
        handler = envelope_handler({52: unregister}, lambda: True)
        inner = build_filled(load_request_schema(52, 2), {})
        from keeperless.protocol.framing import encode_request

        body = {"request_data": encode_request(52, 2, 1, "x", inner)[4:],
                "request_principal": b"", "client_host_address": b"\x7f\x00\x00\x01"}  # fmt: skip
        return await handler(RequestHeader(58, 0, 1, "b"), build(load_request_schema(58, 0), body))

    assert asyncio.run(vote_inside()).error_code == ErrorCode.invalid_request
