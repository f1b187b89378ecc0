"""The delegation token APIs (38-41) as kio messages, any version: what a request asks
and how an answer is written, shared by the brokers (which refuse what Kafka's brokers
refuse before forwarding, and answer DescribeDelegationToken) and the controller."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.metadata.image import DelegationToken
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import response_class

__all__ = [
    "create_request",
    "create_response",
    "describe_response",
    "expiry_response",
    "ms_of",
    "principal_parts",
]

ERROR_TIMESTAMP = -1  # Kafka's DelegationTokenManager.ErrorTimestamp


def ms_of(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta) or a plain integer."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def principal_parts(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def create_request(req: Any) -> tuple[str | None, list[str], int]:
    """(owner principal or None for the requester, renewer principals, max lifetime ms)."""
    name = getattr(req, "owner_principal_name", None)
    owner = f"{req.owner_principal_type}:{name}" if name else None
    renewers = [f"{x.principal_type}:{x.principal_name}" for x in req.renewers]
    return owner, renewers, ms_of(req.max_lifetime)


def create_response(
    version: int,
    error: ErrorCode,
    owner: str,
    requester: str,
    token: DelegationToken | None = None,
    mac: bytes = b"",
) -> Any:
    owner_type, owner_name = principal_parts(owner)
    req_type, req_name = principal_parts(requester)
    return build(
        response_class(ApiKey.CREATE_DELEGATION_TOKEN, version),
        {
            "error_code": error,
            "principal_type": owner_type,
            "principal_name": owner_name,
            "token_requester_principal_type": req_type,
            "token_requester_principal_name": req_name,
            "issue_timestamp": _time(token.issue_ms if token else ERROR_TIMESTAMP),
            "expiry_timestamp": _time(token.expiry_ms if token else ERROR_TIMESTAMP),
            "max_timestamp": _time(token.max_ms if token else ERROR_TIMESTAMP),
            "token_id": token.token_id if token else "",
            "hmac": mac,
            "throttle_time": 0,
        },
    )


def expiry_response(api_key: ApiKey, version: int, error: ErrorCode, expiry_ms: int) -> Any:
    """The answer of RenewDelegationToken and ExpireDelegationToken."""
    return build(
        response_class(api_key, version),
        {"error_code": error, "expiry_timestamp": _time(expiry_ms), "throttle_time": 0},
    )


def describe_response(
    version: int, error: ErrorCode, tokens: Sequence[tuple[DelegationToken, bytes]]
) -> Any:
    described = []
    for t, mac in tokens:
        owner_type, owner_name = principal_parts(t.owner)
        req_type, req_name = principal_parts(t.requester)
        described.append(
            {
                "principal_type": owner_type,
                "principal_name": owner_name,
                "token_requester_principal_type": req_type,
                "token_requester_principal_name": req_name,
                "issue_timestamp": t.issue_ms,
                "expiry_timestamp": t.expiry_ms,
                "max_timestamp": t.max_ms,
                "token_id": t.token_id,
                "hmac": mac,
                "renewers": [
                    dict(zip(("principal_type", "principal_name"), principal_parts(p), strict=True))
                    for p in t.renewers
                ],
            }
        )
    return build(
        response_class(ApiKey.DESCRIBE_DELEGATION_TOKEN, version),
        {"error_code": error, "tokens": described, "throttle_time": 0},
    )
