"""Assemble and run a node from its configuration: metadata log, controller, broker,
listeners, and their lifecycle."""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from keeperless.broker.broker import Broker, BrokerSettings
from keeperless.broker.group_coordinator import GroupCoordinator
from keeperless.broker.group_offsets import GroupOffsets
from keeperless.broker.handlers import BrokerHandlers
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.protocol.apis import CONTROLLER_APIS
from keeperless.runtime.connection import KafkaProtocol, RequestRouter
from keeperless.runtime.metadata_log import MetadataLog
from keeperless.server.config import NodeConfig
from keeperless.storage.log import LogConfig

__all__ = ["Node", "run_node"]

log = logging.getLogger(__name__)
T = TypeVar("T")
HEARTBEAT_INTERVAL_S = 2.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class ListenError(RuntimeError):
    """A listener's address cannot be bound."""


class LocalController:
    """The active controller in this process: one writer, operations pipelined through
    the metadata log; each call returns after its records commit and are applied by
    the local broker."""

    def __init__(self, controller: QuorumController, mlog: MetadataLog) -> None:
        self.controller = controller
        self.mlog = mlog

    async def call(self, op: Callable[[QuorumController], Result[T]]) -> T:
        result = op(self.controller)
        if result.records:
            # The controller applies its own records as it appends them, so that the next
            # operation already sees them (pipelining); committed copies are then skipped.
            before = self.controller.image
            expected = self.mlog.core.log_end_offset + len(result.records) - 1
            self.controller.replay(result.records, expected)
            try:
                last = self.mlog.propose(result.records)
            except Exception:
                self.controller.image = before
                raise
            assert last == expected, (last, expected)
            await self.mlog.wait_committed(last)
        return result.response


class Node:
    def __init__(self, config: NodeConfig, cluster_id: str) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        if not config.is_controller:
            raise ValueError(
                "broker-only nodes need the multi-voter controller quorum, which is not built "
                "yet: run a combined node (process.roles=broker,controller)"
            )
        voters = tuple(v.node_id for v in config.voters)
        if voters != (self.node_id,):
            raise ValueError(
                "controller.quorum.voters must name only this node for now (a one-voter "
                f"quorum); got {','.join(map(str, voters))}"
            )
        self.mlog = MetadataLog(self.node_id, voters, config.metadata_log_dir)
        self.controller = QuorumController(
            self.node_id,
            random.Random(),
            {
                "num.partitions": config["num.partitions"],
                "default.replication.factor": config["default.replication.factor"],
            },
        )
        self.local = LocalController(self.controller, self.mlog)
        self.broker: Broker | None = None
        self.groups: GroupCoordinator
        self.servers: list[asyncio.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()

    def _broker_settings(self) -> BrokerSettings:
        c = self.config
        static = {
            "num.partitions": str(c["num.partitions"]),
            "default.replication.factor": str(c["default.replication.factor"]),
            "min.insync.replicas": str(c["min.insync.replicas"]),
            "auto.create.topics.enable": str(c["auto.create.topics.enable"]).lower(),
            "log.segment.bytes": str(c["log.segment.bytes"]),
            "log.retention.ms": str(c.retention_ms),
            "log.retention.bytes": str(c["log.retention.bytes"]),
        }
        return BrokerSettings(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            log_dir=c.log_dirs[0],
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
        )

    async def start(self) -> None:
        t0 = time.monotonic()
        ctl = self.controller
        self.mlog.listeners.append(ctl.replay_committed)
        self.mlog.snapshot_listeners.append(
            lambda recs, sid: ctl.load_snapshot(recs, sid.end_offset)
        )
        if self.config.is_broker:
            self.broker = Broker(self._broker_settings(), self.local)
            self.groups = GroupCoordinator(
                self.broker, self.config["group.initial.rebalance.delay.ms"]
            )
            broker = self.broker
            self.mlog.listeners.append(broker.on_committed)
            self.mlog.snapshot_listeners.append(
                lambda recs, sid: broker.load_snapshot(recs, sid.end_offset)
            )
        self.mlog.start()
        if self.mlog.was_empty:
            boot = self.mlog.bootstrap_records()
            if boot:
                await self.local.call(lambda c: Result(boot, None))
        log.info(
            "[node %d] Metadata log loaded: log end offset %d, high watermark %d",
            self.node_id,
            self.mlog.raft_log.end_offset,
            self.mlog.core.high_watermark,
        )
        loop = asyncio.get_running_loop()
        ctl_names = set(self.config.controller_listener_names)
        for ep in self.config.listeners:
            if ep.listener in ctl_names:
                router = self._controller_router()
            else:
                if self.broker is None:
                    continue
                router = self._broker_router()
            try:
                server = await loop.create_server(
                    _protocol_factory(router), ep.host or "0.0.0.0", ep.port, reuse_address=True
                )
            except OSError as e:
                raise ListenError(
                    f"Cannot listen on {ep.listener}://{ep.host}:{ep.port}: {e.strerror} "
                    "(is another node running with the same listeners?)"
                ) from None
            self.servers.append(server)
            log.info(
                "[node %d] Listening on %s://%s:%d",
                self.node_id,
                ep.listener,
                ep.host or "0.0.0.0",
                ep.port,
            )
        if self.broker is not None:
            await self._register_broker()
            self._tasks.append(loop.create_task(self._heartbeat_loop()))
            self._tasks.append(loop.create_task(self._retention_loop()))
            self._tasks.append(loop.create_task(self._group_session_loop()))
        log.info(
            "[node %d] Started in %.0f ms (cluster %s)",
            self.node_id,
            (time.monotonic() - t0) * 1000,
            self.cluster_id,
        )

    def _broker_router(self) -> RequestRouter:
        assert self.broker is not None
        h = BrokerHandlers(self.broker, GroupOffsets(self.groups).handlers())
        return RequestRouter(self.node_id, h.apis, h.handlers, h.api_versions_body)

    def _controller_router(self) -> RequestRouter:
        h = BrokerHandlers(self.broker) if self.broker else None

        def body(err: Any) -> dict[str, Any]:
            return {
                "error_code": err,
                "throttle_time": 0,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in CONTROLLER_APIS.items()
                ],
            }

        async def api_versions(header: Any, req: Any) -> Any:
            from keeperless.protocol.build import build
            from keeperless.protocol.framing import response_class

            return build(response_class(18, header.api_version), body(0))

        del h
        return RequestRouter(self.node_id, dict(CONTROLLER_APIS), {18: api_versions}, body)

    async def _register_broker(self) -> None:
        assert self.broker is not None
        b = self.broker
        incarnation = uuid.uuid4()
        next_offset = self.mlog.core.log_end_offset
        err, epoch = await self.local.call(
            lambda c: c.register_broker(
                b.node_id,
                incarnation,
                b.settings.endpoints,
                b.settings.rack,
                next_offset,
                _now_ms(),
            )
        )
        if err.message:
            raise RuntimeError(f"broker registration failed: {err.message}")
        b.broker_epoch = epoch
        log.info("[node %d] Registered broker with epoch %d", b.node_id, epoch)
        await self._heartbeat()

    async def _heartbeat(self) -> None:
        assert self.broker is not None
        b = self.broker
        caught_up = b.image.offset >= self.mlog.committed_offset - 1
        _err, fenced = await self.local.call(
            lambda c: c.broker_heartbeat(b.node_id, b.broker_epoch, False, caught_up, _now_ms())
        )
        if fenced != b.fenced:
            log.info("[node %d] Broker is now %s", b.node_id, "fenced" if fenced else "unfenced")
        b.fenced = fenced

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            await self._heartbeat()

    async def _retention_loop(self) -> None:
        assert self.broker is not None
        interval = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            self.broker.enforce_retention()

    async def _group_session_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self.groups.expire_sessions()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for s in self.servers:
            s.close()
        if self.broker is not None:
            self.broker.close()
        self.mlog.close()
        log.info("[node %d] Stopped", self.node_id)
        self._stopped.set()

    async def run_forever(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("[node %d] Shutting down", self.node_id)
        await self.stop()


def _protocol_factory(router: RequestRouter) -> Callable[[], KafkaProtocol]:
    return lambda: KafkaProtocol(router)


def run_node(config: NodeConfig, cluster_id: str) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    node = Node(config, cluster_id)
    try:
        asyncio.run(node.run_forever())
    except ListenError as e:
        log.error("[node %d] %s", config.node_id, e)
        return 1
    return 0
