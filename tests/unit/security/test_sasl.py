"""SASL mechanisms (issue 17): SCRAM against stored credentials only, PLAIN against JAAS
users, JAAS option syntax, and `storage format --add-scram`'s records."""

from __future__ import annotations

import base64

import pytest

from keeperless.metadata.bootstrap import scram_record
from keeperless.metadata.image import ScramCredential
from keeperless.security.sasl import (
    PlainServer,
    SaslFailure,
    ScramServer,
    parse_jaas,
    scram_client_proof,
    scram_salted_password,
)


def _cred(mech: str, password: str) -> ScramCredential:
    rec = scram_record(f"{mech}=[name=alice,password={password},iterations=4096]")
    return ScramCredential(rec.salt, rec.stored_key, rec.server_key, rec.iterations)


def _login(server: ScramServer, mech: str, user: str, password: str) -> bytes:
    first_bare = f"n={user},r=clientnonce"
    server_first = server.step(f"n,,{first_bare}".encode()).decode()
    attrs = dict(p.split("=", 1) for p in server_first.split(","))
    assert attrs["r"].startswith("clientnonce")
    salted = scram_salted_password(mech, password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    proof, server_sig = scram_client_proof(mech, salted, auth)
    final = server.step(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    assert final == b"v=" + base64.b64encode(server_sig)
    return final


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_accepts_the_password_and_refuses_others(mech: str) -> None:
    cred = _cred(mech, "s3cret")
    ok = ScramServer(mech, lambda u: cred if u == "alice" else None)
    _login(ok, mech, "alice", "s3cret")
    assert ok.user == "alice"
    for user, password in (("alice", "wrong"), ("bob", "s3cret")):
        bad = ScramServer(mech, lambda u: cred if u == "alice" else None)
        with pytest.raises((SaslFailure, AssertionError)):
            _login(bad, mech, user, password)
        assert bad.user is None


def test_scram_refuses_a_replayed_nonce_and_garbage() -> None:
    cred = _cred("SCRAM-SHA-256", "pw")
    s = ScramServer("SCRAM-SHA-256", lambda u: cred)
    s.step(b"n,,n=alice,r=abc")
    with pytest.raises(SaslFailure, match="nonce"):
        s.step(b"c=biws,r=abcOTHER,p=AAAA")
    with pytest.raises(SaslFailure):
        ScramServer("SCRAM-SHA-256", lambda u: cred).step(b"\xff\xfe")
    with pytest.raises(SaslFailure, match="channel binding"):
        ScramServer("SCRAM-SHA-256", lambda u: cred).step(b"p=tls-unique,,n=alice,r=x")
    # an empty nonce or user name is refused, for unknown users too (RFC 5802)
    # (and, as Kafka parses it, n= before r= and a nonce of printable ASCII, no comma)
    for first in (b"n,,n=x,r=", b"n,,n=alice,r=", b"n,,n=,r=abc", b"n,,r=abc,n=bob",
                  b"n,,n=bob,r= ", b"n,,n=bob,r=\x00"):  # fmt: skip
        with pytest.raises(SaslFailure, match="no user name or nonce"):
            ScramServer("SCRAM-SHA-256", lambda u: None).step(first)


def test_plain() -> None:
    s = PlainServer({"alice": "pw"})
    assert s.step(b"\0alice\0pw") == b""
    assert s.user == "alice"
    for token in (b"\0alice\0nope", b"\0bob\0pw", b"alice\0pw", b"\0\0pw", b"bob\0alice\0pw"):
        with pytest.raises(SaslFailure):
            PlainServer({"alice": "pw"}).step(token)


def test_jaas_options() -> None:
    module, opts = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="a\\"b" user_admin="x" user_bob=plain;'
    )
    assert module.endswith("PlainLoginModule")
    assert opts == {"username": "admin", "password": 'a"b', "user_admin": "x", "user_bob": "plain"}
    with pytest.raises(ValueError, match="required"):
        parse_jaas('username="admin";')
    with pytest.raises(ValueError, match="semi-colon"):
        parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required a="b"')


def test_add_scram_stores_keys_not_the_password() -> None:
    rec = scram_record("SCRAM-SHA-512=[name=alice,password=topsecret,iterations=8192]")
    assert (rec.name, rec.mechanism, rec.iterations) == ("alice", 2, 8192)
    assert b"topsecret" not in rec.salt + rec.stored_key + rec.server_key
    assert len(rec.stored_key) == 64
    bad_specs = (
        "SCRAM-SHA-1=[name=a,password=b]",
        "SCRAM-SHA-256=[name=a]",
        "SCRAM-SHA-256=[name=a,password=b,iterations=10]",
        "SCRAM-SHA-256 name=a",
    )
    for bad in bad_specs:
        with pytest.raises(ValueError, match="--add-scram"):
            scram_record(bad)
