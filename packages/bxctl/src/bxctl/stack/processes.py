"""Start, watch and stop the local stack's processes; remember them in ``stack.json``.

Every daemon starts in its own session (so a Ctrl-C at the terminal reaches bxctl, which stops
them in order) with its output in ``logs/<name>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bxcore.util import write_durably


@dataclass(frozen=True)
class Started:
    name: str
    pid: int
    argv: list[str]
    socket: str | None  # the socket it serves, removed when it stops


def spawn(
    name: str, argv: list[str], logs: Path, env: dict[str, str], cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{name}.log").open("ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists"; reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return not _exited(pid)


def _exited(pid: int) -> bool:
    """A zombie another process has yet to reap: once ``bxctl up`` has exited, its daemons are
    init's children, and an init that reaps on a timer (not systemd) left each stopped daemon
    "existing" for up to 2 s, so ``down`` waited that long for each."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True  # reaped since the signal found it
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")  # the state, after the name


def stop(started: list[Started], grace: float = 10.0) -> list[str]:
    """SIGTERM in reverse start order, SIGKILL after ``grace``; remove sockets. Returns what
    had to be killed."""
    killed = []
    for proc in reversed(started):
        if alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                killed.append(proc.name)
                while alive(proc.pid):
                    time.sleep(0.05)
        if proc.socket:
            Path(proc.socket).unlink(missing_ok=True)
    return killed


def save(path: Path, started: list[Started]) -> None:
    data = json.dumps([asdict(s) for s in started], indent=1).encode()
    write_durably(path, data)


def load(path: Path) -> list[Started]:
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    return [Started(**row) for row in rows]
