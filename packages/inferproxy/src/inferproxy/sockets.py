"""inferproxy's socket: ``[inferproxy] socket`` bound with its mode and group, each accepted
connection handed to the forwarder (proxy.py), until SIGTERM or SIGINT.

Reports READY=1 to systemd once the socket is bound (and WATCHDOG=1 at half the interval systemd
asks for, when ``[inferproxy] watchdog`` is on).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bxcore.config import Config
from bxcore.daemon import Notifier, accepting, run_until_signalled, wait_forever

from .proxy import Proxy


async def serve(proxy: Proxy, config: Config, source: str | Path = "config") -> None:
    """Until SIGTERM or SIGINT; ``source`` (the config file) names it in errors."""
    served = config.served("infer")
    group = served.gid(source)
    notifier = Notifier()

    async def main() -> None:
        async with (
            proxy.cutting_connections_on_exit(),
            accepting(served.path, proxy.take, mode=served.mode, group=group),
            asyncio.TaskGroup() as tasks,
        ):
            notifier.ready()
            if config.inferproxy.watchdog:
                tasks.create_task(notifier.keep_watchdog())
            await wait_forever()

    await run_until_signalled(main(), on_stop=notifier.stopping)
