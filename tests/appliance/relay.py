"""A TCP listener on 127.0.0.1 that forwards every connection to a Unix socket.

The test llama-server listens on a Unix socket (tests/support/llama.py); the owner's router
listens on TCP. This relay gives the test server a TCP port on loopback, so inferproxy reaches it
as it reaches the router, and a test can show that loopd's container cannot reach that port. It
only copies bytes; it answers nothing itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path


class TcpToUnix:
    def __init__(self, target: Path):
        self.target = target
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(self.target))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        writer.close()
        up_writer.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def __enter__(self) -> TcpToUnix:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            await self._server.wait_closed()
            # Connections still open (inferproxy keeps its own) end here, not as destroyed tasks.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
