"""The delegation token APIs on a broker (Kafka's KafkaApis handlers for KIP-48 in KRaft):
Create, Renew and Expire are refused here as Kafka's brokers refuse them (over a channel
that may not manage tokens, creating for another owner without CREATE_TOKENS on that
user, a renewer that is not a user) and otherwise forwarded to the active controller;
each answers once this broker's image shows the change, so that the token works here
the moment its creator has it. Describe is answered from the image: a principal sees the
tokens it owns or may renew, and others' only with DESCRIBE on the token or
DESCRIBE_TOKENS on their owner."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.controller_channel import ControllerUnavailableError
from keeperless.broker.forwarder import UndecodableAnswerError
from keeperless.metadata.image import MetadataImage
from keeperless.metadata.token_requests import (
    ERROR_TIMESTAMP,
    create_request,
    create_response,
    describe_response,
    expiry_response,
)
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.context import session_of
from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.session import ANONYMOUS
from keeperless.security.authz import AclOp, Resource
from keeperless.security.tokens import token_by_hmac, token_hmac, token_requests_allowed

__all__ = ["DelegationTokenApis"]

_SETTLE_TIMEOUT_S = 10.0


def _principal(header: RequestHeader) -> str:
    s = session_of(header)
    return s.principal if s is not None else ANONYMOUS


class DelegationTokenApis:
    def __init__(self, broker: Broker, secret_key: str | None) -> None:
        self.broker = broker
        self.secret_key = secret_key or None

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.CREATE_DELEGATION_TOKEN: self.create,
            ApiKey.RENEW_DELEGATION_TOKEN: self.renew,
            ApiKey.EXPIRE_DELEGATION_TOKEN: self.expire,
            ApiKey.DESCRIBE_DELEGATION_TOKEN: self.describe,
        }

    async def create(self, header: RequestHeader, req: Any) -> Any:
        owner, renewers, _ = create_request(req)
        requester = _principal(header)
        owner = owner or requester
        v = header.api_version
        if not token_requests_allowed(session_of(header)):
            return create_response(v, ErrorCode.delegation_token_request_not_allowed, owner,
                                   requester)  # fmt: skip
        if owner != requester and not self.broker.authz.allowed(
            header, AclOp.CREATE_TOKENS, Resource.USER, owner
        ):
            return create_response(v, ErrorCode.delegation_token_authorization_failed, owner,
                                   requester)  # fmt: skip
        if any(not p.startswith("User:") for p in renewers):
            return create_response(v, ErrorCode.invalid_principal_type, owner, requester)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError:
            return create_response(v, ErrorCode.request_timed_out, owner, requester)
        except UndecodableAnswerError as e:  # a refusal, with Kafka's -1 timestamps
            return create_response(v, ErrorCode(e.error_code), owner, requester)
        if resp.error_code == ErrorCode.none:
            tid = resp.token_id
            await self.broker.wait_for(lambda img: tid in img.delegation_tokens, _SETTLE_TIMEOUT_S)
        return resp

    async def renew(self, header: RequestHeader, req: Any) -> Any:
        return await self._change(ApiKey.RENEW_DELEGATION_TOKEN, header, req)

    async def expire(self, header: RequestHeader, req: Any) -> Any:
        return await self._change(ApiKey.EXPIRE_DELEGATION_TOKEN, header, req)

    async def _change(self, api: ApiKey, header: RequestHeader, req: Any) -> Any:
        v = header.api_version
        if not token_requests_allowed(session_of(header)):
            return expiry_response(api, v, ErrorCode.delegation_token_request_not_allowed,
                                   ERROR_TIMESTAMP)  # fmt: skip
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError:
            return expiry_response(api, v, ErrorCode.request_timed_out, ERROR_TIMESTAMP)
        except UndecodableAnswerError as e:  # a refusal, with Kafka's -1 timestamps
            return expiry_response(api, v, ErrorCode(e.error_code), ERROR_TIMESTAMP)
        if resp.error_code == ErrorCode.none and self.secret_key:
            mac, key = bytes(req.hmac), self.secret_key
            expiry = round(resp.expiry_timestamp.timestamp() * 1000)

            def settled(img: MetadataImage) -> bool:
                t = token_by_hmac(img, key, mac)
                return t is None or t.expiry_ms == expiry  # None: expired at once, removed

            await self.broker.wait_for(settled, _SETTLE_TIMEOUT_S)
        return resp

    async def describe(self, header: RequestHeader, req: Any) -> Any:
        v = header.api_version
        if not token_requests_allowed(session_of(header)):
            return describe_response(v, ErrorCode.delegation_token_request_not_allowed, [])
        key = self.secret_key
        if key is None:
            return describe_response(v, ErrorCode.delegation_token_auth_disabled, [])
        if req.owners is not None and not req.owners:
            return describe_response(v, ErrorCode.none, [])
        owners = (
            None
            if req.owners is None
            else [f"{o.principal_type}:{o.principal_name}" for o in req.owners]
        )
        who = _principal(header)
        authz = self.broker.authz
        shown = []
        for t in sorted(self.broker.image.delegation_tokens.values(), key=lambda t: t.issue_ms):
            if owners is not None and not any(t.owner_or_renewer(o) for o in owners):
                continue
            if not (
                t.owner_or_renewer(who)
                or authz.allowed(header, AclOp.DESCRIBE, Resource.DELEGATION_TOKEN, t.token_id)
                or authz.allowed(header, AclOp.DESCRIBE_TOKENS, Resource.USER, t.owner)
            ):
                continue
            shown.append((t, token_hmac(key, t.token_id)))
        return describe_response(v, ErrorCode.none, shown)
