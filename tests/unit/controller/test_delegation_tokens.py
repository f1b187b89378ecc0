"""Delegation tokens (KIP-48): the controller's rules (Kafka's
DelegationTokenControlManager), the image and snapshot, the SCRAM credential a token
authenticates with (tokenauth=true), and which connections may manage tokens."""

from __future__ import annotations

import base64
import random

from kio.schema.errors import ErrorCode

from keeperless.controller.delegation_tokens import (
    TokenSettings,
    create_token,
    expire_token,
    renew_token,
    sweep_expired,
)
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.controller.scram import alter_scram_credentials
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import image_records
from keeperless.protocol.session import Session, decode_principal, encode_principal
from keeperless.security.sasl import SaslClient, SaslFailure, ScramServer
from keeperless.security.tokens import TokenCredentials, token_hmac, token_requests_allowed

KEY = "secret-of-the-cluster"
S = TokenSettings(KEY, max_lifetime_ms=1_000_000, expiry_time_ms=100_000)
T0 = 1_700_000_000_000


def _controller() -> QuorumController:
    c = QuorumController(1, random.Random(7), {})
    c.replay([r.FeatureLevelRecord(name="metadata.version", feature_level=21)], 0)
    return c


def _apply(c: QuorumController, res: Result[object]) -> None:
    if res.records:
        c.replay(res.records, c.image.offset + len(res.records))


def _create(c: QuorumController, **kw: object) -> tuple[str, bytes]:
    args = {"requester": "User:alice", "owner": None, "renewers": [], "max_lifetime_ms": -1}
    args.update(kw)
    res = create_token(c, S, T0, **args)  # type: ignore[arg-type]
    assert res.response.error == ErrorCode.none, res.response
    _apply(c, res)
    assert res.response.token is not None
    return res.response.token.token_id, res.response.hmac


def test_create_gives_kafkas_hmac_and_timestamps() -> None:
    c = _controller()
    res = create_token(c, S, T0, "User:alice", None, ["User:bob"], -1)
    t = res.response.token
    assert t is not None
    assert res.response.hmac == token_hmac(KEY, t.token_id)
    assert (t.owner, t.requester, t.renewers) == ("User:alice", "User:alice", ("User:bob",))
    assert (t.issue_ms, t.expiry_ms, t.max_ms) == (T0, T0 + 100_000, T0 + 1_000_000)
    assert len(res.records) == 1
    assert isinstance(res.records[0], r.DelegationTokenRecord)
    assert len(c.image.delegation_tokens) == 0  # nothing until the record is replayed
    _apply(c, res)
    assert c.image.delegation_tokens[t.token_id] == t
    # a max lifetime asked for is taken when shorter than the server's
    short = create_token(c, S, T0, "User:alice", None, [], 50_000).response.token
    assert short is not None
    assert (short.expiry_ms, short.max_ms) == (T0 + 50_000, T0 + 50_000)
    # for another owner: the owner is the token's, the requester is kept
    other = create_token(c, S, T0, "User:admin", "User:carol", [], -1).response.token
    assert other is not None
    assert (other.owner, other.requester) == ("User:carol", "User:admin")


def test_refusals() -> None:
    c = _controller()
    off = create_token(c, TokenSettings(None), T0, "User:alice", None, [], -1)
    assert off.response.error == ErrorCode.delegation_token_auth_disabled
    assert off.records == []
    bad = create_token(c, S, T0, "User:alice", None, ["Group:x"], -1)
    assert bad.response.error == ErrorCode.invalid_principal_type
    old = QuorumController(1, random.Random(7), {})
    old.replay([r.FeatureLevelRecord(name="metadata.version", feature_level=13)], 0)
    assert create_token(old, S, T0, "User:a", None, [], -1).response.error == (
        ErrorCode.unsupported_version
    )
    assert renew_token(c, S, T0, "User:alice", b"nope", -1).response.error == (
        ErrorCode.delegation_token_not_found
    )


def test_renew_by_owner_or_renewer_only_and_never_past_the_max() -> None:
    c = _controller()
    _, mac = _create(c, renewers=["User:bob"])
    assert renew_token(c, S, T0 + 10, "User:eve", mac, -1).response.error == (
        ErrorCode.delegation_token_owner_mismatch
    )
    res = renew_token(c, S, T0 + 50_000, "User:bob", mac, 30_000)
    assert (res.response.error, res.response.expiry_ms) == (ErrorCode.none, T0 + 80_000)
    _apply(c, res)
    (t,) = c.image.delegation_tokens.values()
    assert t.expiry_ms == T0 + 80_000
    # a period longer than the expiry time is cut to it; never past the max lifetime
    assert renew_token(c, S, T0 + 60_000, "User:alice", mac, 10**9).response.expiry_ms == (
        T0 + 160_000
    )
    late = renew_token(c, S, T0 + 950_000, "User:alice", mac, -1)
    assert late.response.error == ErrorCode.delegation_token_expired  # expired at 80 000


def test_expire_now_removes_and_later_shortens() -> None:
    c = _controller()
    tid, mac = _create(c)
    assert expire_token(c, S, T0, "User:eve", mac, -1).response.error == (
        ErrorCode.delegation_token_owner_mismatch
    )
    later = expire_token(c, S, T0 + 1000, "User:alice", mac, 5000)
    assert later.response.expiry_ms == T0 + 6000
    _apply(c, later)
    assert c.image.delegation_tokens[tid].expiry_ms == T0 + 6000
    now = expire_token(c, S, T0 + 2000, "User:alice", mac, -1)
    assert now.records == [r.RemoveDelegationTokenRecord(token_id=tid)]
    _apply(c, now)
    assert len(c.image.delegation_tokens) == 0


def test_sweep_removes_only_expired_tokens() -> None:
    c = _controller()
    live, _ = _create(c)
    dead, dead_mac = _create(c)
    _apply(c, expire_token(c, S, T0, "User:alice", dead_mac, 10))
    res = sweep_expired(c, T0 + 50)
    assert [t.token_id for t in res.response] == [dead]
    _apply(c, res)
    assert set(c.image.delegation_tokens) == {live}
    assert sweep_expired(c, T0 + 50).records == []


def test_tokens_are_in_the_snapshot() -> None:
    c = _controller()
    _create(c, renewers=["User:bob"])
    _create(c, requester="User:x", owner="User:y")
    delta = MetadataDelta(MetadataImage())
    for rec in image_records(c.image):
        delta.replay(rec)
    assert delta.apply().delegation_tokens == c.image.delegation_tokens


def test_deleting_a_users_last_credential_removes_its_tokens() -> None:
    c = _controller()
    salted = b"x" * 32
    _apply(c, alter_scram_credentials(c, [], [("alice", 1, 4096, b"s", salted),
                                             ("alice", 2, 4096, b"s", b"y" * 64)]))  # fmt: skip
    tid, _ = _create(c)
    bobs, _ = _create(c, requester="User:bob")
    one = alter_scram_credentials(c, [("alice", 1)], [])
    assert not any(isinstance(x, r.RemoveDelegationTokenRecord) for x in one.records)
    _apply(c, one)  # alice can still log in with SCRAM-SHA-512
    last = alter_scram_credentials(c, [("alice", 2)], [])
    assert r.RemoveDelegationTokenRecord(token_id=tid) in last.records
    _apply(c, last)
    assert set(c.image.delegation_tokens) == {bobs}


def _login(server: ScramServer, user: str, password: str, tokenauth: bool) -> None:
    client = SaslClient("SCRAM-SHA-256", user, password, tokenauth=tokenauth)
    out: bytes | None = client.first()
    while out is not None:
        out = client.step(server.step(out))


def test_scram_with_a_token_authenticates_as_its_owner() -> None:
    c = _controller()
    tid, mac = _create(c, requester="User:admin", owner="User:alice")
    now = [T0]
    creds = TokenCredentials(KEY, lambda: c.image, lambda: now[0])
    password = base64.b64encode(mac).decode()

    def server() -> ScramServer:
        return ScramServer(
            "SCRAM-SHA-256", lambda user: None, lambda t: creds.lookup("SCRAM-SHA-256", t)
        )

    ok = server()
    _login(ok, tid, password, tokenauth=True)
    assert (ok.principal, ok.token_authenticated) == ("User:alice", True)
    wrong = server()
    try:
        _login(wrong, tid, base64.b64encode(b"x" * 64).decode(), tokenauth=True)
        raise AssertionError("a wrong HMAC authenticated")
    except SaslFailure:
        pass
    # without tokenauth the token id is looked up as a user, which does not exist
    plain = server()
    try:
        _login(plain, tid, password, tokenauth=False)
        raise AssertionError("a token authenticated without tokenauth=true")
    except SaslFailure:
        pass
    now[0] = T0 + S.expiry_time_ms + 1  # expired: refused even before the sweep
    late = server()
    try:
        _login(late, tid, password, tokenauth=True)
        raise AssertionError("an expired token authenticated")
    except SaslFailure:
        pass
    assert TokenCredentials(None, lambda: c.image, lambda: T0).lookup("SCRAM-SHA-256", tid) is None


def test_which_connections_may_manage_tokens() -> None:
    def s(protocol: str, principal: str = "User:a", token: bool = False) -> Session:
        return Session("L", protocol, "127.0.0.1", principal, True, None, token)

    assert not token_requests_allowed(s("PLAINTEXT"))
    assert not token_requests_allowed(s("SSL", "User:ANONYMOUS"))  # one-way TLS
    assert token_requests_allowed(s("SSL", "User:CN=client"))
    assert token_requests_allowed(s("SASL_PLAINTEXT"))
    assert not token_requests_allowed(s("SASL_SSL", token=True))


def test_the_envelope_carries_token_authentication() -> None:
    assert decode_principal(encode_principal("User:a", True)) == ("User:a", True)
    assert decode_principal(encode_principal("User:a")) == ("User:a", False)


def test_a_forwarded_refusal_with_kafkas_minus_one_timestamps_is_read() -> None:
    """Found by the fault harness (combined nodes, the token APIs forwarded in an
    Envelope): the controller's refusal carries Kafka's -1 timestamps, which kio cannot
    decode; the broker failed the request with a traceback and closed the connection.
    The forwarder now says which error the controller answered."""
    import asyncio

    import pytest
    from kio.index import load_request_schema

    from keeperless.broker.forwarder import Forwarder, UndecodableAnswerError
    from keeperless.metadata.token_requests import expiry_response
    from keeperless.protocol.apis import ApiKey
    from keeperless.protocol.build import build
    from keeperless.protocol.framing import RequestHeader, encode_response, response_class

    header = RequestHeader(ApiKey.RENEW_DELEGATION_TOKEN, 2, 7, "c")
    refusal = expiry_response(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                              ErrorCode.delegation_token_not_found, -1)  # fmt: skip

    class Remote:
        async def forward(self, api_key: int, version: int, req: object,
                          timeout_s: float | None = None) -> object:  # fmt: skip
            data = encode_response(header, refusal)[4:]
            return build(response_class(ApiKey.ENVELOPE, 0),
                         {"response_data": data, "error_code": ErrorCode.none})  # fmt: skip

    async def no_local() -> None:
        return None

    req = build(load_request_schema(ApiKey.RENEW_DELEGATION_TOKEN, 2),
                {"hmac": b"x", "renew_period": -1})  # fmt: skip
    fwd = Forwarder(Remote(), no_local)
    with pytest.raises(UndecodableAnswerError) as e:
        asyncio.run(fwd.forward(header, req))
    assert e.value.error_code == ErrorCode.delegation_token_not_found
