"""``memoryd serve``: memory.sock (mode 0600), READY=1 once bound, SIGTERM ends it.

One task group: the listener, the Honcho sync loop, and the signal wait. One connection per
request; each read and write has its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

import sdnotify  # type: ignore[import-untyped]
from bxcore.config import Config
from bxcore.errors import BoxmakerError
from bxcore.framestream import FrameStream
from bxcore.protocol.memory import TO_MEMORYD

from .service import MemoryService

log = logging.getLogger("memoryd")
READ_TIMEOUT = 30.0


def socket_path(config: Config) -> Path:
    return config.memory.socket or config.socket("memory")


async def serve(config: Config) -> None:
    service = MemoryService(config)
    path = socket_path(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        service.catch_up()
        async with asyncio.TaskGroup() as group:
            server = await _listen(service, path)
            sdnotify.SystemdNotifier().notify("READY=1")
            log.info("memoryd listening on %s", path)
            sync_task = group.create_task(_sync_loop(service))
            await stop.wait()
            server.close()
            await server.wait_closed()
            sync_task.cancel()
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        await service.aclose()


async def _listen(service: MemoryService, path: Path) -> asyncio.Server:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale socket from a previous run
    old_umask = os.umask(0o177)  # the socket is born 0600: no window where others can connect
    try:
        server = await asyncio.start_unix_server(
            lambda r, w: _connection(service, r, w), path=str(path)
        )
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    return server


async def _connection(service: MemoryService, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
    stream = FrameStream(reader, writer, kinds=TO_MEMORYD)
    try:
        frame = await stream.read(timeout=READ_TIMEOUT)
        answer = await service.handle(frame)
        await stream.write(answer)
    except (BoxmakerError, TimeoutError) as exc:
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
