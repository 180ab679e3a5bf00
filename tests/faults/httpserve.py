"""Serve an httpx-style handler on a Unix socket, so the in-process fakes become real servers.

The inference fakes (``tests/inference/fake_server.py``, ``tests/loop/caching_server.py``) are
httpx transports: a function from ``httpx.Request`` to ``httpx.Response``. Daemons started as
processes need a socket, so this wraps such a handler in a minimal HTTP/1.1 server (one request
per connection, ``Connection: close``, bodies chunked as llama-server's streams are). A response
stream that raises (the fakes' ``CUT``) drops the connection without the final chunk, exactly
the mid-stream cut a client sees from a real server dying.

    with UnixHTTPServer(path, handler) as server: ...   # a thread runs the asyncio loop
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Self

import httpx

Handler = Callable[[httpx.Request], "httpx.Response | Awaitable[httpx.Response]"]
MAX_HEAD = 64 * 1024


class BackgroundServer(abc.ABC):
    """An asyncio Unix-socket server on its own thread; subclasses say how to ``serve`` one
    connection. Used as a context manager: bound on entry, closed (connections too) on exit."""

    def __init__(self, path: Path):
        self.path = path
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def __enter__(self) -> Self:
        self.path.unlink(missing_ok=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
        self.path.unlink(missing_ok=True)

    async def _start(self) -> None:
        self._server = await asyncio.start_unix_server(self._guarded, path=str(self.path))

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    async def _guarded(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self.serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, httpx.HTTPError):
            pass  # the client went away, or the fake cut the stream on purpose
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @abc.abstractmethod
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer one connection."""


class UnixHTTPServer(BackgroundServer):
    def __init__(self, path: Path, handler: Handler):
        super().__init__(path)
        self.handler = handler
        self.requests = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        if request is None:
            return
        self.requests += 1
        answer = self.handler(request)
        response = await answer if inspect.isawaitable(answer) else answer
        await write_response(response, writer)


async def read_request(reader: asyncio.StreamReader) -> httpx.Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    if len(head) > MAX_HEAD:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = [tuple(line.split(":", 1)) for line in lines[1:] if ":" in line]
    fields = {name.strip().lower(): value.strip() for name, value in headers}
    body = await reader.readexactly(int(fields.get("content-length", "0")))
    return httpx.Request(method, f"http://fake{target}", headers=fields, content=body)


async def write_response(response: httpx.Response, writer: asyncio.StreamWriter) -> None:
    head = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
    for name, value in response.headers.items():
        if name.lower() not in ("content-length", "transfer-encoding", "connection"):
            head.append(f"{name}: {value}")
    head += ["transfer-encoding: chunked", "connection: close", "", ""]
    writer.write("\r\n".join(head).encode("latin-1"))
    await writer.drain()
    try:
        async for piece in _pieces(response):
            if piece:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
    finally:
        await response.aclose()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    """A body given whole (``json=``, ``content=``) at once; a streamed one as it comes."""
    try:
        yield response.content
    except httpx.ResponseNotRead:
        async for piece in response.aiter_raw():
            yield piece
