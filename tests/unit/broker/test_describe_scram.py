"""DescribeUserScramCredentials at the number of users a cluster may have: answered from
one pass over the credentials (a pass per user held the event loop for minutes at
52,000 users - the node answered nothing and ignored SIGTERM: a helper's probe)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from keeperless.broker.handlers import BrokerHandlers
from keeperless.metadata import _records_gen as r
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader
from tests.unit.brokers import make_broker

USERS = 3_000


class _Counted(dict):  # type: ignore[type-arg]
    """The image's credentials, counting the passes made over them."""

    passes = 0

    def items(self) -> Any:
        _Counted.passes += 1
        return super().items()


def test_every_user_is_described_from_one_pass_over_the_credentials(tmp_path: Path) -> None:
    b = make_broker(tmp_path)
    recs = [
        r.UserScramCredentialRecord(name=f"user-{i:05d}", mechanism=1 + i % 2, salt=b"s",
                                    stored_key=b"k", server_key=b"k", iterations=4096 + i)
        for i in range(USERS)
    ]  # fmt: skip
    b.on_committed(recs, len(recs))
    b.image = type(b.image)(**{**{f: getattr(b.image, f) for f in b.image.__dataclass_fields__},
                               "scram": _Counted(b.image.scram)})  # fmt: skip
    handlers = BrokerHandlers(b)

    def ask(users: list[str] | None) -> Any:
        req = build(load_request_schema(50, 0), {"users": None if users is None else
                                           [{"name": u} for u in users]})  # fmt: skip
        return asyncio.run(handlers.describe_scram_credentials(RequestHeader(50, 0, 1, "t"), req))

    _Counted.passes = 0
    every = ask(None)
    assert _Counted.passes == 1
    assert [x.user for x in every.results] == [f"user-{i:05d}" for i in range(USERS)]
    assert every.results[7].credential_infos[0].iterations == 4103
    named = ask(["user-00002", "nobody", "user-00003", "user-00003"])
    assert [(x.user, x.error_code) for x in named.results] == [
        ("user-00002", ErrorCode.none),
        ("nobody", ErrorCode.resource_not_found),
        ("user-00003", ErrorCode.duplicate_resource),
    ]
    b.close()
