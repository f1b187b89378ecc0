"""The schemas every client uses are loaded before their first request (kio builds a
version's classes at its first import: 5-20 ms on the event loop otherwise)."""

from __future__ import annotations

from keeperless.protocol.apis import BROKER_APIS, ApiKey
from keeperless.protocol.framing import request_class, response_class
from keeperless.runtime.schema_warmup import COMMON_APIS, start_schema_warmup


def test_the_common_apis_newest_versions_are_loaded_ahead() -> None:
    request_class.cache_clear()
    response_class.cache_clear()
    start_schema_warmup(BROKER_APIS).join(60)
    served = [k for k in COMMON_APIS if k in BROKER_APIS]
    assert ApiKey.PRODUCE in served
    assert ApiKey.FETCH in served
    for cached in (request_class, response_class):
        before = cached.cache_info()
        for key in served:
            cached(key, BROKER_APIS[key][1])
        after = cached.cache_info()
        assert after.misses == before.misses, f"{cached.__name__}: not loaded ahead"
        assert after.hits - before.hits == len(served)
