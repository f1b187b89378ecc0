"""A node's side of a dynamic controller quorum (KIP-853): AddRaftVoter, RemoveRaftVoter
and UpdateRaftVoter on the controller listener (the active controller makes the change
in its Raft core and answers once it is committed; the others answer
NOT_LEADER_OR_FOLLOWER, and the tool then asks the leader), and what a node gives its
Raft core: its metadata directory's id, where it listens as a voter, and the bootstrap
servers it asks where the leader is."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.metadata.features import KRAFT_VERSION_FEATURE
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.raft import messages as m
from keeperless.raft.core import MembershipError, RaftCore
from keeperless.raft.voters import Endpoint, Voter
from keeperless.runtime.metadata_log import MetadataLog
from keeperless.runtime.raft_rpc import directory_id
from keeperless.runtime.raft_transport import RaftTransport
from keeperless.server.config import NodeConfig
from keeperless.storage.meta_properties import read_meta_properties, uuid_from_kafka

__all__ = [
    "QuorumApis",
    "alone_warning",
    "bootstrap_servers",
    "metadata_directory_id",
    "voter_endpoints",
]

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S = 30.0
_API_VERSIONS = {"client_software_name": "keeperless", "client_software_version": "1"}


def metadata_directory_id(d: Path) -> uuid.UUID | None:
    """The directory id of the metadata log directory (a dynamic quorum's voters are
    named by it), from its meta.properties."""
    meta = read_meta_properties(d)
    if meta is None or not meta.directory_id:
        return None
    return uuid_from_kafka(meta.directory_id)


def voter_endpoints(c: NodeConfig) -> tuple[Endpoint, ...]:
    """Where this controller listens, as a voter names it (its advertised controller
    listener; none for a broker)."""
    ep = c.advertised_controller_endpoint
    if not c.is_controller or ep is None:
        return ()
    return (Endpoint(ep.listener, ep.host or "localhost", ep.port),)


def bootstrap_servers(c: NodeConfig, book: dict[int, tuple[str, int]]) -> tuple[int, ...]:
    """controller.quorum.bootstrap.servers in the transport's address ``book``, under ids
    of their own (negative: never a node's), for a node of a dynamic quorum to ask
    where the leader is; returns those ids."""
    ids = []
    for i, server in enumerate(c["controller.quorum.bootstrap.servers"]):
        host, _, port = str(server).rpartition(":")
        book[-2 - i] = (host.strip("[]"), int(port))
        ids.append(-2 - i)
    return tuple(ids)


def alone_warning(node_id: int, c: NodeConfig, voters: tuple[int, ...]) -> bool:
    """A controller with no voters in its log whose bootstrap servers name only itself
    waits for a quorum nobody will form: say so (a new user's try waited silently).
    Whether it warned."""
    ep = c.controller_endpoint
    servers = [str(s) for s in c["controller.quorum.bootstrap.servers"]]
    own = {f"{h}:{ep.port}" for h in (ep.host, "localhost", "127.0.0.1")} if ep else set()
    if voters or not servers or not all(s in own for s in servers):
        return False
    log.warning(
        "[node %d] controller.quorum.bootstrap.servers names only this controller (%s) "
        "and its log has no voters: it waits for a quorum that does not exist. Format the "
        "first controller with --standalone or --initial-controllers, or list a running "
        "controller",
        node_id,
        ", ".join(servers),
    )
    return True


def _voter_of(req: Any) -> Voter:
    """The voter an AddRaftVoter or UpdateRaftVoter request names, with its listeners."""
    return Voter(
        int(req.voter_id),
        directory_id(req.voter_directory_id),
        tuple(Endpoint(li.name, li.host, int(li.port)) for li in req.listeners),
    )


class QuorumApis:
    def __init__(
        self, mlog: MetadataLog, cluster_id: str, transport: RaftTransport | None = None
    ) -> None:
        self.mlog = mlog
        self.cluster_id = cluster_id
        # how the leader asks a new voter what it supports: the quorum's own client, on
        # the quorum's listener
        self.client = transport.client if transport is not None else None
        self.listener_name = transport.listener_name if transport is not None else "CONTROLLER"

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.ADD_RAFT_VOTER: self.add_raft_voter,
            ApiKey.REMOVE_RAFT_VOTER: self.remove_raft_voter,
            ApiKey.UPDATE_RAFT_VOTER: self.update_raft_voter,
        }

    def _answer(self, header: RequestHeader, code: int, message: str | None) -> Any:
        body: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": ErrorCode(code),
            "error_message": message,
            "current_leader": {
                "leader_id": self.mlog.core.leader_id,
                "leader_epoch": self.mlog.core.epoch,
                "host": "",
                "port": 0,
            },
        }
        return build(response_class(header.api_key, header.api_version), body)

    async def _change(self, header: RequestHeader, req: Any, what: str, change: Any) -> Any:
        if req.cluster_id is not None and req.cluster_id != self.cluster_id:
            return self._answer(
                header,
                ErrorCode.inconsistent_cluster_id,
                f"The request names cluster {req.cluster_id}; this is cluster {self.cluster_id}",
            )
        timeout = getattr(req, "timeout", None)
        timeout_s = timeout.total_seconds() if timeout is not None else DEFAULT_TIMEOUT_S
        try:
            await self.mlog.change_voters(change, timeout_s if timeout_s > 0 else DEFAULT_TIMEOUT_S)
        except MembershipError as e:
            log.info("[node %d] %s refused: %s", self.mlog.node_id, what, e)
            return self._answer(header, e.code, str(e))
        log.info(
            "[node %d] %s: the voters are now %s", self.mlog.node_id, what, self.mlog.core.voter_set
        )
        return self._answer(header, m.NONE, None)

    async def _reachable(self, voter: Voter) -> tuple[int, str] | None:
        """As Kafka's leader does before adding a voter: ask it, where it says it listens
        on this quorum's listener, for its ApiVersions, and refuse (error, message) a
        voter that cannot be reached there or cannot run at this kraft.version. (Only
        for a change the core would consider: not for a static quorum, a non-leader or
        a voter already in the set, whose refusals the core gives.)"""
        core = self.mlog.core
        if self.client is None or not core.is_leader or not core.dynamic:
            return None
        if any(v.id == voter.id for v in core.voter_set.voters):
            return None
        ep = next((e for e in voter.endpoints if e.name == self.listener_name), None)
        if ep is None:
            return (
                ErrorCode.invalid_request,
                f"Provided listeners {[str(e) for e in voter.endpoints]} do not contain a "
                f"listener for {self.listener_name}",
            )
        try:
            resp = await self.client.request(
                (ep.host, ep.port), ApiKey.API_VERSIONS, version=3, request=_API_VERSIONS,
                timeout_s=5.0, lane="control",
            )  # fmt: skip
        except (OSError, TimeoutError, ConnectionError) as e:
            return (
                ErrorCode.request_timed_out,
                f"New voter {voter} is not ready to receive requests at {ep.host}:{ep.port}: {e}",
            )
        if int(resp.error_code):
            return (
                ErrorCode.request_timed_out,
                f"Aborted add voter operation for {voter} since API_VERSIONS returned an "
                f"error {ErrorCode(resp.error_code).name.upper()}",
            )
        kv = core.kraft_version
        rng = next(
            ((int(f.min_version), int(f.max_version)) for f in resp.supported_features
             if f.name == KRAFT_VERSION_FEATURE),
            (0, 0),
        )  # fmt: skip
        if not rng[0] <= kv <= rng[1]:
            return (
                ErrorCode.invalid_request,
                f"Aborted add voter operation for {voter} since the {KRAFT_VERSION_FEATURE} "
                f"range (min: {rng[0]}, max: {rng[1]}) doesn't support the finalized version {kv}",
            )
        return None

    async def add_raft_voter(self, header: RequestHeader, req: Any) -> Any:
        voter = _voter_of(req)
        refused = await self._reachable(voter)
        if refused is not None:
            log.info("[node %d] AddRaftVoter %s refused: %s", self.mlog.node_id, voter, refused[1])
            return self._answer(header, *refused)

        def change(core: RaftCore, now: int) -> int:
            return core.add_voter(voter, now)

        return await self._change(header, req, f"AddRaftVoter {voter}", change)

    async def remove_raft_voter(self, header: RequestHeader, req: Any) -> Any:
        node_id, d = int(req.voter_id), directory_id(req.voter_directory_id)

        def change(core: RaftCore, now: int) -> int:
            return core.remove_voter(node_id, d, now)

        return await self._change(header, req, f"RemoveRaftVoter {Voter(node_id, d)}", change)

    async def update_raft_voter(self, header: RequestHeader, req: Any) -> Any:
        voter = _voter_of(req)

        def change(core: RaftCore, now: int) -> int:
            return core.update_voter(voter, now)

        return await self._change(header, req, f"UpdateRaftVoter {voter}", change)
