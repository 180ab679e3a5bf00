"""When a sandbox is gone: no process of its PID namespace is left.

A call ends for brokerd (its write period, its place among the running calls, its labels) only
once its sandbox is gone, and reaping the process brokerd started does not say so: bwrap's
monitor exits as soon as the sandbox's first process reports its status, a killed sandbox dies
after its bwrap, and a process in an uninterruptible system call (a truncate of a fragmented
file: seconds) finishes that call first, changing a file's metadata or holding a lock a later
call sees (attack 31m). A sandbox's PID 1 is the one process that cannot end before the others:
when it exits, the kernel kills every process in its namespace and waits until each has been
reaped (``zap_pid_ns_processes``, before PID 1's own exit state is set), and a pidfd on it
becomes readable only then. brokerd holds that pidfd before the tool runs, records the pid in
the call's workspace for a brokerd that restarts after being killed, and when the call ends
kills PID 1 through it and waits, without giving up, until it is readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import time
from pathlib import Path

log = logging.getLogger("brokerd.sandbox")
WARN_EVERY_S = 10.0  # a sandbox that takes this long to empty is logged, and again after each
LEFTOVER_WAIT_S = 60.0  # at start, for a killed brokerd's sandboxes to empty; else no start
RECORD = "sandbox-init"  # in the call's workspace: PID 1's host pid


def child_pid(status_line: bytes) -> int | None:
    """The pid of the sandbox's PID 1 in bwrap's first ``--json-status-fd`` line, or None."""
    try:
        status = json.loads(status_line)
    except ValueError:
        return None
    pid = status.get("child-pid") if isinstance(status, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def is_namespace_init(status_text: str) -> bool:
    """``/proc/PID/status`` says the process is PID 1 of a namespace below the reader's."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            pids = line.split()[1:]
            return len(pids) >= 2 and pids[-1] == "1"
    return False


class NamespaceInit:
    """A pidfd on a sandbox's PID 1: readable once every process of its namespace is gone."""

    def __init__(self, pid: int, pidfd: int):
        self.pid = pid
        self._pidfd = pidfd

    @classmethod
    def find(cls, pid: int) -> NamespaceInit | None:
        """A hold on ``pid`` if it is a namespace's PID 1 still running; None once it is gone.
        /proc is read after the pidfd is opened, and counts only while the pidfd's process has
        not exited: so it describes that process, not one that took a freed pid since."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
        except OSError:
            status = ""
        if not is_namespace_init(status) or _readable(pidfd, 0):
            os.close(pidfd)
            return None
        return cls(pid, pidfd)

    @classmethod
    def recorded(cls, workspace: Path) -> NamespaceInit | None:
        """The PID 1 recorded in a call workspace a killed brokerd left, if it still runs: a
        process under that pid that started after the record was written is another one."""
        try:
            record = workspace / RECORD
            text = record.read_text(encoding="ascii").strip()
            written = record.stat().st_mtime
        except (OSError, UnicodeDecodeError):
            return None
        init = cls.find(int(text)) if text.isdigit() else None
        if init is not None and _started(init.pid) > written + 1:  # btime: whole seconds
            init.close()
            return None
        return init

    def record(self, workspace: Path) -> None:
        (workspace / RECORD).write_text(f"{self.pid}\n", encoding="ascii")

    def end(self) -> None:
        """Kill PID 1, which takes its namespace with it. The call is over: nothing of its
        sandbox runs on, even where the tool told PID 1 not to die with bwrap (an unprivileged
        tool may ptrace it, or write its memory: attack 31n, F4)."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    async def gone(self, what: str) -> None:
        """Kill PID 1 and return once the namespace is empty, however long that takes: logged
        every WARN_EVERY_S meanwhile, never given up (the call stays running until then)."""
        self.end()
        waited = 0.0
        try:
            while True:
                try:
                    await asyncio.wait_for(readable(self._pidfd), WARN_EVERY_S)
                    return
                except TimeoutError:
                    waited += WARN_EVERY_S
                    log.warning("%s: a process of its sandbox (PID 1 is host pid %d) is still "
                                "there %.0f s after the tool ended; the call counts as running "
                                "until it is gone", what, self.pid, waited)
        finally:
            self.close()

    def gone_within(self, seconds: float) -> bool:
        """Kill PID 1 and wait at most ``seconds`` for the namespace to empty (at start, before
        any call)."""
        self.end()
        try:
            return _readable(self._pidfd, seconds)
        finally:
            self.close()

    def close(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def _started(pid: int) -> float:
    """When ``pid`` started, in seconds since the epoch (now if /proc cannot say)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration):
        return time.time()
    return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")


async def readable(fd: int) -> None:
    """Return once ``fd`` is readable, without blocking the event loop."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def mark() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, mark)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def _readable(pidfd: int, seconds: float) -> bool:
    poll = select.poll()  # not select(): brokerd's descriptors may be past 1023
    poll.register(pidfd, select.POLLIN)
    return bool(poll.poll(seconds * 1000))
