"""Assemble and run a node from its configuration: the metadata log and its Raft
transport, the controller role, the broker role, listeners, and their lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker, BrokerSettings
from keeperless.broker.controller_channel import ControllerUnavailableError, RemoteController
from keeperless.broker.controller_rpcs import ControllerRpcs, registration_refused
from keeperless.broker.delegation_token_apis import DelegationTokenApis
from keeperless.broker.forwarder import Forwarder
from keeperless.broker.handlers import BrokerHandlers
from keeperless.broker.quotas import QuotaManager
from keeperless.broker.reassignment_apis import ReassignmentApis
from keeperless.broker.replication import ReplicaManager, ReplicationSettings
from keeperless.broker.txn_markers import TxnMarkerWriter
from keeperless.group.consumer_group_apis import ConsumerGroupApis
from keeperless.group.coordinator import GroupCoordinator, GroupSettings
from keeperless.group.offsets import GroupOffsets
from keeperless.metadata.features import (
    METADATA_VERSION_FEATURE,
    directory_assignment,
    features_body,
)
from keeperless.metadata.image import MetadataImage, ScramCredential
from keeperless.protocol.apis import BROKER_APIS, CONTROLLER_APIS, ApiKey, Listener
from keeperless.protocol.build import build
from keeperless.protocol.framing import response_class
from keeperless.raft.core import RaftConfig
from keeperless.runtime import gc_pauses, schema_warmup
from keeperless.runtime.connection import KafkaProtocol, RequestRouter
from keeperless.runtime.log_cleaner import CleanerSettings, LogCleaner
from keeperless.runtime.metadata_log import MetadataLog
from keeperless.runtime.metrics import Metrics
from keeperless.runtime.raft_transport import RaftTransport
from keeperless.runtime.tasks import stop_tasks
from keeperless.security.api_rules import authorized_handlers
from keeperless.security.authorizer import Authorizer
from keeperless.security.authz import Authz
from keeperless.security.listeners import (
    ListenerSecurity,
    client_security,
    listener_security,
)
from keeperless.security.sasl import MECHANISM_CODES
from keeperless.security.tokens import TokenCredentials
from keeperless.server.auto_join import auto_join_loop
from keeperless.server.config import Endpoint, NodeConfig
from keeperless.server.controller_apis import ControllerApis, ControllerClient
from keeperless.server.controller_service import ControllerService
from keeperless.server.dynamic_listeners import follow_own_configs
from keeperless.server.envelope import envelope_handler
from keeperless.server.quorum_apis import (
    QuorumApis,
    alone_warning,
    bootstrap_servers,
    metadata_directory_id,
    voter_endpoints,
)
from keeperless.server.registry import ApiRegistry
from keeperless.share.service import ShareGroups
from keeperless.storage.dir_failure import set_failure_handler
from keeperless.storage.log import LogConfig
from keeperless.txn.admin import TxnAdmin
from keeperless.txn.coordinator import TxnCoordinator, TxnSettings
from keeperless.txn.offsets import TxnOffsets

__all__ = ["ListenError", "Node", "run_node"]

log = logging.getLogger(__name__)
# how long a stopping broker waits for its controlled shutdown (Kafka waits up to 5 min)
CONTROLLED_SHUTDOWN_S = 60.0
CONTROLLED_SHUTDOWN_POLL_S = 0.1


class ListenError(RuntimeError):
    """A listener's address cannot be bound."""


async def _every(interval_s: float, fn: Callable[[], Any]) -> None:
    """``fn()`` every ``interval_s`` seconds (retention, producer expiry, high watermark
    checkpoints, group sessions)."""
    while True:
        await asyncio.sleep(interval_s)
        fn()


def _raft_config(c: NodeConfig) -> RaftConfig:
    return RaftConfig(
        election_timeout_ms=c["controller.quorum.election.timeout.ms"],
        fetch_timeout_ms=c["controller.quorum.fetch.timeout.ms"],
        election_backoff_max_ms=c["controller.quorum.election.backoff.max.ms"],
        request_timeout_ms=c["controller.quorum.request.timeout.ms"],
    )


class Node:
    def __init__(self, config: NodeConfig, cluster_id: str) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        voters = {v.node_id: (v.host, v.port) for v in config.voters}
        static = tuple(sorted(voters))
        bootstrap = () if static else bootstrap_servers(config, voters)
        ep = config.advertised_controller_endpoint  # (told to peers, as Kafka advertises)
        self.transport = RaftTransport(
            self.node_id,
            cluster_id,
            voters,
            (ep.host, ep.port) if ep else ("", 0),
            config["controller.quorum.request.timeout.ms"],
        )
        if config.controller_listener_names:
            name = config.controller_listener_names[0]
            self.transport.listener_name = name
            self.transport.client.security = client_security(
                config.raw, name, config.protocol_of(name), "sasl.mechanism.controller.protocol"
            )
        self.mlog = MetadataLog(
            self.node_id,
            static,
            config.metadata_log_dir,
            _raft_config(config),
            send=self.transport.send,
            segment_bytes=config["metadata.log.segment.bytes"],
            snapshot_every_bytes=config["metadata.log.max.record.bytes.between.snapshots"],
            snapshot_every_ms=config["metadata.log.max.snapshot.interval.ms"],
            append_linger_ms=config["controller.quorum.append.linger.ms"],
            directory_id=metadata_directory_id(config.metadata_log_dir),
            bootstrap=bootstrap,
            endpoints=voter_endpoints(config),
        )
        core = self.mlog.core
        self.transport.voter_set = lambda: core.voter_set
        self.transport.step = self.mlog.step
        self.transport.state = lambda: (core.leader_id, core.epoch)
        self.transport.describe = lambda: core.describe(int(time.time() * 1000))
        self.controller = ControllerService(config, self.mlog) if config.is_controller else None
        self.controller_apis = (
            ControllerApis(self.controller, self.cluster_id, bool(config["authorizer.class.name"]))
            if self.controller
            else None
        )
        # delegation tokens' SCRAM credentials (tokenauth=true), from the applied metadata
        self.token_credentials = TokenCredentials(
            config["delegation.token.secret.key"] or None,
            self._image,
            lambda: int(time.time() * 1000),
        )
        self.remote = RemoteController(
            self.node_id,
            voters,
            lambda: core.leader_id,
            config["controller.quorum.request.timeout.ms"] * 5,
        )
        self.broker: Broker | None = None
        self.controller_handlers: dict[int, Any] = {}  # the controller listener's
        self.replicas: ReplicaManager | None = None
        self.groups: GroupCoordinator | None = None
        self.shares: ShareGroups | None = None
        self.txn: TxnCoordinator | None = None
        self.markers: TxnMarkerWriter | None = None
        self.cleaner: LogCleaner | None = None
        if config.is_broker:
            local = self.controller_apis.local if self.controller_apis else None
            rpcs = ControllerRpcs(ControllerClient(local, self.remote).send, self.cluster_id)
            self.broker = Broker(self._broker_settings(), rpcs)
            self.broker.kraft_version = lambda: core.kraft_version
            self.broker.session_s = config["broker.session.timeout.ms"] / 1000
            self.broker.forwarder = Forwarder(self.remote, self._local_controller_handlers)
            self._secure_peers(self.broker)
            self.groups = GroupCoordinator(self.broker, GroupSettings.of(config))
            self.shares = ShareGroups(self.groups, config)
            self.markers = TxnMarkerWriter(self.broker)
            self.txn = TxnCoordinator(
                self.broker,
                TxnSettings(
                    partitions=config["transaction.state.log.num.partitions"],
                    replication_factor=config["transaction.state.log.replication.factor"],
                    min_isr=config["transaction.state.log.min.isr"],
                    segment_bytes=config["transaction.state.log.segment.bytes"],
                    max_timeout_ms=config["transaction.max.timeout.ms"],
                    abort_interval_ms=config[
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                    ],
                    id_expiration_ms=config["transactional.id.expiration.ms"],
                    remove_interval_ms=config[
                        "transaction.remove.expired.transaction.cleanup.interval.ms"
                    ],
                ),
                self.markers,
                self.groups.find_coordinator,
                self.groups.ensure_offsets_topic,
            )
            broker = self.broker
            self.mlog.listeners.append(broker.on_committed)
            self.mlog.snapshot_listeners.append(
                lambda delta, image, sid: broker.load_snapshot(delta, image)
            )
        if self.controller is not None:
            ctl = self.controller.controller
            self.mlog.snapshot_source = lambda: ctl.committed
        elif self.broker is not None:
            br = self.broker
            self.mlog.snapshot_source = lambda: br.image
        self.metrics: Metrics | None = None
        if config["metrics.http.listener"] is not None:
            self.metrics = Metrics(self)
            self.mlog.metrics = self.metrics
            if self.broker is not None:
                self.broker.metrics = self.metrics
            if self.controller is not None:
                self.controller.metrics = self.metrics
        self.servers: list[asyncio.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stale_told = -1e9  # when a refused heartbeat was last reported
        # set when a log directory goes offline: the heartbeat tells the controller now
        self._heartbeat_now = asyncio.Event()
        self.listener_securities: list[ListenerSecurity] = []  # of the bound listeners
        if self.broker is not None:
            self.broker.partitions.on_dir_offline = lambda _ld: self._heartbeat_now.set()
            follow_own_configs(self.broker, self.config, self.listener_securities)

    def _broker_settings(self) -> BrokerSettings:
        c = self.config
        # what the file sets, as written: the static layer of every config
        static = dict(c.raw)
        return BrokerSettings(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            log_dir=c.log_dirs[0],
            log_dirs=c.log_dirs,
            endpoints=tuple((e.listener, e.host, e.port) for e in c.advertised_broker_listeners),
            rack=c["broker.rack"],
            log_defaults=LogConfig(
                segment_bytes=c["log.segment.bytes"],
                segment_ms=c.segment_ms,
                retention_ms=c.retention_ms,
                retention_bytes=c["log.retention.bytes"],
                index_interval_bytes=c["log.index.interval.bytes"],
                flush_interval_messages=c["log.flush.interval.messages"],
            ),
            auto_create_topics=c["auto.create.topics.enable"],
            max_message_bytes=c["message.max.bytes"],
            offsets_topic_partitions=c["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=c["offsets.topic.replication.factor"],
            static_configs=static,
            rack_aware_reads=c["replica.selector.class"] is not None,
            authorizer=c["authorizer.class.name"] is not None,
            super_users=frozenset(c["super.users"]),
            allow_if_no_acl=c["allow.everyone.if.no.acl.found"],
        )

    # -- lifecycle ----------------------------------------------------------------------

    def _on_log_dir_failure(self, directory: Path, error: OSError) -> None:
        """A write in one of the broker's log directories failed: that directory goes
        offline and the broker serves on from the others (KIP-858); the node stops when
        it was the metadata log's directory or the last one online, as Kafka does."""
        b = self.broker
        meta = self.config.metadata_log_dir
        ld = b.partitions.dir_containing(directory) if b is not None else None
        # before metadata.version 3.7-IV2 the controller cannot be told (Kafka has no
        # JBOD in KRaft there): the node stops, and its leaderships move
        mv = b.image.features.get(METADATA_VERSION_FEATURE) if b is not None else None
        if b is not None and ld is not None and ld.path != meta and directory_assignment(mv):
            b.partitions.dir_failed(directory, error)
            if b.partitions.online_dirs:
                return
        self._halt_on_log_dir_failure(directory, error)

    def _halt_on_log_dir_failure(self, directory: Path, error: OSError) -> None:
        log.critical(
            "[node %d] Log directory %s failed: %s. Stopping, as Kafka does when its log "
            "directory fails (nothing more is written to it; a restart recovers the log, "
            "cutting off any torn tail)",
            self.node_id,
            directory,
            error,
        )
        logging.shutdown()
        os._exit(1)

    async def start(self) -> None:
        set_failure_handler(self._on_log_dir_failure)
        t0 = time.monotonic()
        if self.broker is not None:  # while the node starts, off the event loop
            schema_warmup.start_schema_warmup(BROKER_APIS)
        if self.metrics is not None:
            host, port = self.config["metrics.http.listener"]
            try:
                self.metrics.serve(host, port)
            except OSError as e:
                raise ListenError(f"Cannot serve metrics on {host}:{port}: {e.strerror}") from None
            self._tasks.append(
                asyncio.get_running_loop().create_task(self.metrics.watch_loop_lag())
            )
        ctl_names = set(self.config.controller_listener_names)
        if self.controller is not None:
            for ep in self.config.listeners:
                if ep.listener in ctl_names:
                    await self._listen(ep, self._controller_router())
        self.mlog.start()
        if self.controller is not None:  # (a dynamic quorum's own voter entry)
            auto = self.config["controller.quorum.auto.join.enable"]
            join = auto_join_loop(self.mlog, self.transport, self.cluster_id, auto)
            self._tasks.append(asyncio.get_running_loop().create_task(join))
            alone_warning(self.node_id, self.config, self.mlog.core.voters)
        role = "voter" if self.mlog.core.is_voter else "observer"
        log.info("[node %d] Metadata log loaded: log end offset %d, %s", self.node_id,
                 self.mlog.raft_log.end_offset, role)  # fmt: skip
        loop = asyncio.get_running_loop()
        if self.broker is not None:
            # Bind first, as Kafka does: a listener that cannot be bound stops the node
            # before it registers (and is unfenced, and given partitions it cannot serve);
            # requests are accepted once the broker has caught up.
            router = self._broker_router()
            bound = [
                await self._listen(ep, router, serve=False) for ep in self.config.broker_listeners
            ]
            await self._register_broker()
            for server in bound:
                await server.start_serving()
            log.info("[node %d] Broker listeners accepting requests", self.node_id)
            self.replicas = ReplicaManager(
                self.broker,
                ReplicationSettings(
                    lag_time_max_ms=self.config["replica.lag.time.max.ms"],
                    fetch_wait_max_ms=self.config["replica.fetch.wait.max.ms"],
                    fetch_max_bytes=self.config["replica.fetch.max.bytes"],
                    fetch_response_max_bytes=self.config["replica.fetch.response.max.bytes"],
                    fetch_backoff_ms=self.config["replica.fetch.backoff.ms"],
                ),
            )
            self.replicas.start()
            if self.txn is not None:
                self.txn.start()
            self._tasks.append(loop.create_task(self._heartbeat_loop()))
            self._tasks.append(loop.create_task(self.broker.dir_assignment_loop()))
            c, b, groups, shares = self.config, self.broker, self.groups, self.shares
            assert groups is not None
            assert shares is not None
            for interval_ms, fn in (
                (c["log.retention.check.interval.ms"], b.enforce_retention),
                (c["producer.id.expiration.check.interval.ms"],
                 lambda: b.expire_producers(c["producer.id.expiration.ms"])),
                (c["replica.high.watermark.checkpoint.interval.ms"],
                 self._checkpoint_high_watermarks),
                (500, groups.expire_sessions),
                *shares.periodic(c),
            ):  # fmt: skip
                self._tasks.append(loop.create_task(_every(interval_ms / 1000, fn)))
            c = self.config
            self.cleaner = LogCleaner(
                self.broker,
                CleanerSettings(
                    enable=c["log.cleaner.enable"],
                    threads=c["log.cleaner.threads"],
                    dedupe_buffer_size=c["log.cleaner.dedupe.buffer.size"],
                    io_max_bytes_per_second=c["log.cleaner.io.max.bytes.per.second"],
                    backoff_ms=c["log.cleaner.backoff.ms"],
                ),
            )
            self._tasks.append(loop.create_task(self.cleaner.run()))
        gc_pauses.watch(self.metrics)  # what the start made frozen; collections timed
        log.info(
            "[node %d] Started in %.0f ms (cluster %s)",
            self.node_id,
            (time.monotonic() - t0) * 1000,
            self.cluster_id,
        )

    async def _local_controller_handlers(self) -> Mapping[int, Any] | None:
        """This node's controller handlers when it is the active controller (a combined
        node answers forwarded requests in process), else None."""
        service = self.controller
        if service is None:
            return None
        if service.mlog.core.is_leader:  # just elected: use it once it has caught up
            await service.wait_active(service.mlog.core.config.request_timeout_ms / 1000)
        return self.controller_handlers if service.is_active else None

    def _secure_peers(self, broker: Broker) -> None:
        """Brokers reach controllers on the controller listener and each other on
        inter.broker.listener.name, with those listeners' TLS and SASL."""
        self.remote.client.security = self.transport.client.security
        name = self.config.inter_broker_listener
        broker.inter_broker_listener = name
        sec = client_security(
            self.config.raw, name, self.config.protocol_of(name),
            "sasl.mechanism.inter.broker.protocol",
        )  # fmt: skip
        broker.peers.security = sec

    def _image(self) -> MetadataImage:
        """The metadata this node has applied (its controller's committed image on a
        controller; a broker's published one)."""
        if self.controller is not None:
            return self.controller.controller.committed
        if self.broker is not None:
            return self.broker.image
        return MetadataImage()

    def _scram_lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        """A user's SCRAM credential in the metadata this node has applied."""
        return self._image().scram.get((user, MECHANISM_CODES[mechanism]))

    async def _listen(
        self, ep: Endpoint, router: RequestRouter, serve: bool = True
    ) -> asyncio.Server:
        """Bind a listener (and accept connections on it unless ``serve`` is False)."""
        host = ep.host or "0.0.0.0"
        sec = listener_security(
            self.config.raw, ep.listener, self.config.protocol_of(ep.listener),
            self._scram_lookup, self.token_credentials.lookup,
        )  # fmt: skip
        self.listener_securities.append(sec)
        try:
            server = await asyncio.get_running_loop().create_server(
                _protocol_factory(router, sec, self.config["socket.request.max.bytes"]),
                host,
                ep.port,
                reuse_address=True,
                start_serving=serve,
                ssl=sec.ssl_context,
            )
        except OSError as e:
            raise ListenError(
                f"Cannot listen on {ep.listener}://{ep.host}:{ep.port}: {e.strerror} "
                "(is another node running with the same listeners?)"
            ) from None
        router.metrics = self.metrics
        self.servers.append(server)
        log.info(
            "[node %d] %s %s://%s:%d",
            self.node_id,
            "Listening on" if serve else "Bound",
            ep.listener,
            host,
            ep.port,
        )
        return server

    def _broker_router(self) -> RequestRouter:
        assert self.broker is not None
        assert self.groups is not None
        assert self.txn is not None
        assert self.markers is not None
        assert self.shares is not None
        offsets = GroupOffsets(self.groups)
        txn_offsets = TxnOffsets(self.groups, offsets)
        self.markers.on_offsets_marker = txn_offsets.on_marker
        h = BrokerHandlers(self.broker)
        registry = ApiRegistry(Listener.BROKER)
        registry.register("the broker", h.handlers())
        registry.register("the group coordinator", offsets.handlers())
        registry.register("the consumer group protocol", ConsumerGroupApis(self.groups).handlers())
        for owner, share_handlers in self.shares.registrations(offsets):
            registry.register(owner, share_handlers)
        registry.register("transactional offset commits", txn_offsets.handlers())
        registry.register("the transaction coordinator", self.txn.handlers())
        registry.register("the transaction admin APIs", TxnAdmin(self.broker, self.txn).handlers())
        registry.register("partition reassignment", ReassignmentApis(self.broker).handlers())
        tokens = DelegationTokenApis(self.broker, self.config["delegation.token.secret.key"])
        registry.register("the delegation token APIs", tokens.handlers())
        if self.config["transaction.partition.verification.enable"]:
            h.data.verify_txn = self.txn.verify
            txn_offsets.verify = self.txn.verify
        h.apis = registry.versions()
        handlers = authorized_handlers(registry.complete(), self.broker.authz)
        router = RequestRouter(self.node_id, h.apis, handlers, h.api_versions_body)
        broker = self.broker
        router.quotas = QuotaManager(lambda: broker.image, time.monotonic)
        return router

    async def _describe_cluster_controllers(self, header: Any, req: Any) -> Any:
        """DescribeCluster on the controller listener (KIP-919): the controllers."""
        core = self.mlog.core
        return build(
            response_class(ApiKey.DESCRIBE_CLUSTER, header.api_version),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "endpoint_type": 2,
                "cluster_id": self.cluster_id,
                "controller_id": core.leader_id,
                "brokers": [
                    {"broker_id": v.node_id, "host": v.host, "port": v.port, "rack": None}
                    for v in self.config.voters
                ],
            },
        )

    def _controller_router(self) -> RequestRouter:
        assert self.controller is not None

        service = self.controller

        def body(err: Any) -> dict[str, Any]:
            image = service.controller.committed
            return {
                "error_code": err,
                "throttle_time": 0,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in CONTROLLER_APIS.items()
                ],
                **features_body(image, self.mlog.core.kraft_version),
            }

        async def api_versions(header: Any, req: Any) -> Any:
            return build(
                response_class(ApiKey.API_VERSIONS, header.api_version), body(ErrorCode.none)
            )

        assert self.controller_apis is not None
        registry = ApiRegistry(Listener.CONTROLLER)
        own = {ApiKey.API_VERSIONS: api_versions,
               ApiKey.DESCRIBE_CLUSTER: self._describe_cluster_controllers}  # fmt: skip
        registry.register("the controller", own)
        raft = (ApiKey.FETCH, ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
                ApiKey.DESCRIBE_QUORUM, ApiKey.FETCH_SNAPSHOT)  # fmt: skip
        registry.register("the Raft transport", dict.fromkeys(raft, self.transport.handle))
        registry.register("the controller's APIs", self.controller_apis.handlers())
        registry.register(
            "the quorum's voter changes (KIP-853)",
            QuorumApis(self.mlog, self.cluster_id, self.transport).handlers(),
        )
        c = self.config
        mlog = self.mlog
        authz = Authz(
            lambda: service.controller.committed,
            Authorizer(frozenset(c["super.users"]), c["allow.everyone.if.no.acl.found"])
            if c["authorizer.class.name"]
            else None,
            ready=lambda: mlog.caught_up,
        )
        handlers = authorized_handlers(
            registry.complete(exempt=[ApiKey.ENVELOPE]), authz, controller=True
        )
        # forwarded requests are answered by these same handlers, authorized as the
        # client the envelope names
        envelope = envelope_handler(dict(handlers), lambda: service.is_active)
        registry.register("the forwarding of admin requests (KIP-590)", {ApiKey.ENVELOPE: envelope})
        handlers.update(authorized_handlers({ApiKey.ENVELOPE: envelope}, authz, controller=True))
        self.controller_handlers = handlers
        return RequestRouter(self.node_id, registry.versions(), handlers, body)

    # -- broker lifecycle ---------------------------------------------------------------

    async def _register_broker(self) -> None:
        """Register with the active controller (waiting for one to be elected), then
        heartbeat until unfenced: caught up with the metadata log."""
        assert self.broker is not None
        b = self.broker
        incarnation = uuid.uuid4()
        waited_since = time.monotonic()
        told = -1e9
        while True:
            try:
                err, epoch = await b.controller.register_broker(
                    b.node_id, incarnation, b.settings.endpoints, b.settings.rack,
                    b.partitions.previous_broker_epoch,
                    [d.dir_id for d in b.partitions.online_dirs],
                    self.config["inter.broker.protocol.version"],
                )  # fmt: skip
            except ControllerUnavailableError as e:
                log.warning(
                    "[node %d] Waiting for an active controller to register with: %s",
                    self.node_id,
                    e,
                )
                continue
            if err.code == ErrorCode.duplicate_broker_registration:
                # our previous incarnation's session has not expired yet, or the
                # controller is fencing it first: retriable, for as long as it takes
                if time.monotonic() - told >= 30:
                    told = time.monotonic()
                    log.warning(
                        "[node %d] Broker id %d is still registered by a previous process "
                        "(%s); retrying until it is fenced (waiting %.0f s so far)",
                        self.node_id,
                        b.node_id,
                        err.message or "its session has not expired",
                        told - waited_since,
                    )
                await asyncio.sleep(1.0)
                continue
            if err.code == ErrorCode.cluster_authorization_failed:
                # as Kafka's BrokerLifecycleManager: retried (the controllers' ACLs may
                # not be loaded yet, or an operator may grant it), said once in 30 s
                if time.monotonic() - told >= 30:
                    told = time.monotonic()
                    log.error(
                        "[node %d] The controllers refuse this broker's registration: "
                        "CLUSTER_AUTHORIZATION_FAILED (its principal on the controller "
                        "listener needs CLUSTER_ACTION on the cluster: list it in "
                        "super.users); retrying",
                        self.node_id,
                    )
                await asyncio.sleep(1.0)
                continue
            if err.code == ErrorCode.inconsistent_cluster_id:
                raise RegistrationRefused(
                    f"broker registration refused: INCONSISTENT_CLUSTER_ID: the controllers "
                    f"belong to another cluster than this broker's {self.cluster_id} (the "
                    f"cluster.id in meta.properties of {b.settings.log_dir}); format its "
                    "directories with the cluster's id (keeperless storage info -c on a "
                    "controller shows it)"
                )
            if err.code != ErrorCode.none:
                raise RegistrationRefused(registration_refused(err))
            break
        b.broker_epoch = epoch
        log.info("[node %d] Registered broker with epoch %d", b.node_id, epoch)
        b.catch_up_to(epoch)  # its partitions appear once it has replayed its registration
        deadline = time.monotonic() + 30
        while b.fenced and time.monotonic() < deadline:
            await b.wait_for(lambda img: img.offset >= epoch, 1.0)
            await self._heartbeat()

    async def _heartbeat(self) -> None:
        assert self.broker is not None
        b = self.broker
        sent = time.monotonic()
        b.beat_sent(sent)
        try:
            err, fenced, _ = await b.controller.broker_heartbeat(
                b.node_id, b.broker_epoch, False, b.image.offset,
                offline_dirs=[d.dir_id for d in b.partitions.offline_dirs],
            )  # fmt: skip
        except ControllerUnavailableError as e:
            log.warning("[node %d] Heartbeat failed: %s", self.node_id, e)
            return
        if err.code == ErrorCode.stale_broker_epoch and time.monotonic() - self._stale_told >= 60:
            # nothing this process can do: say it, rather than stay fenced in silence
            self._stale_told = time.monotonic()
            log.error("[node %d] The controller refuses this broker's heartbeats: its "
                      "registration (epoch %d) was replaced or removed; it stays fenced until "
                      "restarted", self.node_id, b.broker_epoch)  # fmt: skip
        if fenced != b.fenced:
            log.info("[node %d] Broker is now %s", b.node_id, "fenced" if fenced else "unfenced")
        b.fenced = fenced
        b.beat_answered(sent, err.code == ErrorCode.none and not fenced)

    async def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown: heartbeats asking to shut down until the controller
        answers that we may (our leaderships have moved and the other brokers know it);
        it fences us then, which also ends our session so that a restart registers at
        once."""
        assert self.broker is not None
        b = self.broker
        log.info(
            "[node %d] Controlled shutdown: asking the controller to move this broker's "
            "leaderships",
            b.node_id,
        )
        while True:
            _err, _fenced, done = await b.controller.broker_heartbeat(
                b.node_id, b.broker_epoch, False, b.image.offset, True,
                [d.dir_id for d in b.partitions.offline_dirs],
            )  # fmt: skip
            if done:
                log.info("[node %d] Controlled shutdown complete", b.node_id)
                return
            await asyncio.sleep(CONTROLLED_SHUTDOWN_POLL_S)

    async def _heartbeat_loop(self) -> None:
        """A heartbeat that fails in an unforeseen way is logged (once a minute) and tried
        again: a loop that ended would leave the broker fenced for good, silently. A log
        directory going offline is told at once."""
        interval = self.config["broker.heartbeat.interval.ms"] / 1000
        told = -1e9
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval)
            self._heartbeat_now.clear()
            try:
                await self._heartbeat()
            except Exception:
                if time.monotonic() - told >= 60:
                    told = time.monotonic()
                    log.exception("[node %d] Heartbeat failed; trying again", self.node_id)

    def _checkpoint_high_watermarks(self) -> None:
        assert self.broker is not None
        try:
            self.broker.partitions.checkpoint_high_watermarks()
        except OSError as e:  # a failed disk is handled where the logs are written
            log.warning("[node %d] Could not save the high watermarks: %s", self.node_id, e)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        b = self.broker
        if b is not None and b.broker_epoch >= 0:
            try:
                await asyncio.wait_for(self._controlled_shutdown(), CONTROLLED_SHUTDOWN_S)
            except (ControllerUnavailableError, OSError, TimeoutError) as e:
                # the last nodes of a cluster stop this way: say why it took this long
                log.warning(
                    "[node %d] Stopping without a controlled shutdown: %s; the leaders of "
                    "its partitions move when its session expires",
                    self.node_id,
                    str(e) or f"no answer within {CONTROLLED_SHUTDOWN_S:.0f} s",
                )
        stopped = list(self._tasks)
        if self.replicas is not None:
            stopped += self.replicas.stop()
        if self.cleaner is not None:
            self.cleaner.close()
        if self.txn is not None:
            self.txn.stop()
        # cancelled tasks end before the loop closes ("Task was destroyed but it is pending");
        # one that lost its cancellation is cancelled again, and never holds the stop
        left = await stop_tasks(stopped)
        if left:
            log.warning(
                "[node %d] Stopping with %d task(s) still running: %s",
                self.node_id,
                len(left),
                ", ".join(t.get_name() for t in left),
            )
        if self.mlog.core.is_leader and len(self.mlog.core.voters) > 1:
            # hand over: the voters elect a successor without waiting for a timeout
            self.mlog.resign()
            await asyncio.sleep(0.05)
        for s in self.servers:
            s.close()
        self.transport.close()
        self.remote.close()
        if self.broker is not None:
            self.broker.close()
        self.mlog.close()
        log.info("[node %d] Stopped", self.node_id)

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        starting = loop.create_task(self.start())
        stopping = loop.create_task(stop.wait())
        done, _ = await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting in done:
            starting.result()
            await stopping
        else:
            starting.cancel()
        log.info("[node %d] Shutting down", self.node_id)
        await self.stop()


class RegistrationRefused(RuntimeError):
    """The controllers refuse this broker for good (another cluster, an unsupported
    metadata.version): it stops with one line saying why."""


def _protocol_factory(
    router: RequestRouter, sec: ListenerSecurity, max_request_bytes: int
) -> Callable[[], KafkaProtocol]:
    return lambda: KafkaProtocol(router, sec, max_request_bytes)


def run_node(config: NodeConfig, cluster_id: str) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # traces for the fault harness: KEEPERLESS_TRACE=acks,...
    traces = set(os.environ.get("KEEPERLESS_TRACE", "").split(","))
    logging.getLogger("keeperless.trace").setLevel(logging.WARNING)
    for name in traces - {""}:
        logging.getLogger(f"keeperless.trace.{name}").setLevel(logging.INFO)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    node = Node(config, cluster_id)
    try:
        asyncio.run(node.run_forever())
    except (ListenError, RegistrationRefused) as e:
        log.error("[node %d] %s", config.node_id, e)
        return 1
    return 0
