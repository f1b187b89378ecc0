"""controller.quorum.auto.join.enable (Kafka 4.2): a controller of a dynamic quorum
(KIP-853) that is not a voter asks the active controller to add it, again each second
until it is one (the leader refuses until it has caught up). A voter of its id with
another directory id (its old, replaced disk) is removed first."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import request_class
from keeperless.runtime.metadata_log import MetadataLog
from keeperless.runtime.raft_rpc import wire_directory_id
from keeperless.runtime.raft_transport import RaftTransport

__all__ = ["auto_join_loop"]

log = logging.getLogger(__name__)
INTERVAL_S = 1.0


async def auto_join_loop(mlog: MetadataLog, transport: RaftTransport, cluster_id: str) -> None:
    said = ""
    while True:
        await asyncio.sleep(INTERVAL_S)
        core = mlog.core
        if not core.dynamic or core.is_voter or core.leader_id < 0:
            continue
        addr = transport.address_of(core.leader_id)
        if addr is None:
            continue
        me = core.node_id
        old = core.voter_set.get(me)
        body: dict[str, Any]
        if old is not None and old.directory_id != core.directory_id:
            key, version, what = ApiKey.REMOVE_RAFT_VOTER, 0, f"remove voter {old} (an old disk)"
            body = {"cluster_id": cluster_id, "voter_id": me,
                    "voter_directory_id": wire_directory_id(old.directory_id)}  # fmt: skip
        else:
            key, version, what = ApiKey.ADD_RAFT_VOTER, 1, "join the voters"
            host, port = transport.endpoint
            body = {
                "cluster_id": cluster_id,
                "timeout": 30_000,
                "voter_id": me,
                "voter_directory_id": wire_directory_id(core.directory_id),
                "listeners": [{"name": transport.listener_name, "host": host, "port": port}],
                "ack_when_committed": True,
            }
        req = build(request_class(key, version), body)
        try:
            resp = await asyncio.wait_for(
                transport.client.send(addr, key, version, req, lane="control"), 35
            )
        except Exception as e:  # the leader moved or is down: the next round retries
            outcome = f"could not ask the leader to {what}: {e!r}"
        else:
            code = int(resp.error_code)
            outcome = (
                f"asked leader {core.leader_id} to {what}: done"
                if code == 0
                else f"asked leader {core.leader_id} to {what}: {resp.error_message or code}"
            )
        if outcome != said:  # one line per change of outcome, not one a second
            said = outcome
            log.info("[node %d] controller.quorum.auto.join.enable: %s", me, outcome)
