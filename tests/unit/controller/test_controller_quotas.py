"""Client quota records: AlterClientQuotas at the controller, describe filters, snapshots."""

from __future__ import annotations

import random

from kio.schema.errors import ErrorCode

from keeperless.controller.quorum_controller import QuorumController
from keeperless.controller.quotas import alter_client_quotas
from keeperless.metadata.admin import describe_client_quotas
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import image_records

ALICE = (("user", "alice"),)
APP = (("client-id", "app"), ("user", "alice"))
DEFAULT_USER = (("user", None),)


def test_alter_validate_and_remove() -> None:
    c = QuorumController(1, random.Random(1), {})
    res = alter_client_quotas(
        c,
        [
            (ALICE, [("producer_byte_rate", 1024.0, False), ("request_percentage", 50.5, False)]),
            (APP, [("consumer_byte_rate", 2048.0, False)]),
            (DEFAULT_USER, [("producer_byte_rate", 512.0, False)]),
            ((("user", "x"),), [("nope", 1.0, False)]),
            ((("user", "x"),), [("producer_byte_rate", 1.5, False)]),
            ((("ip", "1.2.3.4"), ("user", "x")), [("connection_creation_rate", 1.0, False)]),
            ((("group", "g"),), [("producer_byte_rate", 1.0, False)]),
        ],
        False,
    )
    codes = [e.code for e in res.response]
    assert codes == [ErrorCode.none] * 3 + [ErrorCode.invalid_request] * 4
    messages = [e.message or "" for e in res.response[3:]]
    assert "Invalid configuration key nope" in messages[0]
    assert "must be a Long value" in messages[1]
    assert "IP entity should not be combined" in messages[2]
    assert "Unhandled client quota entity type: group" in messages[3]
    c.replay(res.records, 1)
    assert dict(c.image.client_quotas[ALICE]) == {
        "producer_byte_rate": 1024.0,
        "request_percentage": 50.5,
    }
    # validate-only writes nothing; removing the last key removes the entity
    assert (
        alter_client_quotas(c, [(ALICE, [("producer_byte_rate", 9.0, False)])], True).records == []
    )
    res = alter_client_quotas(c, [(APP, [("consumer_byte_rate", 0.0, True)])], False)
    c.replay(res.records, 2)
    assert APP not in c.image.client_quotas

    def found(components: list, strict: bool = False) -> list:
        return [e for e, _ in describe_client_quotas(c.image.client_quotas, components, strict)]

    assert found([("user", 0, "alice")]) == [ALICE]
    assert found([("user", 1, None)]) == [DEFAULT_USER]
    assert sorted(found([("user", 2, None)]), key=str) == sorted([ALICE, DEFAULT_USER], key=str)
    # a snapshot keeps them
    delta = MetadataDelta(MetadataImage())
    for rec in image_records(c.image):
        delta.replay(rec)
    assert dict(delta.apply().client_quotas) == dict(c.image.client_quotas)
