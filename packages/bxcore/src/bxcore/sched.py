"""A shorter CPU time slice for a process that mostly sleeps and must wake at once.

inferproxy wakes for every chunk of a stream while llama-server's threads keep every core busy.
Linux's EEVDF scheduler (6.6 and later) gives a woken task a deadline one slice ahead, so a task
asking for a short slice preempts the running ones as soon as it wakes, where the default slice
(about 1.4 ms here) let it wait behind them. Since 6.12 an unprivileged process may set its own
slice with ``sched_setattr(2)`` (``sched_runtime``, from 0.1 ms to 100 ms). It costs the others
nothing but more frequent switches while this process runs, which is rarely.

Only ``sched_setattr`` itself is I/O here; an older kernel, a seccomp filter that refuses the call
or another architecture leave the default slice and say why.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# sched_setattr's number by architecture (it is not in Python's os module)
_SYSCALL = {"x86_64": 314, "aarch64": 274}
SCHED_OTHER = 0
SHORTEST_SLICE_NS = 100_000  # the kernel's lower bound for a custom slice


def sched_attr(slice_ns: int, nice: int) -> bytes:
    """``struct sched_attr`` (its first version, 48 bytes): SCHED_OTHER at ``nice`` with
    ``slice_ns`` as its slice."""
    # size, policy, flags, nice, priority, runtime, deadline, period
    return struct.pack("=IIQiIQQQ", 48, SCHED_OTHER, 0, nice, 0, slice_ns, 0, 0)


def request_slice(slice_ns: int = SHORTEST_SLICE_NS) -> str | None:
    """Ask for ``slice_ns`` for the calling thread (threads started after inherit it). None if
    granted, else why not (the process runs on with the default slice)."""
    number = _SYSCALL.get(platform.machine())
    if number is None:
        return f"no sched_setattr number known for {platform.machine()}"
    attr = ctypes.create_string_buffer(sched_attr(slice_ns, os.getpriority(os.PRIO_PROCESS, 0)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, 0, attr, 0) != 0:
        errno = ctypes.get_errno()
        return f"sched_setattr refused: {os.strerror(errno)}"
    return None


def current_slice_ns(pid: int | str = "self") -> int | None:
    """The slice the scheduler gives ``pid`` (``se.slice`` in /proc/<pid>/sched), if shown."""
    try:
        text = open(f"/proc/{pid}/sched").read()  # noqa: SIM115 - one read
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "se.slice":
            return int(value.strip())
    return None
