"""inferproxy's socket: ``[inferproxy] socket`` bound with its mode and group, each accepted
connection handed to the forwarder (proxy.py), until SIGTERM or SIGINT.

Reports READY=1 to systemd once the socket is bound (and WATCHDOG=1 at half the interval systemd
asks for, when ``[inferproxy] watchdog`` is on).
"""

from __future__ import annotations

import asyncio

from bxcore.daemon import Notifier, accepting, run_until_signalled, wait_forever

from .wiring import ProxyParts


async def serve(parts: ProxyParts) -> None:
    notifier = Notifier()
    served = parts.served

    async def main() -> None:
        async with (
            parts.proxy.cutting_connections_on_exit(),
            accepting(served.path, parts.proxy.take, mode=served.mode, group=parts.group),
            asyncio.TaskGroup() as tasks,
        ):
            notifier.ready()
            if parts.watchdog:
                tasks.create_task(notifier.keep_watchdog())
            await wait_forever()

    await run_until_signalled(main(), on_stop=notifier.stopping)
