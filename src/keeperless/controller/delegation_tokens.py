"""Delegation tokens on the controller (KIP-48 in KRaft, Kafka's
DelegationTokenControlManager): create, renew and expire return a DelegationTokenRecord
(or a RemoveDelegationTokenRecord) and the answer; the token exists once the record is
replayed. Expired tokens are removed by ``sweep_expired``, run every
``delegation.token.expiry.check.interval.ms`` by the active controller. Without
``delegation.token.secret.key`` every operation answers DELEGATION_TOKEN_AUTH_DISABLED;
below metadata.version 3.6-IV2 UNSUPPORTED_VERSION."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import DelegationToken, MetadataImage
from keeperless.metadata.snapshot import token_record
from keeperless.security.tokens import token_by_hmac, token_hmac

__all__ = [
    "TokenResult",
    "TokenSettings",
    "create_token",
    "expire_token",
    "renew_token",
    "sweep_expired",
    "tokens_of_removed_users",
]

_DELEGATION_TOKEN_LEVEL = 14  # metadata.version 3.6-IV2: DelegationTokenRecord
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class TokenSettings:
    """delegation.token.secret.key, .max.lifetime.ms, .expiry.time.ms"""

    secret_key: str | None = None
    max_lifetime_ms: int = 7 * 24 * 3_600_000
    expiry_time_ms: int = 24 * 3_600_000


@dataclass(frozen=True, slots=True)
class TokenResult:
    """What a token operation answers: its error, and for a created token its
    information and HMAC (for renew and expire: the new expiry and the token)."""

    error: ErrorCode
    expiry_ms: int = -1
    token: DelegationToken | None = None
    hmac: bytes = b""


def _sum(now: int, duration: int) -> int:
    return _LONG_MAX if now > _LONG_MAX - duration else now + duration


def _refusal(c: QuorumController, s: TokenSettings) -> ErrorCode | None:
    if not s.secret_key:
        return ErrorCode.delegation_token_auth_disabled
    level = c.metadata_version
    if level is not None and level < _DELEGATION_TOKEN_LEVEL:
        return ErrorCode.unsupported_version
    return None


def create_token(
    c: QuorumController,
    s: TokenSettings,
    now_ms: int,
    requester: str,
    owner: str | None,
    renewers: Sequence[str],
    max_lifetime_ms: int,
) -> Result[TokenResult]:
    """A new token of ``owner`` (the requester when None), renewable by ``renewers``."""
    if (refused := _refusal(c, s)) is not None:
        return Result([], TokenResult(refused))
    if any(not p.startswith("User:") for p in renewers):
        return Result([], TokenResult(ErrorCode.invalid_principal_type))
    assert s.secret_key is not None
    lifetime = s.max_lifetime_ms
    if max_lifetime_ms > 0:
        lifetime = min(lifetime, max_lifetime_ms)
    max_ms = _sum(now_ms, lifetime)
    token = DelegationToken(
        token_id=base64.urlsafe_b64encode(c.rng.randbytes(16)).rstrip(b"=").decode(),
        owner=owner or requester,
        requester=requester,
        renewers=tuple(renewers),
        issue_ms=now_ms,
        max_ms=max_ms,
        expiry_ms=min(max_ms, _sum(now_ms, s.expiry_time_ms)),
    )
    mac = token_hmac(s.secret_key, token.token_id)
    return Result([token_record(token)], TokenResult(ErrorCode.none, token.expiry_ms, token, mac))


def _find(c: QuorumController, s: TokenSettings, mac: bytes) -> DelegationToken | ErrorCode:
    if (refused := _refusal(c, s)) is not None:
        return refused
    assert s.secret_key is not None
    token = token_by_hmac(c.image, s.secret_key, mac)
    if token is None:
        return ErrorCode.delegation_token_not_found
    return token


def renew_token(
    c: QuorumController, s: TokenSettings, now_ms: int, principal: str, mac: bytes, period_ms: int
) -> Result[TokenResult]:
    """A new expiry, ``period_ms`` from now (the default expiry time when not positive,
    never past the token's max lifetime); by its owner or a renewer only."""
    token = _find(c, s, mac)
    if isinstance(token, ErrorCode):
        return Result([], TokenResult(token))
    if min(token.max_ms, token.expiry_ms) < now_ms:
        return Result([], TokenResult(ErrorCode.delegation_token_expired))
    if not token.owner_or_renewer(principal):
        return Result([], TokenResult(ErrorCode.delegation_token_owner_mismatch))
    period = s.expiry_time_ms if period_ms <= 0 else min(s.expiry_time_ms, period_ms)
    expiry = min(token.max_ms, now_ms + period)
    renewed = DelegationToken(token.token_id, token.owner, token.requester, token.renewers,
                              token.issue_ms, token.max_ms, expiry)  # fmt: skip
    return Result([token_record(renewed)], TokenResult(ErrorCode.none, expiry, renewed))


def expire_token(
    c: QuorumController, s: TokenSettings, now_ms: int, principal: str, mac: bytes, period_ms: int
) -> Result[TokenResult]:
    """Expire ``period_ms`` from now, or at once (the token removed) when negative; by its
    owner or a renewer only."""
    token = _find(c, s, mac)
    if isinstance(token, ErrorCode):
        return Result([], TokenResult(token))
    if not token.owner_or_renewer(principal):
        return Result([], TokenResult(ErrorCode.delegation_token_owner_mismatch))
    if period_ms < 0:
        removal = r.RemoveDelegationTokenRecord(token_id=token.token_id)
        return Result([removal], TokenResult(ErrorCode.none, now_ms, token))
    if min(token.max_ms, token.expiry_ms) < now_ms:
        return Result([], TokenResult(ErrorCode.delegation_token_expired))
    expiry = min(token.max_ms, _sum(now_ms, period_ms))
    shortened = DelegationToken(token.token_id, token.owner, token.requester, token.renewers,
                                token.issue_ms, token.max_ms, expiry)  # fmt: skip
    return Result([token_record(shortened)], TokenResult(ErrorCode.none, expiry, shortened))


def sweep_expired(c: QuorumController, now_ms: int) -> Result[list[DelegationToken]]:
    """Remove every token past its expiry or its max lifetime."""
    gone = [t for t in c.image.delegation_tokens.values() if min(t.max_ms, t.expiry_ms) < now_ms]
    records = [r.RemoveDelegationTokenRecord(token_id=t.token_id) for t in gone]
    return Result(records, gone, atomic=False)


def tokens_of_removed_users(image: MetadataImage, users: Sequence[str]) -> list[object]:
    """Removals of the tokens owned by users whose last credential is being deleted: a
    token lends its owner's identity, and an owner that can no longer log in lends none."""
    owners = {f"User:{u}" for u in users}
    return [
        r.RemoveDelegationTokenRecord(token_id=t.token_id)
        for t in image.delegation_tokens.values()
        if t.owner in owners
    ]
