"""Frames over a blocking Unix socket, for command-line clients (bxctl, ``memoryd``'s owner
commands) and tests: the blocking twin of bxcore.framestream's ``FrameStream``, with the same
deadlines and the same errors (that module's docstring). No daemon serves with it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Collection
from pathlib import Path

from .frameconn import Deadline, FrameConnection, Receive
from .frames import MAX_FRAME, Frame, Kinds
from .framestream import map_os_errors, stream_errors


class SyncFrameSocket:
    """Frames over one blocking Unix socket."""

    def __init__(
        self, sock: socket.socket, kinds: Collection[str] | None = None,
        max_size: int = MAX_FRAME, *, sends: Kinds | None = None,
    ):
        self._sock = sock
        self._conn = FrameConnection(kinds, sends, max_size)

    @classmethod
    def connect(
        cls, path: str | Path, kinds: Collection[str] | None = None, timeout: float = 10, *,
        sends: Kinds | None = None,
    ) -> SyncFrameSocket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        with map_os_errors(f"socket {path}"):
            try:
                sock.connect(str(path))
            except BaseException:
                sock.close()
                raise
        return cls(sock, kinds, sends=sends)

    def read(self, timeout: float | None = None) -> Frame:
        """As ``FrameStream.read``: ``timeout`` is the deadline for the whole frame."""
        deadline = Deadline.after(timeout, time.monotonic())
        with stream_errors("reading a frame", timeout):
            while isinstance(step := self._conn.next_frame(deadline, time.monotonic()), Receive):
                self._sock.settimeout(step.timeout)
                self._conn.receive_data(self._sock.recv(step.max_bytes))
            return step

    def write(self, frame: Frame, timeout: float | None = 30) -> None:
        """Send one frame whole within ``timeout`` (``sendall`` applies a socket timeout per
        send, so each send gets what is left of the deadline)."""
        data = memoryview(self._conn.send(frame))
        deadline = Deadline.after(timeout, time.monotonic())
        with stream_errors("writing a frame", timeout):
            while data:
                self._sock.settimeout(deadline.left(time.monotonic(), "writing a frame"))
                data = data[self._sock.send(data):]

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SyncFrameSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SyncFrameSocket"]
