"""A dynamic quorum's controller keeps its own entry in the voter set right (KIP-853):

* a voter whose endpoints changed (a new address, a DNS change) asks the active
  controller to update them (UpdateRaftVoter; the active controller updates its own);
* with controller.quorum.auto.join.enable (Kafka 4.2), a controller that is not a voter
  asks the active controller to add it, again each second until it is one (the leader
  refuses until it has caught up); a voter of its id with another directory id (its
  old, replaced disk) is removed first."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import request_class
from keeperless.raft.core import MembershipError
from keeperless.raft.voters import Voter
from keeperless.runtime.metadata_log import MetadataLog
from keeperless.runtime.raft_rpc import wire_directory_id
from keeperless.runtime.raft_transport import RaftTransport

__all__ = ["auto_join_loop"]

log = logging.getLogger(__name__)
INTERVAL_S = 1.0


async def auto_join_loop(
    mlog: MetadataLog, transport: RaftTransport, cluster_id: str, auto_join: bool = True
) -> None:
    said = ""
    while True:
        await asyncio.sleep(INTERVAL_S)
        core = mlog.core
        if not core.dynamic or core.leader_id < 0:
            continue
        if core.is_voter:
            said = await _update_endpoints(mlog, transport, cluster_id, said)
            continue
        if not auto_join:
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


async def _update_endpoints(
    mlog: MetadataLog, transport: RaftTransport, cluster_id: str, said: str
) -> str:
    """UpdateRaftVoter when this voter's endpoints in the log are not where it listens."""
    core = mlog.core
    mine = core.voter_set.get(core.node_id)
    if mine is None or not core.endpoints or mine.endpoints == core.endpoints:
        return said
    voter = Voter(mine.id, mine.directory_id, core.endpoints)
    if core.is_leader:
        if core.pending_voter_change() is not None:
            return said
        try:
            await mlog.change_voters(lambda c, now: c.update_voter(voter, now), 30.0)
            outcome = f"updated its endpoints to {', '.join(map(str, core.endpoints))}"
        except MembershipError as e:
            outcome = f"could not update its endpoints: {e}"
    else:
        addr = transport.address_of(core.leader_id)
        if addr is None:
            return said
        body = {
            "cluster_id": cluster_id,
            "current_leader_epoch": core.epoch,
            "voter_id": voter.id,
            "voter_directory_id": wire_directory_id(voter.directory_id),
            "listeners": [
                {"name": e.name, "host": e.host, "port": e.port} for e in voter.endpoints
            ],
            "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1},
        }
        key = ApiKey.UPDATE_RAFT_VOTER
        req = build(request_class(key, 0), body)
        try:
            resp = await asyncio.wait_for(
                transport.client.send(addr, key, 0, req, lane="control"), 35
            )
            code = int(resp.error_code)
            outcome = f"asked leader {core.leader_id} to update its endpoints: " + (
                "done" if code == 0 else str(code)
            )
        except Exception as e:
            outcome = f"could not ask the leader to update its endpoints: {e!r}"
    if outcome != said:
        log.info("[node %d] %s", core.node_id, outcome)
    return outcome
