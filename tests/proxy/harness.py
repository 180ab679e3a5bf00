"""Run the real inferproxy as a subprocess, with a NOTIFY_SOCKET the test binds, and upstreams
made of plain threads, so the proxy is tested exactly as systemd runs it."""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from support.inferproxy import start_proxy, write_config

READY_TIMEOUT = 30.0  # seconds to wait for READY=1; a limit on waiting, not a measurement


class Notifications:
    """An AF_UNIX datagram socket standing in for systemd's notify socket (reference 11.4)."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))

    def wait_for(self, line: str, timeout: float = READY_TIMEOUT) -> int:
        """Wait for a datagram holding ``line``; returns the sender's pid."""
        self.sock.settimeout(timeout)
        while True:
            data, ancillary, _flags, _addr = self.sock.recvmsg(
                4096, socket.CMSG_SPACE(struct.calcsize("3i"))
            )
            if line in data.decode().splitlines():
                for level, kind, payload in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                        return struct.unpack("3i", payload[:12])[0]
                raise AssertionError("notification without sender credentials")

    def close(self) -> None:
        self.sock.close()


@dataclass
class RunningProxy:
    process: subprocess.Popen[str]
    socket: Path
    notify: Notifications

    def connect(self) -> socket.socket:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(30)
        client.connect(str(self.socket))
        return client

    def stop(self) -> tuple[int, str]:
        """SIGTERM; returns the exit status and what it wrote to stderr."""
        self.process.send_signal(signal.SIGTERM)
        _out, err = self.process.communicate(timeout=30)
        return self.process.returncode, err


def short_tempdir() -> Path:
    """Unix socket paths must fit in 108 bytes; pytest's tmp_path may not."""
    return Path(tempfile.mkdtemp(prefix="bx-proxy-"))


@contextlib.contextmanager
def running_proxy(
    upstream: str, env: dict[str, str] | None = None, **config: object
) -> Iterator[RunningProxy]:
    directory = short_tempdir()
    notify = Notifications(directory / "notify")
    process = start_proxy(
        write_config(directory, upstream, **config),
        {"NOTIFY_SOCKET": str(notify.path), **(env or {})},
    )
    try:
        assert notify.wait_for("READY=1") == process.pid
        yield RunningProxy(process, directory / "infer.sock", notify)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        notify.close()
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


class ThreadedUpstream:
    """A Unix-socket server running ``handler(conn)`` in a thread per connection."""

    def __init__(self, handler: Callable[[socket.socket], None]):
        self.directory = short_tempdir()
        self.path = self.directory / "upstream.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen()
        self.handler = handler
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"unix:{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                self.handler(conn)
            except BaseException as exc:  # reported by the test, not lost in a thread
                self.errors.append(exc)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(timeout=10)
        self.path.unlink(missing_ok=True)
        self.directory.rmdir()

    def __enter__(self) -> ThreadedUpstream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_all(sock: socket.socket) -> bytes:
    parts = []
    while chunk := sock.recv(1 << 16):
        parts.append(chunk)
    return b"".join(parts)
