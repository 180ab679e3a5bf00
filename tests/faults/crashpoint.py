"""Crash points that replay: SIGKILL a running daemon just before its N-th call of one
syscall that changes what is on disk, using strace's own injection (no hook in the product).

A process crash can only leave the disk in a state that some prefix of these calls made, so
"before the N-th write/fsync/rename/..." names every distinct crash state, and the same point
kills at the same place on every run. strace counts per syscall and per thread (its manual:
"accounting of syscalls that are subject to injection is done per syscall and per tracee"), so
a point is (syscall, N) and the first thread to reach its N-th such call is killed, with the
whole process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# What can change a file: data, sync, names. Socket I/O goes through send/recv, not these. A
# file or directory created (openat, mkdir) and then left is the state "before its first write",
# which the write's own point already gives.
DURABLE = ("write", "pwrite64", "writev", "fsync", "fdatasync", "rename", "renameat",
           "renameat2", "unlink", "unlinkat", "ftruncate")
ATTACH_WAIT = 30.0
_CALL = re.compile(r"^(\d+)\s+(\w+)\(")


@dataclass(frozen=True)
class CrashPoint:
    role: str
    syscall: str
    nth: int

    def __str__(self) -> str:
        return f"{self.role}:{self.syscall}:{self.nth}"

    @classmethod
    def parse(cls, text: str) -> CrashPoint:
        """``CRASH_POINT=brokerd:fsync:3`` as printed by a failing trial."""
        role, syscall, nth = text.split(":")
        if syscall not in DURABLE:
            raise ValueError(f"CRASH_POINT {text!r}: {syscall} is not one of {DURABLE}")
        return cls(role, syscall, int(nth))


class Tracer:
    """strace attached to a running process; ``point`` set: kill it there, else only count."""

    def __init__(self, pid: int, out: Path, point: CrashPoint | None = None):
        argv = ["strace", "-f", "-qq", "-e", "signal=none", "-e", f"trace={','.join(DURABLE)}",
                "-o", str(out), "-p", str(pid)]
        if point is not None:
            argv[1:1] = ["-e", f"inject={point.syscall}:signal=KILL:when={point.nth}"]
        self.pid, self.out = pid, out
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self._wait_attached()

    def _wait_attached(self) -> None:
        deadline = time.monotonic() + ATTACH_WAIT
        while not _all_threads_traced(self.pid):
            if self.proc.poll() is not None:
                raise RuntimeError(f"strace -p {self.pid} ended: {self.proc.stderr.read()!r}")
            assert time.monotonic() < deadline, f"strace never attached to {self.pid}"
            time.sleep(0.01)

    def stop(self) -> Counter[tuple[str, str]]:
        """Detach (the tracee, if alive, runs on untraced); the calls seen, per thread."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=ATTACH_WAIT)
        return calls(self.out)


def calls(trace: Path) -> Counter[tuple[str, str]]:
    """(thread id, syscall) -> how many times it was entered, from an ``strace -f -o`` log."""
    seen: Counter[tuple[str, str]] = Counter()
    for line in trace.read_text(errors="replace").splitlines():
        match = _CALL.match(line)
        if match is not None:
            seen[(match.group(1), match.group(2))] += 1
    return seen


def points(role: str, seen: Counter[tuple[str, str]]) -> list[CrashPoint]:
    """Every crash point one counted turn offers: for each syscall, 1..the most any thread made."""
    most: Counter[str] = Counter()
    for (_thread, syscall), count in seen.items():
        most[syscall] = max(most[syscall], count)
    return [CrashPoint(role, syscall, n) for syscall in sorted(most)
            for n in range(1, most[syscall] + 1)]


def alive(pid: int) -> bool:
    """Running (a killed child not yet reaped is a zombie: not alive)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _all_threads_traced(pid: int) -> bool:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for thread in threads:
        try:
            status = Path(f"/proc/{pid}/task/{thread}/status").read_text()
        except FileNotFoundError:
            continue  # it ended meanwhile
        tracer = re.search(r"^TracerPid:\s+(\d+)", status, re.M)
        if tracer is None or tracer.group(1) == "0":
            return False
    return True
