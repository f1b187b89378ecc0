"""``keeperless connect-distributed``: a distributed worker's process (Kafka's
``ConnectDistributed``): the REST server first, then the herder; SIGTERM or SIGINT leave
the group cleanly (tasks stopped, offsets committed, LeaveGroup sent)."""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from keeperless.connect.config import WorkerConfig
from keeperless.connect.herder import Herder
from keeperless.connect.rest import make_app

__all__ = ["run_worker"]

log = logging.getLogger(__name__)


async def serve(cfg: WorkerConfig) -> None:
    herder = Herder(cfg)
    runner = web.AppRunner(make_app(herder), access_log=None)
    await runner.setup()
    _, host, port = cfg.rest_listener()
    site = web.TCPSite(runner, host or "0.0.0.0", port, reuse_address=True)
    await site.start()
    server = site._server
    bound = server.sockets[0].getsockname()[1] if isinstance(server, asyncio.Server) else port
    url = cfg.advertised_url(bound)
    log.info("REST server listening at %s, advertising %s", f"{host or '0.0.0.0'}:{bound}", url)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    try:
        await herder.start(url)
        await done.wait()
    finally:
        log.info("Connect worker %s stopping", herder.worker_id)
        await herder.stop()
        await runner.cleanup()


def run_worker(cfg: WorkerConfig) -> int:
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
    )
    logging.getLogger("aiohttp").setLevel(logging.WARNING)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(serve(cfg))
    return 0
