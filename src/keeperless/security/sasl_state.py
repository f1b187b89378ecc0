"""A SASL listener's connections before they are authenticated, as Kafka's
SaslServerAuthenticator: only ApiVersions, SaslHandshake (17) and SaslAuthenticate (36)
are taken; anything else closes the connection. SaslHandshake v1 is followed by
SaslAuthenticate requests; after a v0 handshake the client sends raw SASL tokens, each
answered as a raw length-prefixed token. A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and the connection is closed; the log names the user and
mechanism, never a password."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import API_NAMES, ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import decode_request, encode_response, read_header, response_class
from keeperless.security.sasl import MECHANISM_CODES, PlainServer, SaslFailure, ScramServer

if TYPE_CHECKING:
    from keeperless.protocol.session import Session
    from keeperless.security.listeners import ListenerSecurity

__all__ = ["SaslState", "illegal_sasl_state"]

SASL_HANDSHAKE = (0, 1)
SASL_AUTHENTICATE = (0, 2)


def illegal_sasl_state(frame: memoryview) -> bytes:
    """SaslHandshake/SaslAuthenticate where no SASL exchange is expected."""
    header, _ = read_header(frame)
    body: dict[str, Any] = {"error_code": ErrorCode.illegal_sasl_state}
    if header.api_key == ApiKey.SASL_HANDSHAKE:
        body["mechanisms"] = []
    else:
        body.update(error_message="No SASL authentication is expected here", auth_bytes=b"")
    return encode_response(header, build(response_class(header.api_key, header.api_version), body))


class SaslState:
    def __init__(self, security: ListenerSecurity) -> None:
        self.security = security
        self.server: PlainServer | ScramServer | None = None
        self.mechanism = ""
        self.raw = False
        self.failure = ""
        self.expected: str | None = None  # a re-login must name the same principal

    def handle(self, frame: memoryview, session: Session) -> tuple[bytes | None, bool]:
        """(response, close). (None, False): not SASL's to answer (ApiVersions)."""
        if self.raw:
            return self._raw_token(bytes(frame), session)
        header, pos = read_header(frame)
        if header.api_key == ApiKey.API_VERSIONS:
            return None, False
        if header.api_key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            name = API_NAMES.get(header.api_key, f"api key {header.api_key}")
            self.failure = f"Unexpected Kafka request of type {name} during SASL handshake"
            return None, True
        lo, hi = SASL_HANDSHAKE if header.api_key == ApiKey.SASL_HANDSHAKE else SASL_AUTHENTICATE
        if not lo <= header.api_version <= hi:
            self.failure = f"unsupported version {header.api_version} of api key {header.api_key}"
            return None, True
        req = decode_request(header, frame, pos)
        cls = response_class(header.api_key, header.api_version)
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            mech = str(req.mechanism).upper()
            enabled = list(self.security.mechanisms)
            if self.server is not None or mech not in enabled:
                self.failure = (
                    f"SASL mechanism {mech} is not enabled (enabled: {', '.join(enabled)})"
                    if self.server is None
                    else "a second SaslHandshake"
                )
                code = (
                    ErrorCode.unsupported_sasl_mechanism
                    if self.server is None
                    else (ErrorCode.illegal_sasl_state)
                )
                body = {"error_code": code, "mechanisms": enabled}
                return encode_response(header, build(cls, body)), True
            self.mechanism = mech
            self.server = self._server_for(mech)
            self.raw = header.api_version == 0
            body = {"error_code": ErrorCode.none, "mechanisms": enabled}
            return encode_response(header, build(cls, body)), False
        if self.server is None:
            self.failure = "SaslAuthenticate before SaslHandshake"
            body = {"error_code": ErrorCode.illegal_sasl_state,
                    "error_message": "Unexpected SaslAuthenticate: no SaslHandshake",
                    "auth_bytes": b""}  # fmt: skip
            return encode_response(header, build(cls, body)), True
        try:
            out = self.server.step(bytes(req.auth_bytes))
        except SaslFailure as e:
            self.failure = f"{e} (mechanism {self.mechanism}, listener {session.listener})"
            body = {"error_code": ErrorCode.sasl_authentication_failed,
                    "error_message": str(e), "auth_bytes": b""}  # fmt: skip
            return encode_response(header, build(cls, body)), True
        if self.server.done and self.expected not in (None, self.server.principal):
            self.failure = f"re-authenticated as {self.server.principal}, not {self.expected}"
            body = {"error_code": ErrorCode.sasl_authentication_failed,
                    "error_message": "Re-authentication must keep the same principal",
                    "auth_bytes": b""}  # fmt: skip
            return encode_response(header, build(cls, body)), True
        self._maybe_done(session)
        body = {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": out}
        if header.api_version >= 1:
            body["session_lifetime_ms"] = self.security.reauth_ms if self.server.done else 0
        return encode_response(header, build(cls, body)), False

    def _raw_token(self, token: bytes, session: Session) -> tuple[bytes | None, bool]:
        assert self.server is not None
        try:
            out = self.server.step(token)
        except SaslFailure as e:
            self.failure = f"{e} (mechanism {self.mechanism}, listener {session.listener})"
            return None, True
        self._maybe_done(session)
        if self.server.done:
            self.raw = False
        return struct.pack(">i", len(out)) + out, False

    def _maybe_done(self, session: Session) -> None:
        server = self.server
        if server is not None and server.done and server.user is not None:
            session.principal = server.principal
            session.mechanism = self.mechanism
            session.authenticated = True
            session.token_authenticated = isinstance(server, ScramServer) and (
                server.token_authenticated
            )

    def _server_for(self, mech: str) -> PlainServer | ScramServer:
        if mech == "PLAIN":
            return PlainServer(dict(self.security.plain_users))
        lookup = self.security.scram_lookup
        if mech not in MECHANISM_CODES:
            raise SaslFailure(f"SASL mechanism {mech} is not supported")
        tokens = self.security.token_lookup
        return ScramServer(
            mech,
            lambda user: lookup(mech, user) if lookup is not None else None,
            (lambda token_id: tokens(mech, token_id)) if tokens is not None else None,
        )
