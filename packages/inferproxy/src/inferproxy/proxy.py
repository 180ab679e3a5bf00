"""The forwarder: asyncio streams, one task per direction, half-close and backpressure.

Each direction reads at most CHUNK bytes and waits for ``drain()`` before reading more, so a
slow reader slows the writer instead of filling memory. EOF on one side is passed on as a
half-close (``write_eof``), so a client may finish sending and still read the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

log = logging.getLogger("inferproxy")
CHUNK = 64 * 1024
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Upstream:
    """``tcp://host:port`` or ``unix:/path`` (already validated by the config)."""

    address: str

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.address.startswith("unix:"):
            opening = asyncio.open_unix_connection(self.address[len("unix:") :], limit=CHUNK)
        else:
            host, _, port = self.address[len("tcp://") :].rpartition(":")
            opening = asyncio.open_connection(host.strip("[]"), int(port), limit=CHUNK)
        return await asyncio.wait_for(opening, CONNECT_TIMEOUT)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof() and not writer.is_closing():
        writer.write_eof()


class Proxy:
    def __init__(self, upstream: Upstream):
        self._upstream = upstream
        self._handlers: set[asyncio.Task[None]] = set()
        self.active = 0
        self.total = 0

    @contextlib.asynccontextmanager
    async def cutting_connections_on_exit(self) -> AsyncIterator[None]:
        """On exit, cut the connections still open: an answer still streaming ends at once."""
        try:
            yield
        finally:
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            log.info("stopped after %d connections", self.total)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.active += 1
        self.total += 1
        try:
            await self._forward(reader, writer)
        finally:
            writer.close()
            self.active -= 1
            self._handlers.discard(task)
            log.info("connections: %d open, %d since start", self.active, self.total)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await self._upstream.connect()
        except (OSError, TimeoutError) as exc:
            log.error("upstream %s unreachable: %s", self._upstream.address, exc or "timeout")
            return
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_pipe(reader, up_writer))
                group.create_task(_pipe(up_reader, writer))
        except* OSError as errors:
            log.error("connection failed: %s", "; ".join(str(e) for e in errors.exceptions))
        finally:
            up_writer.close()
