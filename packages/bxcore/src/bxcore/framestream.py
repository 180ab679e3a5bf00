"""Thin I/O shells around the frame codec: an asyncio stream and a blocking socket.

Each read and write takes its own timeout, a deadline for the whole frame: a peer that sends
(or takes) one byte at a time does not extend it. There is no deadline across frames. Reads are
bounded (CHUNK bytes at a time) so a peer cannot make us buffer more than one frame's limit.

This is the edge for socket errors: a missed deadline is ``StreamTimeout``, a broken connection
``StreamBroken``, a socket that cannot be reached ``PeerUnavailable``; no ``TimeoutError`` or
``OSError`` reaches the caller from ``connect``, ``read`` or ``write``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import FrameError, PeerUnavailable, StreamBroken, StreamClosed, StreamTimeout
from .frames import END, MAX_FRAME, NEED_DATA, Frame, FrameDecoder, encode_frame

CHUNK = 64 * 1024


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


@contextlib.contextmanager
def _stream_errors(what: str, timeout: float | None) -> Iterator[None]:
    """A frame's read or write: a missed deadline and a broken socket become ours."""
    try:
        yield
    except TimeoutError as exc:  # asyncio's, and socket.timeout (an alias since 3.10)
        raise StreamTimeout(f"{what}: no whole frame within {timeout:g} s") from exc
    except OSError as exc:  # ConnectionError (reset, broken pipe) and any other socket error
        raise StreamBroken(f"connection broken: {exc.strerror or exc}") from exc


def _next_frame(decoder: FrameDecoder) -> Frame | None:
    """The decoder's next frame; None when it needs data; StreamClosed at a clean end."""
    event = decoder.next_event()
    if event is END:
        raise StreamClosed("peer closed the connection")
    if isinstance(event, Frame):
        return event
    assert event is NEED_DATA
    return None


class _Deadline:
    """The time left of one frame's deadline; None: no deadline."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout
        self._end = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float | None:
        if self._end is None:
            return None
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left


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
        """The next frame. Raises StreamClosed at a clean end, StreamBroken when the connection
        breaks, IncompleteFrame mid-frame, FrameError on a malformed frame, StreamTimeout when
        no whole frame arrived within ``timeout`` seconds of the call."""
        deadline = _Deadline(timeout)
        with _stream_errors("reading a frame", timeout):
            while (frame := _next_frame(self._decoder)) is None:
                data = await asyncio.wait_for(self._reader.read(CHUNK), deadline.left())
                self._decoder.feed(data)
            return frame

    async def write(self, frame: Frame, timeout: float | None = 30) -> None:
        """Send one frame; StreamTimeout if the peer has not taken it within ``timeout``. A
        frame sent in part cannot be taken back: the connection is then aborted, so ``close``
        does not wait for a peer that takes nothing."""
        self._writer.write(encode_frame(frame, self._max))
        try:
            with _stream_errors("writing a frame", timeout):
                await asyncio.wait_for(self._writer.drain(), timeout)
        except StreamTimeout:
            self._writer.transport.abort()
            raise

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
        """As ``FrameStream.read``: ``timeout`` is the deadline for the whole frame."""
        deadline = _Deadline(timeout)
        with _stream_errors("reading a frame", timeout):
            while (frame := _next_frame(self._decoder)) is None:
                self._sock.settimeout(deadline.left())
                self._decoder.feed(self._sock.recv(CHUNK))
            return frame

    def write(self, frame: Frame, timeout: float | None = 30) -> None:
        """Send one frame whole within ``timeout`` (``sendall`` applies a socket timeout per
        send, so each send gets what is left of the deadline)."""
        data = memoryview(encode_frame(frame, self._max))
        deadline = _Deadline(timeout)
        with _stream_errors("writing a frame", timeout):
            while data:
                self._sock.settimeout(deadline.left())
                data = data[self._sock.send(data):]

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SyncFrameSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FrameError", "FrameStream", "PeerUnavailable", "SyncFrameSocket"]
