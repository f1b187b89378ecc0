"""EnvelopeRequest (API 58) on a controller: a broker forwards a client's admin request
with the client's principal and address (KIP-590); the controller answers it with the
handler of the inner request's API, authorized as that client — then wraps the answer.
Only the active controller takes envelopes (NOT_CONTROLLER otherwise: the broker asks
the next one), and only from principals allowed CLUSTER_ACTION (checked before)."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.context import RequestContext, session_of
from keeperless.protocol.framing import (
    ProtocolError,
    RequestHeader,
    decode_request,
    encode_response,
    read_header,
    response_class,
)
from keeperless.protocol.session import Session, decode_principal

__all__ = ["FORWARDABLE", "envelope_handler"]

Handler = Callable[[RequestHeader, Any], Awaitable[Any]]

# what brokers forward (Kafka's forwardable admin APIs served here)
FORWARDABLE = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
    ApiKey.ALTER_CONFIGS, ApiKey.CREATE_PARTITIONS, ApiKey.ELECT_LEADERS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_QUORUM, ApiKey.UPDATE_FEATURES,
    ApiKey.UNREGISTER_BROKER, ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
    ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER,
})  # fmt: skip


def envelope_handler(handlers: Mapping[int, Handler], active: Callable[[], bool]) -> Handler:
    async def envelope(header: RequestHeader, req: Any) -> Any:
        cls = response_class(ApiKey.ENVELOPE, header.api_version)
        if not active():
            return build(cls, {"response_data": b"", "error_code": ErrorCode.not_controller})
        data = memoryview(bytes(req.request_data))
        try:
            inner, pos = read_header(data)
            if inner.api_key not in FORWARDABLE or inner.api_key not in handlers:
                raise ProtocolError(f"api key {inner.api_key} cannot be forwarded")
            inner_req = decode_request(inner, data, pos)
            principal, by_token = decode_principal(bytes(req.request_principal))
            host = ipaddress.ip_address(bytes(req.client_host_address)).compressed
        except (ProtocolError, ValueError):
            return build(cls, {"response_data": b"", "error_code": ErrorCode.invalid_request})
        outer = session_of(header)
        client = Session(outer.listener if outer else "", outer.protocol if outer else "",
                         host, principal, authenticated=True,
                         token_authenticated=by_token)  # fmt: skip
        # handled as if the client the envelope names had sent it here
        resp = await handlers[inner.api_key](RequestContext.of(inner, client), inner_req)
        answer = encode_response(inner, resp)[4:]  # the inner header and body
        return build(cls, {"response_data": answer, "error_code": ErrorCode.none})

    return envelope
