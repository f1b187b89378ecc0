"""kio builds an API version's request and response classes when first imported: 5-20 ms
of dataclass creation on the event loop, found holding it at the first JoinGroup,
OffsetCommit or Produce of a client (a watchdog thread's stack samples during
bench/throughput.py). The versions every client uses are imported by a thread while the
node starts instead; the rest (admin APIs, old versions) still load when first asked
for. All of them would take 1.35 s of CPU at every start."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.framing import request_class, response_class

__all__ = ["COMMON_APIS", "start_schema_warmup", "warm_schemas"]

log = logging.getLogger(__name__)

# what producers, consumers, groups, transactions and a SASL login send, at the newest
# version (each client library's own, since they negotiate the highest both know)
COMMON_APIS = (
    ApiKey.API_VERSIONS,
    ApiKey.METADATA,
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.END_TXN,
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE,
)


def warm_schemas(apis: Mapping[int, tuple[int, int]]) -> int:
    """Import the newest served version of each common API in ``apis``; how many."""
    done = 0
    for key in COMMON_APIS:
        served = apis.get(key)
        if served is None:
            continue
        request_class(key, served[1])
        response_class(key, served[1])
        done += 1
    return done


def start_schema_warmup(apis: Mapping[int, tuple[int, int]]) -> threading.Thread:
    def run() -> None:
        t0 = time.monotonic()
        try:
            n = warm_schemas(apis)
        except Exception:  # a schema that cannot load fails its first request instead
            log.exception("Could not load the common API schemas ahead of their use")
            return
        ms = (time.monotonic() - t0) * 1000
        log.info("Loaded the schemas of %d common APIs ahead of their first use in %.0f ms", n, ms)

    # not a daemon: the interpreter joins it before it finalizes. A daemon thread still
    # importing as a refused broker exited ~70 ms after start hung that exit for good
    # (once in a CI run of test_brokers_of_another_inter_broker_protocol_version_are_refused)
    t = threading.Thread(target=run, name="schema-warmup", daemon=False)
    t.start()
    return t
