"""Thin I/O shells around the frame codec: an asyncio stream and a blocking socket.

Each read and write takes its own timeout; there is no overall deadline. Reads are bounded
(CHUNK bytes at a time) so a peer cannot make us buffer more than one frame's limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

from .errors import BoxmakerError, FrameError, StreamClosed
from .frames import END, MAX_FRAME, NEED_DATA, Frame, FrameDecoder, encode_frame

CHUNK = 64 * 1024


class PeerUnavailable(BoxmakerError):
    """A role's socket could not be reached (missing, refused, or timed out)."""


@contextlib.contextmanager
def _map_os_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise PeerUnavailable(f"{what}: not running ({exc.strerror})") from exc
    except TimeoutError as exc:
        raise PeerUnavailable(f"{what}: timed out") from exc
    except OSError as exc:
        raise PeerUnavailable(f"{what}: {exc.strerror or exc}") from exc


async def _connected_unix_socket(path: str) -> socket.socket:
    """A connected, non-blocking Unix socket; waits while the listener's backlog is full.

    On AF_UNIX a non-blocking connect() either connects at once or fails with EAGAIN when the
    backlog is full: nothing is in progress. asyncio's own connect takes that EAGAIN for "in
    progress" and hands back a socket that never connected, whose reads then fail with EINVAL
    (found under load: 50 sessions reporting turns to a busy memoryd). So try again here.
    """
    delay = 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:
            sock.close()
        except BaseException:
            sock.close()
            raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


class FrameStream:
    """Frames over an asyncio stream pair."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        kinds: frozenset[str] | set[str] | None = None,
        max_size: int = MAX_FRAME,
    ):
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(kinds, max_size)
        self._max = max_size

    @classmethod
    async def connect(
        cls, path: str | Path, kinds: frozenset[str] | set[str] | None = None, timeout: float = 10
    ) -> FrameStream:
        with _map_os_errors(f"socket {path}"):
            sock = await asyncio.wait_for(_connected_unix_socket(str(path)), timeout)
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=CHUNK)
        return cls(reader, writer, kinds)

    async def read(self, timeout: float | None = None) -> Frame:
        """The next frame. Raises StreamClosed at a clean end, IncompleteFrame mid-frame,
        FrameError on a malformed frame, TimeoutError when nothing completes a frame in time."""
        while True:
            event = self._decoder.next_event()
            if isinstance(event, Frame):
                return event
            if event is END:
                raise StreamClosed("peer closed the connection")
            assert event is NEED_DATA
            try:
                data = await asyncio.wait_for(self._reader.read(CHUNK), timeout)
            except ConnectionError as exc:
                raise StreamClosed(f"connection broken: {exc}") from exc
            self._decoder.feed(data)

    async def write(self, frame: Frame, timeout: float | None = 30) -> None:
        self._writer.write(encode_frame(frame, self._max))
        try:
            await asyncio.wait_for(self._writer.drain(), timeout)
        except ConnectionError as exc:
            raise StreamClosed(f"connection broken: {exc}") from exc

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()


class SyncFrameSocket:
    """Frames over a blocking Unix socket, for command-line clients and tests."""

    def __init__(
        self, sock: socket.socket, kinds: frozenset[str] | set[str] | None = None,
        max_size: int = MAX_FRAME,
    ):
        self._sock = sock
        self._decoder = FrameDecoder(kinds, max_size)
        self._max = max_size

    @classmethod
    def connect(
        cls, path: str | Path, kinds: frozenset[str] | set[str] | None = None, timeout: float = 10
    ) -> SyncFrameSocket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        with _map_os_errors(f"socket {path}"):
            try:
                sock.connect(str(path))
            except BaseException:
                sock.close()
                raise
        return cls(sock, kinds)

    def read(self, timeout: float | None = None) -> Frame:
        self._sock.settimeout(timeout)
        while True:
            event = self._decoder.next_event()
            if isinstance(event, Frame):
                return event
            if event is END:
                raise StreamClosed("peer closed the connection")
            try:
                data = self._sock.recv(CHUNK)
            except ConnectionError as exc:
                raise StreamClosed(f"connection broken: {exc}") from exc
            self._decoder.feed(data)

    def write(self, frame: Frame, timeout: float | None = 30) -> None:
        self._sock.settimeout(timeout)
        try:
            self._sock.sendall(encode_frame(frame, self._max))
        except (BrokenPipeError, ConnectionError) as exc:
            raise StreamClosed(f"connection broken: {exc}") from exc

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SyncFrameSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FrameError", "FrameStream", "PeerUnavailable", "SyncFrameSocket"]
