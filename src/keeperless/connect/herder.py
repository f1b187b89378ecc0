"""The distributed herder (Kafka's ``DistributedHerder``): one worker of a Connect group.

It keeps the three internal topics replayed, is a member of the group, runs the
connectors and tasks it is assigned, and serves the REST API's operations. Only the
group's leader writes connector configurations (other workers forward those requests to
the leader's URL, as Kafka does); a worker writes the statuses of what it runs. Every
change of the connectors or of their task configurations makes the workers rejoin, and
the leader assigns again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keeperless.connect import state as st
from keeperless.connect.api import Connector, ConnectorContext, SinkTask, SourceTask
from keeperless.connect.config import WorkerConfig
from keeperless.connect.data import Converter, converter
from keeperless.connect.group import Membership, WorkerGroup
from keeperless.connect.plugins import PluginError, connector_class
from keeperless.connect.protocol import Assignment, WorkerState, assign
from keeperless.connect.tasks import TaskRunner, TaskSettings
from keeperless.connect.topic_log import TopicLog, ensure_topic
from keeperless.net.client import NetworkClient
from keeperless.tools.client import parse_servers

__all__ = ["Herder", "RestError"]

log = logging.getLogger(__name__)


class RestError(Exception):
    """An answer other than success: Kafka Connect's ``{"error_code", "message"}``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NotLeader(Exception):
    """The request must be forwarded to the leader at ``url``."""

    def __init__(self, url: str | None) -> None:
        super().__init__(url)
        self.url = url


_SETTLE_S = 60.0
_SYNC_S = 30.0
REBALANCING = "Cannot complete request because of a conflicting operation (e.g. worker rebalance)"


@dataclass(slots=True)
class _RunningConnector:
    instance: Connector
    config: dict[str, str]
    state: str = "RUNNING"


class Herder:
    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.url = ""
        self.worker_id = ""
        self.configs = st.ConfigState()
        self.statuses = st.StatusState()
        self.offsets = st.OffsetState()
        self.running: dict[str, _RunningConnector] = {}
        self.tasks: dict[tuple[str, int], TaskRunner] = {}
        self.membership: Membership | None = None
        self.plan: dict[str, Assignment] = {}
        self.loaded = False
        self.kafka_cluster_id = ""
        self._group: WorkerGroup | None = None
        self._group_task: asyncio.Task[None] | None = None
        self._client = NetworkClient(f"connect-{cfg.group_id}")
        self._logs: list[TopicLog] = []
        self._settled = asyncio.Event()
        self._lock = asyncio.Lock()  # starting/stopping work is one thing at a time

    # --- start and stop ---------------------------------------------------------------

    async def start(self, url: str) -> None:
        self.url = url
        self.worker_id = url.split("://", 1)[-1].rstrip("/")
        conf = self.cfg.client_config()
        c = self.cfg
        for setting, parts_key, rf_key, purpose in (
            (
                "config.storage.topic",
                None,
                "config.storage.replication.factor",
                "connector configurations",
            ),
            (
                "offset.storage.topic",
                "offset.storage.partitions",
                "offset.storage.replication.factor",
                "source connector offsets",
            ),
            (
                "status.storage.topic",
                "status.storage.partitions",
                "status.storage.replication.factor",
                "connector and task statuses",
            ),
        ):
            parts = c[parts_key] if parts_key else 1
            await asyncio.to_thread(
                ensure_topic, conf, c[setting], parts, c[rf_key], setting, purpose
            )
        client_id = f"connect-{c.group_id}-{self.worker_id}"
        self.config_log = TopicLog(conf, c["config.storage.topic"], self._on_config, client_id)
        self.status_log = TopicLog(conf, c["status.storage.topic"], self._on_status, client_id)
        self.offset_log = TopicLog(conf, c["offset.storage.topic"], self._on_offset, client_id)
        self._logs = [self.config_log, self.status_log, self.offset_log]
        for tl in self._logs:
            await asyncio.to_thread(tl.start)
        await asyncio.gather(*(tl.read_to_end() for tl in self._logs))
        self.loaded = True
        self.kafka_cluster_id = await asyncio.to_thread(self._cluster_id, conf)
        self._group = WorkerGroup(
            self._client,
            parse_servers(c["bootstrap.servers"], "bootstrap.servers"),
            c.group_id,
            session_ms=c["session.timeout.ms"],
            rebalance_ms=c["rebalance.timeout.ms"],
            heartbeat_ms=c["heartbeat.interval.ms"],
        )
        self._group_task = asyncio.get_running_loop().create_task(
            self._group.run(self._state, self._revoke, self._assigned, self._leader_assign)
        )
        log.info("Connect worker %s started in group %s", self.worker_id, c.group_id)

    @staticmethod
    def _cluster_id(conf: dict[str, Any]) -> str:
        from confluent_kafka.admin import AdminClient

        md = AdminClient(dict(conf)).list_topics(timeout=30)
        return str(getattr(md, "cluster_id", "") or "")

    async def stop(self) -> None:
        if self._group_task is not None:
            self._group_task.cancel()
            await asyncio.gather(self._group_task, return_exceptions=True)
        await self._revoke()
        if self._group is not None:
            await self._group.leave()
        for tl in self._logs:
            await asyncio.to_thread(tl.stop)
        self._client.close()

    # --- replay of the internal topics ------------------------------------------------

    def _on_config(
        self, _partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> None:
        if key is None:
            return
        k = key.decode()
        before = (set(self.configs.connectors), self.configs.all_tasks())
        name = self.configs.apply(offset, k, value)
        if not self.loaded or name is None:
            return
        after = (set(self.configs.connectors), self.configs.all_tasks())
        if before != after and self._group is not None:
            self._group.request_rejoin()
        mine = name in self.running or any(c == name for c, _ in self.tasks)
        if k.startswith("target-state-") and mine:
            asyncio.get_running_loop().create_task(self._apply_target(name))
        elif k.startswith("connector-") and value is not None and name in self.running:
            asyncio.get_running_loop().create_task(self._restart_connector(name))
        elif k.startswith("restart-connector-"):
            asyncio.get_running_loop().create_task(self._restart_request(name))

    def _on_status(self, _p: int, _o: int, key: bytes | None, value: bytes | None) -> None:
        if key is not None:
            self.statuses.apply(key.decode(), value)

    def _on_offset(self, _p: int, _o: int, key: bytes | None, value: bytes | None) -> None:
        self.offsets.apply(key, value)

    # --- the group --------------------------------------------------------------------

    def _state(self) -> WorkerState:
        return WorkerState(self.url, self.configs.offset)

    def _leader_assign(self, me: str, members: dict[str, WorkerState]) -> dict[str, Assignment]:
        plan = assign(
            me,
            members,
            self.configs.offset,
            sorted(self.configs.connectors),
            self.configs.all_tasks(),
        )
        self.plan = plan
        return plan

    async def _revoke(self) -> None:
        async with self._lock:
            self.membership = None
            self._settled.clear()
            for key in list(self.tasks):
                await self._stop_task(key, "UNASSIGNED")
            for name in list(self.running):
                await self._stop_connector(name, "UNASSIGNED")

    async def _assigned(self, m: Membership) -> None:
        if m.assignment.config_offset > self.configs.offset:
            # Kafka's worker.sync.timeout.ms: a worker that cannot catch up leaves the
            # round (the group loop rejoins) rather than wait for ever
            await asyncio.wait_for(self.config_log.read_to_end(), _SYNC_S)
        self.membership = m
        self._settled.set()
        if not m.leader:
            self.plan = {}
        log.info(
            "Connect worker %s: generation %d, %s, assigned connectors %s and tasks %s",
            self.worker_id,
            m.generation,
            "leader" if m.leader else "member",
            list(m.assignment.connectors),
            [f"{c}-{t}" for c, t in m.assignment.tasks],
        )
        async with self._lock:
            for name in m.assignment.connectors:
                await self._start_connector(name)
            if m.assignment.tasks:
                await asyncio.wait_for(self.offset_log.read_to_end(), _SYNC_S)
            for name, t in m.assignment.tasks:
                self._start_task(name, t)

    @property
    def generation(self) -> int:
        return self.membership.generation if self.membership else -1

    # --- connectors -------------------------------------------------------------------

    def _write_status(self, name: str, task: int | None, state: str, trace: str | None) -> None:
        key, value = st.status_record("", name, task, state, trace, self.worker_id, self.generation)
        self.status_log.send(key, value)
        self.statuses.apply(key, value)  # what this worker says is current at once

    def _reporter(self, name: str, task: int | None) -> Any:
        loop = asyncio.get_running_loop()

        def report(state: str, trace: str | None) -> None:
            loop.call_soon_threadsafe(self._write_status, name, task, state, trace)

        return report

    async def _start_connector(self, name: str) -> None:
        config = self.configs.connectors.get(name)
        if config is None or name in self.running:
            return
        target = self.configs.target(name)
        try:
            cls = connector_class(config.get("connector.class", ""))
            instance = cls()
            loop = asyncio.get_running_loop()

            def reconfigure() -> None:
                loop.call_soon_threadsafe(lambda: loop.create_task(self._reconfigure(name)))

            def fail(e: BaseException) -> None:
                loop.call_soon_threadsafe(self._write_status, name, None, "FAILED", repr(e))

            ctx = ConnectorContext(reconfigure, fail)
            if target != "STOPPED":
                await asyncio.to_thread(instance.start, config, ctx)
        except Exception as e:
            import traceback

            self._write_status(name, None, "FAILED", "".join(traceback.format_exception(e)))
            log.warning("connector %s failed to start: %s", name, e)
            return
        state = {"STARTED": "RUNNING", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}[target]
        self.running[name] = _RunningConnector(instance, dict(config), state)
        self._write_status(name, None, state, None)
        if target == "STOPPED":
            await self._submit_tasks(name, [])
        else:
            await self._reconfigure(name)

    async def _reconfigure(self, name: str) -> None:
        """The connector's task configurations, written if they changed (Kafka's
        ``reconfigureConnectorTasksWithRetry``)."""
        rc = self.running.get(name)
        if rc is None or rc.state == "STOPPED":
            return
        max_tasks = int(rc.config.get("tasks.max", "1"))
        try:
            configs = await asyncio.to_thread(rc.instance.task_configs, max_tasks)
        except Exception as e:
            self._write_status(name, None, "FAILED", repr(e))
            return
        full = [dict(c, **{"task.class": type(rc.instance).task_class.__name__}) for c in configs]
        await self._submit_tasks(name, full[:max_tasks])

    async def _submit_tasks(self, name: str, configs: list[dict[str, str]]) -> None:
        if self.configs.tasks.get(name, []) == configs:
            return
        try:
            await self.put_task_configs(name, configs)
        except NotLeader as e:
            await self._forward_tasks(e.url, name, configs)
        except RestError as e:
            log.warning("task configurations of %s not written: %s", name, e.message)

    async def _forward_tasks(
        self, url: str | None, name: str, configs: list[dict[str, str]]
    ) -> None:
        if url is None:
            return
        import aiohttp

        try:
            async with (
                aiohttp.ClientSession() as s,
                s.put(
                    f"{url.rstrip('/')}/connectors/{name}/tasks?forward=false",
                    json=configs,
                    timeout=aiohttp.ClientTimeout(total=30),
                ) as resp,
            ):
                if resp.status >= 300:
                    log.warning(
                        "leader refused task configurations of %s: %s", name, await resp.text()
                    )
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("cannot reach the leader at %s: %s", url, e)

    async def _stop_connector(self, name: str, status: str | None) -> None:
        rc = self.running.pop(name, None)
        if rc is None:
            return
        try:
            await asyncio.to_thread(rc.instance.stop)
        except Exception:
            log.exception("connector %s: stop() raised", name)
        if status is not None and name in self.configs.connectors:
            self._write_status(name, None, status, None)

    async def _apply_target(self, name: str) -> None:
        async with self._lock:
            rc = self.running.get(name)
            target = self.configs.target(name)
            if rc is None:
                pass
            elif (target == "STOPPED") != (rc.state == "STOPPED"):
                await self._stop_connector(name, None)
                await self._start_connector(name)
            else:
                rc.state = "PAUSED" if target == "PAUSED" else "RUNNING"
                self._write_status(name, None, rc.state, None)
            for (c, _t), runner in self.tasks.items():
                if c == name:
                    runner.pause() if target == "PAUSED" else runner.resume()

    async def _restart_connector(self, name: str) -> None:
        async with self._lock:
            await self._stop_connector(name, None)
            self._write_status(name, None, "RESTARTING", None)
            await self._start_connector(name)

    async def _restart_request(self, name: str) -> None:
        include_tasks, only_failed = self.configs.restarts.get(name, (False, False))
        async with self._lock:
            failed = self.statuses.connectors.get(name, {}).get("state") == "FAILED"
            owned = self.membership is not None and name in self.membership.assignment.connectors
            if owned and (failed or not only_failed):
                await self._stop_connector(name, None)
                self._write_status(name, None, "RESTARTING", None)
                await self._start_connector(name)
            if not include_tasks:
                return
            for key, runner in list(self.tasks.items()):
                if key[0] != name:
                    continue
                if only_failed and runner.failed is None:
                    continue
                await self._stop_task(key, None)
                self._write_status(name, key[1], "RESTARTING", None)
                self._start_task(*key)

    # --- tasks ------------------------------------------------------------------------

    def _converter(self, config: Mapping[str, str], which: str) -> Converter:
        if which in config:
            prefix = f"{which}."
            sub = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
            return converter(config[which], sub, setting=which)
        return converter(self.cfg[which], self.cfg.converter_config(which), setting=which)

    def _start_task(self, name: str, index: int) -> None:
        config = self.configs.connectors.get(name)
        tasks = self.configs.tasks.get(name, [])
        if config is None or index >= len(tasks) or (name, index) in self.tasks:
            return
        report = self._reporter(name, index)
        try:
            cls = connector_class(config["connector.class"])
            task = cls.task_class()
            settings = TaskSettings(
                name,
                index,
                tasks[index],
                dict(config),
                self.cfg.client_config(),
                self.cfg.prefixed("producer."),
                self.cfg.prefixed("consumer."),
                self._converter(config, "key.converter"),
                self._converter(config, "value.converter"),
                self.cfg["offset.storage.topic"],
                self.cfg["offset.flush.interval.ms"] / 1000,
                self.cfg["offset.flush.timeout.ms"] / 1000,
                f"{self.cfg.group_id}-{name}-{index}"
                if self.cfg.exactly_once and isinstance(task, SourceTask)
                else None,
                lambda parts: {
                    json.dumps(p, sort_keys=True): self.offsets.get(name, p) for p in parts
                },
                self._topic_seen(name, index),
            )
        except (PluginError, ValueError) as e:
            self._write_status(name, index, "FAILED", str(e))
            return
        assert isinstance(task, SourceTask | SinkTask)
        runner = TaskRunner(task, settings, report)
        if self.configs.target(name) == "PAUSED":
            runner.paused.set()
        self.tasks[(name, index)] = runner
        runner.start()

    def _topic_seen(self, name: str, index: int) -> Any:
        loop = asyncio.get_running_loop()

        def seen(topic: str) -> None:
            def write() -> None:
                if topic in self.statuses.topics.get(name, {}):
                    return
                key, value = st.topic_record(topic, name, index, int(time.time() * 1000))
                self.status_log.send(key, value)
                self.statuses.apply(key, value)

            if self.cfg["topic.tracking.enable"]:
                loop.call_soon_threadsafe(write)

        return seen

    async def _stop_task(self, key: tuple[str, int], status: str | None) -> None:
        runner = self.tasks.pop(key, None)
        if runner is None:
            return
        runner.stop()
        await asyncio.to_thread(
            runner.join, self.cfg["task.shutdown.graceful.timeout.ms"] / 1000 + 30
        )
        if status is not None and key[0] in self.configs.connectors and runner.failed is None:
            self._write_status(key[0], key[1], status, None)

    # --- operations of the REST API ---------------------------------------------------

    async def settle(self) -> Membership:
        """Wait for the group to settle, as Kafka's herder queues a request that arrives
        during a rebalance (409 if it does not within a minute)."""
        try:
            async with asyncio.timeout(_SETTLE_S):
                while self.membership is None:
                    await self._settled.wait()
        except TimeoutError:
            raise RestError(409, REBALANCING) from None
        return self.membership

    def runs_task(self, name: str, task: int) -> bool:
        m = self.membership
        return m is not None and (name, task) in m.assignment.tasks

    async def _leader(self) -> None:
        """Raise unless this worker is the leader of the settled group."""
        m = await self.settle()
        if not m.leader:
            raise NotLeader(m.assignment.leader_url)

    async def _write(self, records: list[tuple[str, bytes | None]]) -> None:
        try:
            async with asyncio.timeout(_SYNC_S):  # never hold the group loop for ever
                for key, value in records:
                    await self.config_log.send(key, value)
                await self.config_log.read_to_end()
        except Exception as e:
            raise RestError(
                500,
                "Failed to write to config topic; this may be due to a transient error and the "
                f"request can be safely retried ({e})",
            ) from None

    def kind_of(self, name: str) -> str:
        config = self.configs.connectors.get(name, {})
        try:
            return connector_class(config.get("connector.class", "")).kind
        except PluginError:
            return "unknown"

    def require(self, name: str) -> dict[str, str]:
        config = self.configs.connectors.get(name)
        if config is None:
            raise RestError(404, f"Connector {name} not found")
        return config

    async def put_connector(
        self,
        name: str,
        config: dict[str, str],
        *,
        allow_replace: bool,
        initial_state: str = "RUNNING",
    ) -> bool:
        await self._leader()
        exists = name in self.configs.connectors
        if exists and not allow_replace:
            raise RestError(409, f"Connector {name} already exists")
        records = []
        if not exists:
            state = {"RUNNING": "STARTED", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}[initial_state]
            records.append(st.target_state_record(name, state))
        records.append(st.connector_config_record(name, config))
        await self._write(records)
        return not exists

    async def delete_connector(self, name: str) -> None:
        await self._leader()
        self.require(name)
        statuses = [st.status_record("", name, None, None, None, "", 0)]
        statuses += [
            st.status_record("", name, t, None, None, "", 0)
            for c, t in list(self.statuses.tasks)
            if c == name
        ]
        await self._write(
            [st.connector_config_record(name, None), st.target_state_record(name, None)]
        )
        for key, value in statuses:
            await self.status_log.send(key, value)
            self.statuses.apply(key, value)

    async def put_task_configs(self, name: str, configs: list[dict[str, str]]) -> None:
        await self._leader()
        self.require(name)
        if configs and self.configs.target(name) == "STOPPED":
            raise RestError(
                400, f"Cannot submit non-empty set of task configs for stopped connector {name}"
            )
        records: list[tuple[str, bytes | None]] = [
            st.task_config_record(name, i, c) for i, c in enumerate(configs)
        ]
        records.append(st.commit_record(name, len(configs)))
        await self._write(records)

    async def set_target(self, name: str, state: str) -> None:
        await self._leader()
        self.require(name)
        records = [st.target_state_record(name, state)]
        if state == "STOPPED":  # Kafka: a stopped connector has no tasks
            records += [st.commit_record(name, 0)]
        await self._write(records)

    async def restart(self, name: str, include_tasks: bool, only_failed: bool) -> None:
        await self._leader()
        self.require(name)
        await self._write([st.restart_record(name, include_tasks, only_failed)])

    def owner_of_task(self, name: str, task: int) -> str | None:
        for member, a in self.plan.items():
            if (name, task) in a.tasks:
                return a.members.get(member)
        return None

    async def restart_task(self, name: str, task: int) -> bool:
        """Restart the task if this worker runs it (False: it does not); a rebalance
        under way is waited for."""
        self.require(name)
        while True:
            await self.settle()
            async with self._lock:
                if self.membership is None:
                    continue  # a rebalance began meanwhile
                if not self.runs_task(name, task):
                    return False
                await self._stop_task((name, task), None)
                self._write_status(name, task, "RESTARTING", None)
                self._start_task(name, task)
                return True

    async def reset_topics(self, name: str) -> None:
        self.require(name)
        if not self.cfg["topic.tracking.allow.reset"]:
            raise RestError(403, "Topic tracking reset is disabled.")
        for topic in list(self.statuses.topics.get(name, {})):
            key = f"status-topic-{topic}:connector-{name}"
            await self.status_log.send(key, None)
            self.statuses.apply(key, None)

    def status(self, name: str) -> dict[str, Any]:
        self.require(name)
        cs = self.statuses.connectors.get(name)
        if cs is None:
            raise RestError(404, f"No status found for connector {name}")
        tasks = []
        for (c, t), ts in sorted(self.statuses.tasks.items()):
            if c == name and t < len(self.configs.tasks.get(name, [])):
                tasks.append(_state_view(ts, task=t))
        return {
            "name": name,
            "connector": _state_view(cs),
            "tasks": tasks,
            "type": self.kind_of(name),
        }


def _state_view(s: Mapping[str, Any], task: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {} if task is None else {"id": task}
    out["state"] = s.get("state")
    out["worker_id"] = s.get("worker_id")
    if s.get("trace"):
        out["trace"] = s["trace"]
    return out
