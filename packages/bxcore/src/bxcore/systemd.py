"""systemd's notifications for every role (READY=1, STATUS=, STOPPING=1, WATCHDOG=1): each a
no-op when the process was not started with a NOTIFY_SOCKET. bxcore.daemon re-exports them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

import sdnotify  # type: ignore[import-untyped]


class Notifier:
    """sd_notify messages (READY=1, STATUS=, STOPPING=1, WATCHDOG=1); each is a no-op when the
    process was not started with a NOTIFY_SOCKET."""

    def __init__(self, send: Callable[[str], None] | None = None):
        self._send = send or sdnotify.SystemdNotifier().notify

    def ready(self, status: str | None = None) -> None:
        self._send("READY=1" if status is None else f"READY=1\nSTATUS={_one_line(status)}")

    def status(self, text: str) -> None:
        self._send(f"STATUS={_one_line(text)}")

    def stopping(self, status: str | None = None) -> None:
        self._send("STOPPING=1" if status is None else f"STOPPING=1\nSTATUS={_one_line(status)}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    async def keep_watchdog(self, environ: Mapping[str, str] | None = None) -> None:
        """Send WATCHDOG=1 at half the interval systemd asks for, until cancelled; returns at
        once when systemd asks for none (no WATCHDOG_USEC, or one meant for another pid)."""
        interval = watchdog_interval(os.environ if environ is None else environ)
        if interval is None:
            return
        while True:
            self.watchdog()
            await asyncio.sleep(interval / 2)


def watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """Seconds of systemd's watchdog (WATCHDOG_USEC), if it is meant for this process."""
    usec = environ.get("WATCHDOG_USEC", "")
    pid = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 1_000_000


def _one_line(text: str) -> str:
    # A newline would start another assignment in the notification.
    return " ".join(text.splitlines())


__all__ = ["Notifier", "watchdog_interval"]
