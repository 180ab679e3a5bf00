"""inferproxy's socket: ``[inferproxy] socket`` bound with its mode and group, each accepted
connection handed to the forwarder (proxy.py), until SIGTERM or SIGINT.

Reports READY=1 to systemd once the socket is bound (and WATCHDOG=1 at half the interval systemd
asks for, when ``[inferproxy] watchdog`` is on). First it asks the kernel for the shortest time
slice (bxcore.sched): each chunk of a stream wakes it while llama-server's threads hold every
core, and a short slice lets it run at once instead of behind them.
"""

from __future__ import annotations

import asyncio
import logging

from bxcore.daemon import Notifier, listening, run_until_signalled, wait_forever
from bxcore.sched import request_slice

from .proxy import CHUNK
from .wiring import ProxyParts

log = logging.getLogger("inferproxy")


async def serve(parts: ProxyParts) -> None:
    refused = request_slice()
    if refused:
        log.info("the default time slice stays: %s", refused)
    notifier = Notifier()
    served = parts.served

    async def main() -> None:
        async with (
            parts.proxy.cutting_connections_on_exit(),
            listening(served.path, parts.proxy.handle, mode=served.mode, group=parts.group,
                      limit=CHUNK),
            asyncio.TaskGroup() as tasks,
        ):
            notifier.ready()
            if parts.watchdog:
                tasks.create_task(notifier.keep_watchdog())
            await wait_forever()

    await run_until_signalled(main(), on_stop=notifier.stopping)
