"""inferproxy's socket: ``[inferproxy] socket`` bound with its mode and group, each accepted
connection handed to the forwarder (proxy.py) in a task of the one task group of the daemon's
main, until SIGTERM or SIGINT, which close the socket and then cut every connection still open.

Reports READY=1 to systemd once the socket is bound (and WATCHDOG=1 at half the interval systemd
asks for, when ``[inferproxy] watchdog`` is on).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path

from bxcore.accepting import accepting
from bxcore.config import Config
from bxcore.daemon import Notifier, run_until_signalled, wait_forever

from .proxy import Proxy

log = logging.getLogger("inferproxy")


async def serve(proxy: Proxy, config: Config, source: str | Path = "config") -> None:
    """Until SIGTERM or SIGINT; ``source`` (the config file) names it in errors."""
    served = config.served("infer")
    group = served.gid(source)
    notifier = Notifier()

    async def main() -> None:
        try:
            async with (  # left in reverse: the socket closed, then every connection cut
                asyncio.TaskGroup() as tasks,
                accepting(served.path, functools.partial(proxy.take, tasks), mode=served.mode,
                          group=group),
            ):
                notifier.ready()
                if config.inferproxy.watchdog:
                    tasks.create_task(notifier.keep_watchdog())
                await wait_forever()
        finally:
            log.info("stopped after %d connections", proxy.total)

    await run_until_signalled(main(), on_stop=notifier.stopping)
