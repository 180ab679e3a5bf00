"""Readiness the systemd way: daemons send READY=1 to $NOTIFY_SOCKET, and we listen.

The local stack binds one datagram socket (a path, not an abstract name: abstract sockets are
per network namespace, and loopd runs in its own) and learns which daemon is ready from the
sender's pid in SCM_CREDENTIALS.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

_CREDS = struct.Struct("3i")


class NotifyListener:
    def __init__(self, path: Path):
        self.path = path
        path.unlink(missing_ok=True)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock.bind(str(path))
        os.chmod(path, 0o666)  # daemons may run as another uid (user namespaces)
        self._ready: set[int] = set()
        self._status: dict[int, str] = {}

    def wait_ready(self, pids: set[int], timeout: float,
                   alive: Callable[[], bool] = lambda: True) -> int | None:
        """Wait until one of ``pids`` sends READY=1; return it, or None on timeout or when
        ``alive()`` turns false (the daemon died before it was ready)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self._ready & pids
            if found:
                return found.pop()
            left = deadline - time.monotonic()
            if left <= 0 or not alive():
                return None
            self._sock.settimeout(min(left, 0.2))
            try:
                data, ancillary, _flags, _addr = self._sock.recvmsg(
                    4096, socket.CMSG_SPACE(_CREDS.size)
                )
            except TimeoutError:
                continue
            pid = _sender_pid(ancillary)
            for line in data.decode("utf-8", "replace").splitlines():
                if line == "READY=1" and pid is not None:
                    self._ready.add(pid)
                elif line.startswith("STATUS=") and pid is not None:
                    self._status[pid] = line[len("STATUS=") :]

    def close(self) -> None:
        self._sock.close()
        self.path.unlink(missing_ok=True)


def _sender_pid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _uid, _gid = _CREDS.unpack(data[: _CREDS.size])
            return int(pid)
    return None
