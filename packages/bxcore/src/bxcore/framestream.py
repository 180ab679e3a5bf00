"""The thin I/O shell around bxcore.frameconn's pure connection over an asyncio stream (its
blocking twin, for command lines and tests, is bxcore.framesync's). Both only receive and send
bytes and read the clock; what a chunk, the end of the stream, a frame cut off by it and the
frame's deadline mean is decided once, in ``FrameConnection`` (h11's Connection, driven by a
read loop as httpcore drives it).

Each read and write takes its own timeout, a deadline for the whole frame: a peer that sends
(or takes) one byte at a time does not extend it. There is no deadline across frames. Reads are
bounded (CHUNK bytes at a time) so a peer cannot make us buffer more than one frame's limit.

This is the edge for socket errors: a missed deadline is ``StreamTimeout``, a broken connection
``StreamBroken``, a socket that cannot be reached ``PeerUnavailable``; no ``TimeoutError`` or
``OSError`` reaches the caller from ``connect``, ``read`` or ``write``. A frame this side may not
send is ``LocalProtocolError`` (our bug), raised before any byte of it is written; what a role's
socket does with one, and with the peer's RemoteProtocolError, is bxcore.daemon.answering's.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Collection, Iterator
from pathlib import Path

from .errors import (
    FrameError,
    PeerUnavailable,
    StreamBroken,
    StreamTimeout,
)
from .frameconn import CHUNK, Deadline, FrameConnection, Receive
from .frames import MAX_FRAME, Frame, Kinds


@contextlib.contextmanager
def map_os_errors(what: str) -> Iterator[None]:
    """Connecting: a socket that cannot be reached is ``PeerUnavailable``."""
    try:
        yield
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise PeerUnavailable(f"{what}: not running ({exc.strerror})") from exc
    except TimeoutError as exc:
        raise PeerUnavailable(f"{what}: timed out") from exc
    except OSError as exc:
        raise PeerUnavailable(f"{what}: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def stream_errors(what: str, timeout: float | None) -> Iterator[None]:
    """A frame's read or write: a missed deadline and a broken socket become ours."""
    try:
        yield
    except TimeoutError as exc:  # asyncio's, and socket.timeout (an alias since 3.10)
        raise StreamTimeout(f"{what}: no whole frame within {timeout:g} s") from exc
    except OSError as exc:  # ConnectionError (reset, broken pipe) and any other socket error
        raise StreamBroken(f"connection broken: {exc.strerror or exc}") from exc


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
    """Frames over an asyncio stream pair. ``kinds``: what the peer may send us; ``sends``: what
    we may send, each kind with its body's model (bxcore.frameconn)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        kinds: Collection[str] | None = None,
        max_size: int = MAX_FRAME,
        *,
        sends: Kinds | None = None,
    ):
        self._reader = reader
        self._writer = writer
        self._conn = FrameConnection(kinds, sends, max_size)

    @classmethod
    async def connect(
        cls, path: str | Path, kinds: Collection[str] | None = None, timeout: float = 10, *,
        sends: Kinds | None = None,
    ) -> FrameStream:
        with map_os_errors(f"socket {path}"):
            sock = await asyncio.wait_for(_connected_unix_socket(str(path)), timeout)
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=CHUNK)
        return cls(reader, writer, kinds, sends=sends)

    def may_send(self, kind: str) -> bool:
        return self._conn.may_send(kind)

    async def read(self, timeout: float | None = None) -> Frame:
        """The next frame. Raises StreamClosed at a clean end, StreamBroken when the connection
        breaks, IncompleteFrame mid-frame, FrameError on a malformed frame, StreamTimeout when
        no whole frame arrived within ``timeout`` seconds of the call."""
        deadline = Deadline.after(timeout, time.monotonic())
        with stream_errors("reading a frame", timeout):
            while isinstance(step := self._conn.next_frame(deadline, time.monotonic()), Receive):
                received = self._reader.read(step.max_bytes)
                self._conn.receive_data(await asyncio.wait_for(received, step.timeout))
            return step

    async def write(self, frame: Frame, timeout: float | None = 30) -> None:
        """Send one frame; StreamTimeout if the peer has not taken it within ``timeout``. A
        frame sent in part cannot be taken back: the connection is then aborted, so ``close``
        does not wait for a peer that takes nothing. LocalProtocolError, before anything is
        written, when this side may not send the frame."""
        self._writer.write(self._conn.send(frame))
        try:
            with stream_errors("writing a frame", timeout):
                await asyncio.wait_for(self._writer.drain(), timeout)
        except StreamTimeout:
            self._writer.transport.abort()
            raise

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()


__all__ = ["FrameError", "FrameStream", "PeerUnavailable", "map_os_errors", "stream_errors"]
