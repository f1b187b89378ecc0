"""SCRAM credential records at the controller: RFC 5802 keys, Kafka's refusals."""

from __future__ import annotations

import hashlib
import hmac
import random

from kio.schema.errors import ErrorCode

from keeperless.controller.quorum_controller import QuorumController
from keeperless.controller.scram import alter_scram_credentials, scram_keys
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import image_records

SHA256, SHA512 = 1, 2


def test_keys_follow_rfc_5802() -> None:
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", b"salt", 4096)
    stored, server = scram_keys(SHA256, salted)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert stored == hashlib.sha256(client_key).digest()
    assert server == hmac.new(salted, b"Server Key", "sha256").digest()
    assert len(scram_keys(SHA512, salted)[0]) == 64


def test_alter_validate_delete_and_snapshot() -> None:
    c = QuorumController(1, random.Random(1), {})
    res = alter_scram_credentials(
        c,
        [("ghost", SHA256)],
        [
            ("alice", SHA256, 4096, b"salt", b"x" * 32),
            ("alice", SHA512, 8192, b"salt", b"y" * 64),
            ("bob", SHA256, 100, b"salt", b"z" * 32),
            ("carol", 7, 4096, b"salt", b"z" * 32),
            ("dave", SHA256, 4096, b"s", b"p"),
            ("dave", SHA256, 4096, b"s", b"p"),
        ],
    )
    codes = dict((u, e.code) for u, e in res.response)
    assert codes == {
        "ghost": ErrorCode.resource_not_found,
        "alice": ErrorCode.none,
        "bob": ErrorCode.unacceptable_credential,
        "carol": ErrorCode.unsupported_sasl_mechanism,
        "dave": ErrorCode.duplicate_resource,
    }
    c.replay(res.records, 1)
    assert sorted(c.image.scram) == [("alice", SHA256), ("alice", SHA512)]
    assert c.image.scram[("alice", SHA512)].iterations == 8192
    delta = MetadataDelta(MetadataImage())
    for rec in image_records(c.image):
        delta.replay(rec)
    assert dict(delta.apply().scram) == dict(c.image.scram)
    res = alter_scram_credentials(c, [("alice", SHA256)], [])
    c.replay(res.records, 2)
    assert sorted(c.image.scram) == [("alice", SHA512)]
