"""Delegation tokens (KIP-48) as the security code sees them: a token's HMAC, which every
node derives from ``delegation.token.secret.key`` (only the token's information is in the
metadata log), the SCRAM credentials a client authenticates with (the token id as user
name, the base64 HMAC as password, the ``tokenauth=true`` extension), and Kafka's rule
for which connections may manage tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable

from keeperless.metadata.image import DelegationToken, MetadataImage, ScramCredential
from keeperless.protocol.session import ANONYMOUS, Session

__all__ = [
    "TokenCredentials",
    "token_by_hmac",
    "token_hmac",
    "token_requests_allowed",
]

_SCRAM_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_TOKEN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, used for tokens
_CACHE_LIMIT = 10_000


def token_hmac(secret_key: str, token_id: str) -> bytes:
    """HmacSHA512 of the token id under the cluster's secret key, as Kafka computes it."""
    return hmac.new(secret_key.encode(), token_id.encode(), hashlib.sha512).digest()


def token_by_hmac(image: MetadataImage, secret_key: str, mac: bytes) -> DelegationToken | None:
    """The token whose HMAC ``mac`` is (renew and expire name a token by its HMAC)."""
    for token in image.delegation_tokens.values():
        if hmac.compare_digest(token_hmac(secret_key, token.token_id), mac):
            return token
    return None


def token_requests_allowed(session: Session | None) -> bool:
    """Kafka's allowTokenRequests: tokens are managed only over an authenticated channel
    (not PLAINTEXT, not one-way TLS) and never with a token's own authentication."""
    if session is None:
        return True  # inside the node
    if session.token_authenticated or session.protocol == "PLAINTEXT":
        return False
    return not (session.protocol == "SSL" and session.principal == ANONYMOUS)


class TokenCredentials:
    """The SCRAM credential of each live token, derived on first use and kept (a PBKDF2
    of 4096 rounds per token and mechanism): ``lookup(mechanism, token_id)`` gives the
    credential and the owner the connection authenticates as, or None for a token that
    does not exist, has expired, or when tokens are disabled (no secret key)."""

    def __init__(
        self,
        secret_key: str | None,
        image: Callable[[], MetadataImage],
        now_ms: Callable[[], int],
    ) -> None:
        self.secret_key = secret_key
        self._image = image
        self._now_ms = now_ms
        self._cache: dict[tuple[str, str], tuple[DelegationToken, ScramCredential]] = {}

    def lookup(self, mechanism: str, token_id: str) -> tuple[ScramCredential, str] | None:
        if not self.secret_key or mechanism not in _SCRAM_HASH:
            return None
        token = self._image().delegation_tokens.get(token_id)
        if token is None or min(token.expiry_ms, token.max_ms) < self._now_ms():
            return None
        cached = self._cache.get((mechanism, token_id))
        if cached is None or cached[0] != token:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            password = base64.b64encode(token_hmac(self.secret_key, token_id)).decode()
            cached = (token, _credential(mechanism, password))
            self._cache[(mechanism, token_id)] = cached
        return cached[1], token.owner


def _credential(mechanism: str, password: str) -> ScramCredential:
    algo = _SCRAM_HASH[mechanism]
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, _TOKEN_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    stored = hashlib.new(algo, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    return ScramCredential(salt, stored, server_key, _TOKEN_ITERATIONS)
