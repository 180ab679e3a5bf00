"""``memoryd serve``: memory.sock ([memory] mode and group, bxcore.daemon), READY=1 once bound,
SIGTERM ends it.

One task group: the listener and the Honcho sync loop, cancelled by bxcore.daemon on SIGTERM or
SIGINT. One connection per request; each read and write has its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from bxcore.config import Config
from bxcore.daemon import Notifier, listening, run_until_signalled, wait_forever
from bxcore.errors import BoxmakerError
from bxcore.framestream import FrameStream
from bxcore.protocol.memory import TO_MEMORYD

from .service import MemoryService

log = logging.getLogger("memoryd")
READ_TIMEOUT = 30.0


def socket_path(config: Config) -> Path:
    return config.served("memory").path


async def serve(config: Config, source: str | Path = "config") -> None:
    """Until SIGTERM or SIGINT; ``source`` (the config file) names it in errors."""
    service = MemoryService(config)
    served = config.served("memory")
    group = served.gid(source)
    notifier = Notifier()

    async def main() -> None:
        service.catch_up()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _connection(service, reader, writer)

        async with (
            listening(served.path, connection, mode=served.mode, group=group),
            asyncio.TaskGroup() as group_of_tasks,
        ):
            notifier.ready()
            log.info("memoryd listening on %s", served.path)
            group_of_tasks.create_task(_sync_loop(service))
            await wait_forever()

    try:
        await run_until_signalled(main(), on_stop=notifier.stopping)
    finally:
        await service.aclose()


async def _connection(
    service: MemoryService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    stream = FrameStream(reader, writer, kinds=TO_MEMORYD)
    try:
        frame = await stream.read(timeout=READ_TIMEOUT)
        answer = await service.handle(frame)
        await stream.write(answer)
    except BoxmakerError as exc:
        log.warning("memory.sock connection dropped: %s", exc)
    finally:
        await stream.close()


async def _sync_loop(service: MemoryService) -> None:
    """Catch up with Honcho every ``sync_interval``, or sooner when a turn or a write kicks it."""
    if service.sync is None or service.config.memory.honcho is None:
        return
    interval = service.config.memory.honcho.sync_interval
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(service.sync_wanted.wait(), interval)
        service.sync_wanted.clear()
        try:
            report = await service.sync.sync_once()
        except BoxmakerError as exc:
            log.error("Honcho sync failed: %s", exc)
            continue
        if report.written or report.outage:
            log.info("Honcho sync: %s", report)
