"""A real ``brokerd serve`` for the flow attacks (bubblewrap as root or as an unprivileged uid, or
podman through its service as root),
and its callers: every call goes through broker.sock from a forked child running as brokerd's
own uid (broker.sock admits only that uid), and the owner's commands run as that uid too.

    with LabelRig(top, unprivileged=False) as rig:
        work = rig.directory("work")
        rig.grant("copy", tools=["shell.run"], result_class="secret", mounts=[(work, True)])
        answer = rig.call("s1", "shell.run", {"argv": [...], "cwd": str(work)})
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from bxcore.config.broker import DEFAULT_SANDBOX_UID
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import broker as broker_wire
from bxcore.tools import ToolRequest

from .calls import REPO, UNPRIVILEGED_UID

WAIT = 600.0  # a guard against a brokerd that never answers, not a speed limit


@dataclass(frozen=True)
class Pending:
    pid: int
    fd: int  # the pipe the answer comes on

    def running(self) -> bool:
        return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def _call_as(uid: int, broker_socket: Path, request: ToolRequest, out: int) -> NoReturn:
    """In a forked child: become ``uid``, make the call, write its final frame's body (or why
    there is none) to ``out``, and exit."""
    code = 1
    try:
        if uid != os.geteuid():
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        with SyncFrameSocket.connect(broker_socket, broker_wire.FROM_BROKERD,
                                     timeout=WAIT) as conn:
            conn.write(Frame.of(broker_wire.TOOL_CALL, request, final=True))
            while not (frame := conn.read(timeout=WAIT)).final:
                pass
        data = json.dumps(dict(frame.body)).encode()
        code = 0 if frame.kind == broker_wire.TOOL_RESPONSE else 1
    except BaseException as exc:
        data = repr(exc).encode()
    finally:
        with contextlib.suppress(BaseException):
            os.write(out, data)  # small: one pipe buffer holds it
        os._exit(code)


@dataclass(frozen=True)
class Answer:
    status: str
    content: str
    data_class: str
    untrusted: bool


class LabelRig:
    def __init__(self, top: Path, *, unprivileged: bool, backend: str = "",
                 env: dict[str, str] | None = None):
        """``backend``: more ``[broker]`` lines (podman's); bubblewrap when empty. ``env``:
        more of brokerd's environment (a local podman's storage)."""
        self.top = top
        self._env = env or {}
        self.uid = UNPRIVILEGED_UID if unprivileged else os.geteuid()
        self.tool_uid = UNPRIVILEGED_UID if unprivileged else DEFAULT_SANDBOX_UID
        os.chmod(top, 0o755)
        for name in ("home", "run", "grants"):
            self._owned(top / name)
        self.home = top / "home"
        self.config = top / "config.toml"
        self.config.write_text(
            f"[paths]\nhome = {json.dumps(str(self.home))}\n"
            f"run = {json.dumps(str(top / 'run'))}\n"
            f"[broker]\ngrants = {json.dumps(str(top / 'grants'))}\n"
            f"toolkit_dir = {json.dumps(str(REPO / 'packages/toolkit/src/toolkit'))}\n"
            f"scratch = {json.dumps(str(self._owned(top / 'scratch')))}\n{backend}")
        self._daemon: subprocess.Popen[bytes] | None = None
        self._calls = 0

    def _owned(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.uid)
        return path

    def directory(self, name: str) -> Path:
        """A directory a grant may mount, writable by the tools' uid."""
        path = self.top / "data" / name
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.top / "data", 0o755)
        if os.geteuid() == 0:
            for each in (path, *path.rglob("*")):
                os.chown(each, self.tool_uid, self.tool_uid)
        return path

    def grant(self, name: str, *, tools: list[str], result_class: str,
              mounts: list[tuple[Path, bool]], argument: tuple[str, str],
              hosts: tuple[str, ...] = ()) -> None:
        """An auto grant for any session; ``argument`` (name, glob) tells grants apart."""
        entries = ", ".join(f"{{ path = {json.dumps(str(p))}, write = {str(w).lower()} }}"
                            for p, w in mounts)
        (self.top / "grants" / f"{name}.toml").write_text(
            f"tools = {json.dumps(tools)}\nmode = \"auto\"\n"
            'classes = ["public", "private", "secret"]\n'
            f"result_class = {json.dumps(result_class)}\nallow_untrusted = true\n"
            f"[arguments.{argument[0]}]\npaths = [{json.dumps(argument[1])}]\n"
            f"[sandbox]\nmounts = [{entries}]\nhosts = {json.dumps(list(hosts))}\n")

    # --- processes as brokerd's uid -------------------------------------------------------

    def _python(self) -> tuple[list[str], dict[str, str]]:
        if self.uid == os.geteuid():
            return [sys.executable], {**os.environ, **self._env}
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        path = [REPO / "packages" / p / "src" for p in ("brokerd", "bxcore", "toolkit")]
        path += [REPO / "tests", REPO / ".venv" / "lib" / version / "site-packages"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home),
               "PYTHONPATH": os.pathsep.join(map(str, path)), **self._env}
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                "--", "/usr/bin/python3"], env

    def brokerd(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``brokerd <args> --config <ours>``, as brokerd's uid."""
        python, env = self._python()
        return subprocess.run([*python, "-m", "brokerd.cli", *args, "--config", str(self.config)],
                              capture_output=True, text=True, env=env, cwd="/", timeout=WAIT,
                              check=False)

    def start(self) -> None:
        notify_path = self.top / "notify.sock"
        notify_path.unlink(missing_ok=True)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(notify_path))
        os.chmod(notify_path, 0o777)
        notify.settimeout(WAIT)
        python, env = self._python()
        self._daemon = subprocess.Popen(
            [*python, "-m", "brokerd.cli", "serve", "--config", str(self.config)],
            env={**env, "NOTIFY_SOCKET": str(notify_path)}, cwd="/",
            stderr=(self.top / "brokerd.log").open("ab"))
        try:
            assert b"READY=1" in notify.recv(4096), "brokerd did not say READY"
        finally:
            notify.close()

    def stop(self) -> None:
        if self._daemon is not None:
            self._daemon.terminate()
            self._daemon.wait(timeout=WAIT)
            self._daemon = None

    def kill(self, pending: Pending) -> None:
        """SIGKILL brokerd while ``pending`` runs; its caller is reaped (its answer is lost)."""
        assert self._daemon is not None
        os.kill(self._daemon.pid, signal.SIGKILL)
        self._daemon.wait(timeout=WAIT)
        self._daemon = None
        os.waitpid(pending.pid, 0)
        os.close(pending.fd)

    def __enter__(self) -> LabelRig:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- calls ----------------------------------------------------------------------------

    def begin(self, session: str, tool: str, arguments: dict[str, object]) -> Pending:
        """Start one call from a forked child running as brokerd's uid; ``end`` waits for it."""
        self._calls += 1
        request = ToolRequest(session=session, call=self._calls, tool=tool,
                              arguments=json.dumps(arguments))
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no return from here
            os.close(read_end)
            _call_as(self.uid, self.top / "run" / "broker.sock", request, write_end)
        os.close(write_end)
        return Pending(pid, read_end)

    @staticmethod
    def end(pending: Pending) -> Answer:
        with os.fdopen(pending.fd, "rb") as answer:
            data = answer.read()
        _pid, status = os.waitpid(pending.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, data.decode(errors="replace")
        body = json.loads(data)
        return Answer(body["status"], body["content"], body["class"], body["untrusted"])

    def call(self, session: str, tool: str, arguments: dict[str, object]) -> Answer:
        return self.end(self.begin(session, tool, arguments))

    def shell(self, session: str, script: str, cwd: Path) -> Answer:
        return self.call(session, "shell.run", {"argv": ["sh", "-c", script], "cwd": str(cwd)})

    def results(self) -> list[dict[str, object]]:
        """Every result record in the audit log, as JSON."""
        return [json.loads(line) for path in sorted((self.home / "audit").glob("*.jsonl"))
                for line in path.read_text().splitlines() if '"kind":"result"' in line]
