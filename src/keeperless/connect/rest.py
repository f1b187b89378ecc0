"""The worker's REST API, as Kafka Connect's user guide lists it, on aiohttp.

Errors are Kafka Connect's JSON, ``{"error_code": <http status>, "message": ...}``.
Requests that change connector configurations are served by the group's leader; any
other worker forwards them there (with ``forward=false``, as Kafka's ``RestServer`` does)
and answers what the leader answered.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from keeperless.connect import offsets as offs
from keeperless.connect.herder import Herder, NotLeader, RestError
from keeperless.connect.plugins import PluginError, connector_class, invalid_message, plugins
from keeperless.connect.plugins import validate as validate_config

__all__ = ["make_app"]

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.0"
STALE = (
    "Cannot complete request momentarily due to stale configuration (typically caused by a "
    "concurrent config change)"
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(code: int, message: str) -> web.Response:
    return web.json_response({"error_code": code, "message": message}, status=code)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RestError as e:
        return _error(e.code, e.message)
    except web.HTTPException as e:
        if e.status >= 400:
            return _error(e.status, f"HTTP {e.status} {e.reason}")
        raise
    except PluginError as e:
        return _error(400, str(e))
    except Exception as e:  # an answer, never a dropped connection
        log.exception("%s %s failed", request.method, request.path)
        return _error(500, f"{type(e).__name__}: {e}")


async def _body(request: web.Request) -> Any:
    text = await request.text()
    if not text.strip():
        return None
    if request.content_type not in ("application/json", "application/octet-stream", ""):
        # as Kafka Connect's JAX-RS resources: a body must be JSON (curl -d without
        # -H "Content-Type: application/json" sends a form)
        raise RestError(415, "HTTP 415 Unsupported Media Type")
    try:
        return json.loads(text)
    except ValueError as e:
        raise RestError(400, f"Cannot deserialize the request body as JSON: {e}") from None


def _config_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise RestError(400, f"{what} must be a JSON object of string settings")
    out = {}
    for k, v in value.items():
        if v is not None and not isinstance(v, str | int | float | bool):
            raise RestError(400, f"{what}: the value of {k!r} must be a string")
        out[str(k)] = None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    return out  # type: ignore[return-value]


class Api:
    def __init__(self, herder: Herder) -> None:
        self.h = herder

    async def leader(
        self, request: web.Request, op: Callable[[], Awaitable[web.Response]]
    ) -> web.Response:
        try:
            return await op()
        except NotLeader as e:
            if request.query.get("forward") == "false" or not e.url:
                raise RestError(409, STALE) from None
            return await _forward(request, e.url)

    # --- root and plugins -------------------------------------------------------------

    async def root(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": KAFKA_VERSION,
                "commit": "keeperless",
                "kafka_cluster_id": self.h.kafka_cluster_id,
            }
        )

    async def plugins(self, request: web.Request) -> web.Response:
        return web.json_response(
            [
                {"class": c, "type": cls.kind, "version": cls.version}
                for c, cls in sorted(plugins().items())
            ]
        )

    async def validate(self, request: web.Request) -> web.Response:
        config = _config_map(await _body(request), "The configuration")
        plugin = request.match_info["plugin"]
        if "connector.class" not in config:
            config["connector.class"] = plugin
        try:
            cls = connector_class(plugin)
        except PluginError:
            raise RestError(404, f"Unknown plugin {plugin}.") from None
        if connector_class(config["connector.class"]) is not cls:
            raise RestError(
                400,
                "Included connector type "
                + config["connector.class"]
                + " does not match request type "
                + plugin,
            )
        return web.json_response(validate_config(config))

    # --- connectors -------------------------------------------------------------------

    def _info(self, name: str) -> dict[str, Any]:
        config = self.h.require(name)
        tasks = [
            {"connector": name, "task": i} for i in range(len(self.h.configs.tasks.get(name, [])))
        ]
        return {"name": name, "config": config, "tasks": tasks, "type": self.h.kind_of(name)}

    async def list(self, request: web.Request) -> web.Response:
        names = sorted(self.h.configs.connectors)
        expand = request.query.getall("expand", [])
        if not expand:
            return web.json_response(names)
        out: dict[str, Any] = {}
        for n in names:
            try:
                entry = {}
                if "status" in expand:
                    entry["status"] = self.h.status(n)
                if "info" in expand:
                    entry["info"] = self._info(n)
                out[n] = entry
            except RestError:
                continue
        return web.json_response(out)

    def _checked(self, name: str, config: dict[str, str]) -> dict[str, str]:
        included = config.get("name")
        if included is not None and included != name:
            raise RestError(
                400,
                f"Connector name configuration ({included}) doesn't match connector name in the URL ({name})",  # noqa: E501
            )
        config["name"] = name
        if not name.strip():
            raise RestError(400, "Connector name is null or empty")
        if not config.get("connector.class"):
            raise RestError(400, f"Connector config {_java_map(config)} contains no connector type")
        infos = validate_config(config)
        if infos["error_count"]:
            raise RestError(400, invalid_message(infos))
        return config

    async def create(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body, dict):
            raise RestError(400, "The request body must be a JSON object with 'name' and 'config'")
        name = str(body.get("name") or "").strip()
        config = _config_map(body.get("config") if body.get("config") is not None else {}, "config")
        state = str(body.get("initial_state") or "RUNNING").upper()
        if state not in ("RUNNING", "PAUSED", "STOPPED"):
            raise RestError(
                400,
                f"Invalid initial_state {body.get('initial_state')!r}: expected RUNNING, PAUSED or STOPPED",  # noqa: E501
            )
        config = self._checked(name, {k: v for k, v in config.items() if v is not None})

        async def op() -> web.Response:
            await self.h.put_connector(name, config, allow_replace=False, initial_state=state)
            return web.json_response(
                self._info(name), status=201, headers={"Location": f"/connectors/{name}"}
            )

        return await self.leader(request, op)

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self._info(request.match_info["name"]))

    async def get_config(self, request: web.Request) -> web.Response:
        return web.json_response(self.h.require(request.match_info["name"]))

    async def put_config(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        config = _config_map(await _body(request), "The connector configuration")
        config = self._checked(name, {k: v for k, v in config.items() if v is not None})

        async def op() -> web.Response:
            created = await self.h.put_connector(name, config, allow_replace=True)
            status = 201 if created else 200
            headers = {"Location": f"/connectors/{name}"} if created else {}
            return web.json_response(self._info(name), status=status, headers=headers)

        return await self.leader(request, op)

    async def patch_config(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        patch = _config_map(await _body(request), "The configuration patch")
        merged = dict(self.h.require(name))
        for k, v in patch.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        config = self._checked(name, merged)

        async def op() -> web.Response:
            await self.h.put_connector(name, config, allow_replace=True)
            return web.json_response(self._info(name))

        return await self.leader(request, op)

    async def delete(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]

        async def op() -> web.Response:
            await self.h.delete_connector(name)
            return web.Response(status=204)

        return await self.leader(request, op)

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(self.h.status(request.match_info["name"]))

    async def tasks(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.h.require(name)
        return web.json_response(
            [
                {"id": {"connector": name, "task": i}, "config": c}
                for i, c in enumerate(self.h.configs.tasks.get(name, []))
            ]
        )

    async def put_tasks(self, request: web.Request) -> web.Response:
        """Internal: a connector's owner hands its task configurations to the leader."""
        name = request.match_info["name"]
        body = await _body(request)
        if not isinstance(body, list):
            raise RestError(400, "expected a JSON list of task configurations")
        configs = [_config_map(c, "a task configuration") for c in body]

        async def op() -> web.Response:
            await self.h.put_task_configs(name, configs)
            return web.Response(status=204)

        return await self.leader(request, op)

    async def task_status(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.h.require(name)
        task = _task_id(request)
        ts = self.h.statuses.tasks.get((name, task))
        if ts is None or task >= len(self.h.configs.tasks.get(name, [])):
            raise RestError(404, f"No status found for task {name}-{task}")
        out = {"id": task, "state": ts.get("state"), "worker_id": ts.get("worker_id")}
        if ts.get("trace"):
            out["trace"] = ts["trace"]
        return web.json_response(out)

    def _target(self, state: str) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            name = request.match_info["name"]

            async def op() -> web.Response:
                await self.h.set_target(name, state)
                return web.Response(status=202)

            return await self.leader(request, op)

        return handler

    async def restart(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        include = request.query.get("includeTasks", "false").lower() == "true"
        only_failed = request.query.get("onlyFailed", "false").lower() == "true"

        async def op() -> web.Response:
            await self.h.restart(name, include, only_failed)
            if not include and not only_failed:
                return web.Response(status=204)
            body = self.h.status(name)
            if not only_failed or body["connector"]["state"] == "FAILED":
                body["connector"]["state"] = "RESTARTING"
            for t in body["tasks"]:
                if include and (not only_failed or t["state"] == "FAILED"):
                    t["state"] = "RESTARTING"
            return web.json_response(body, status=202)

        return await self.leader(request, op)

    async def restart_task(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        task = _task_id(request)
        if await self.h.restart_task(name, task):
            return web.Response(status=204)
        if request.query.get("forward") == "false":
            raise RestError(404, f"Unknown task: {name}-{task}")

        async def op() -> web.Response:
            await self.h._leader()
            owner = self.h.owner_of_task(name, task)
            if owner is None:
                raise RestError(404, f"Unknown task: {name}-{task}")
            return await _forward(request, owner)

        return await self.leader(request, op)

    async def topics(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.h.require(name)
        if not self.h.cfg["topic.tracking.enable"]:
            raise RestError(403, "Topic tracking is disabled.")
        found = sorted(self.h.statuses.topics.get(name, {}))
        return web.json_response({name: {"topics": found}})

    async def reset_topics(self, request: web.Request) -> web.Response:
        await self.h.reset_topics(request.match_info["name"])
        return web.Response(status=202)

    async def get_offsets(self, request: web.Request) -> web.Response:
        return web.json_response(await offs.get_offsets(self.h, request.match_info["name"]))

    async def alter_offsets(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if body is None:
            raise RestError(
                400, "Partitions / offsets need to be provided for an alter offsets request"
            )
        return web.json_response(await offs.alter_offsets(self.h, request.match_info["name"], body))

    async def reset_offsets(self, request: web.Request) -> web.Response:
        return web.json_response(await offs.alter_offsets(self.h, request.match_info["name"], None))


def _task_id(request: web.Request) -> int:
    raw = request.match_info["task"]
    if not raw.isdigit():
        raise RestError(404, f"HTTP 404 Not Found (task id {raw!r} is not a number)")
    return int(raw)


def _java_map(config: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in config.items()) + "}"


async def _forward(request: web.Request, url: str) -> web.Response:
    query = dict(request.query)
    query["forward"] = "false"
    body = await request.read()
    target = url.rstrip("/") + request.path
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.request(
                request.method,
                target,
                params=query,
                data=body or None,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=90),
            ) as resp,
        ):
            data = await resp.read()
            headers = {k: v for k, v in resp.headers.items() if k in ("Content-Type", "Location")}
            return web.Response(status=resp.status, body=data, headers=headers)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise RestError(
            500, f"Request to leader to {request.method} {request.path} failed: {e}"
        ) from None


def make_app(herder: Herder) -> web.Application:
    api = Api(herder)
    app = web.Application(middlewares=[_errors])
    r = app.router
    c = "/connectors/{name}"
    r.add_get("/", api.root)
    r.add_get("/connector-plugins", api.plugins)
    r.add_get("/connector-plugins/", api.plugins)
    r.add_put("/connector-plugins/{plugin}/config/validate", api.validate)
    r.add_get("/connectors", api.list)
    r.add_get("/connectors/", api.list)
    r.add_post("/connectors", api.create)
    r.add_post("/connectors/", api.create)
    r.add_get(c, api.get)
    r.add_delete(c, api.delete)
    r.add_get(c + "/config", api.get_config)
    r.add_put(c + "/config", api.put_config)
    r.add_patch(c + "/config", api.patch_config)
    r.add_get(c + "/status", api.status)
    r.add_get(c + "/tasks", api.tasks)
    r.add_put(c + "/tasks", api.put_tasks)
    r.add_get(c + "/tasks/{task}/status", api.task_status)
    r.add_post(c + "/tasks/{task}/restart", api.restart_task)
    r.add_put(c + "/pause", api._target("PAUSED"))
    r.add_put(c + "/resume", api._target("STARTED"))
    r.add_put(c + "/stop", api._target("STOPPED"))
    r.add_post(c + "/restart", api.restart)
    r.add_get(c + "/topics", api.topics)
    r.add_put(c + "/topics/reset", api.reset_topics)
    r.add_get(c + "/offsets", api.get_offsets)
    r.add_patch(c + "/offsets", api.alter_offsets)
    r.add_delete(c + "/offsets", api.reset_offsets)
    return app
