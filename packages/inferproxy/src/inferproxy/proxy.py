"""The forwarder: splice(2) through a pipe, one pump per direction, half-close and backpressure.

Each direction moves bytes from one socket into a pipe and from the pipe into the other socket
with ``os.splice``, so they never enter Python: no buffer is allocated, copied or sliced per
chunk, and the event loop only runs a callback when a socket is ready. A pump reads again only
once the pipe is empty; while the destination cannot take more it stops reading, so a slow
reader slows the writer and the proxy holds at most one pipe per direction. EOF on one side is
passed on as a half-close (``shutdown(SHUT_WR)``), so a client may finish sending and still read
the answer.

py-spy on a 256 MiB transfer through the earlier asyncio-streams version (``read(64 KiB)``,
``write``, ``drain``): most of the time went to the stream reader's buffer (copied in, sliced out,
its front deleted), a task wake-up per 64 KiB and ``drain``, with the reads' 256 KiB ``bytes``
allocated and faulted in each time. docs/performance.md has the figures before and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("inferproxy")
PIPE_SIZE = 1024 * 1024  # asked of each pipe; the kernel's default (64 KiB) if refused
# Asked of each socket's send buffer, so that one pipe-load fits: the kernel caps it at
# net.core.wmem_max (a stock kernel grants about 416 KiB of it), which is still twice its
# default; fewer, larger moves per wake-up (docs/decisions/inferproxy.md has the figures)
SEND_BUFFER = PIPE_SIZE
CONNECT_TIMEOUT = 10.0
_SPLICE = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


class _Pump:
    """One direction: ``source`` to ``sink`` through a pipe. ``finished`` gets None once EOF has
    been passed on, or the error that ended it."""

    def __init__(self, source: socket.socket, sink: socket.socket):
        self._loop = asyncio.get_running_loop()
        self._source = source.fileno()
        self._sink = sink.fileno()
        self._sink_socket = sink
        self._pipe_out, self._pipe_in = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self._size = fcntl.fcntl(self._pipe_in, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:  # over the user's pipe quota: keep the default
            self._size = fcntl.fcntl(self._pipe_in, fcntl.F_GETPIPE_SZ)
        self._in_pipe = 0
        self.finished: asyncio.Future[None] = self._loop.create_future()

    def start(self) -> None:
        """Watch the source, and move what it holds already: a new connection's request is
        usually there before the proxy looks, and one wait on the loop less is one wake-up
        less on the first event's path."""
        self._loop.add_reader(self._source, self._readable)
        self._readable()

    def _readable(self) -> None:
        try:
            moved = os.splice(self._source, self._pipe_in, self._size, flags=_SPLICE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._finish(exc)
            return
        if moved == 0:
            self._loop.remove_reader(self._source)
            self._finish(self._half_close())
            return
        self._in_pipe = moved
        self._flush()

    def _flush(self) -> None:
        """Move the pipe's bytes on; if the sink is full, wait for it instead of reading."""
        while self._in_pipe:
            try:
                moved = os.splice(self._pipe_out, self._sink, self._in_pipe, flags=_SPLICE)
            except BlockingIOError:
                self._loop.remove_reader(self._source)
                self._loop.add_writer(self._sink, self._writable)
                return
            except OSError as exc:
                self._finish(exc)
                return
            self._in_pipe -= moved

    def _writable(self) -> None:
        self._loop.remove_writer(self._sink)
        self._flush()
        if not self._in_pipe and not self.finished.done():
            self._loop.add_reader(self._source, self._readable)

    def _half_close(self) -> OSError | None:
        try:
            self._sink_socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            return exc
        return None

    def _finish(self, error: OSError | None) -> None:
        if self.finished.done():
            return
        if error is None:
            self.finished.set_result(None)
        else:
            self.finished.set_exception(error)

    def close(self) -> None:
        self._loop.remove_reader(self._source)
        self._loop.remove_writer(self._sink)
        os.close(self._pipe_in)
        os.close(self._pipe_out)


@dataclass(frozen=True)
class Upstream:
    """``tcp://host:port`` or ``unix:/path`` (already validated by the config)."""

    address: str

    async def connect(self) -> socket.socket:
        loop = asyncio.get_running_loop()
        targets: list[tuple[int, Any]]
        if self.address.startswith("unix:"):
            targets = [(socket.AF_UNIX, self.address[len("unix:") :])]
        else:
            host, _, port = self.address[len("tcp://") :].rpartition(":")
            found = await loop.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
            targets = [(family, address) for family, _, _, _, address in found]
        error: OSError = OSError(f"no address for {self.address}")
        for family, address in targets:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await _connect(loop, sock, address)
            except BaseException as exc:  # also when cancelled: the proxy is stopping
                sock.close()
                if not isinstance(exc, OSError | TimeoutError):
                    raise
                error = exc if isinstance(exc, OSError) else OSError("timeout")
                continue
            return sock
        raise error


async def _connect(loop: asyncio.AbstractEventLoop, sock: socket.socket, address: Any) -> None:
    """Connect the non-blocking ``sock``: at once where the kernel can (a Unix socket whose
    listener has room in its backlog, which is every completion's case), else by waiting for it
    on the loop, for at most CONNECT_TIMEOUT."""
    try:
        sock.connect(address)
        return
    except (BlockingIOError, InterruptedError):
        pass
    async with asyncio.timeout(CONNECT_TIMEOUT):
        await loop.sock_connect(sock, address)


class Proxy:
    def __init__(self, upstream: Upstream):
        self._upstream = upstream
        self.open = 0
        self.total = 0

    def take(self, tasks: asyncio.TaskGroup, client: socket.socket) -> None:
        """Forward one accepted connection (``accepting``'s callback) in a task of ``tasks``:
        the daemon's, which cuts it at the stop (an answer still streaming ends at once)."""
        task = tasks.create_task(self._forward(client))
        self.open += 1
        self.total += 1
        # a callback, not a finally: it also runs for a task cancelled before it started
        task.add_done_callback(functools.partial(self._ended, client))

    def _ended(self, client: socket.socket, _task: asyncio.Task[None]) -> None:
        client.close()
        self.open -= 1
        # DEBUG: a line per completion at INFO took a tenth of the proxy's time
        log.debug("connections: %d open, %d since start", self.open, self.total)

    async def _forward(self, client: socket.socket) -> None:
        """One connection, whose failure, even our bug, is its own: the daemon's other
        connections and its socket go on."""
        try:
            await self._splice(client)
        except OSError as exc:  # out of descriptors for a pipe, say
            log.error("connection failed: %s", exc)
        except Exception as exc:
            log.error("our bug, not the peer's: %s", exc, exc_info=exc)

    async def _splice(self, client: socket.socket) -> None:
        try:
            upstream = await self._upstream.connect()
        except OSError as exc:
            log.error("upstream %s unreachable: %s", self._upstream.address, exc)
            return
        for sock in (client, upstream):
            with contextlib.suppress(OSError):  # a refusal leaves the default: slower, not broken
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        pumps: list[_Pump] = []
        try:
            pumps.append(_Pump(client, upstream))
            pumps.append(_Pump(upstream, client))
            for pump in pumps:
                pump.start()
            ended, _ = await asyncio.wait(
                [pump.finished for pump in pumps], return_when=asyncio.FIRST_EXCEPTION
            )
            errors = [str(error) for future in ended if (error := future.exception())]
            if errors:
                log.error("connection failed: %s", "; ".join(errors))
        finally:
            for pump in pumps:
                pump.close()
            upstream.close()
