"""The harness's daemons as real processes for the fault suite, started the local stack's way.

Reuses ``bxctl.stack``'s pieces (``spawn``, ``stop``, ``NotifyListener``, the network isolation
probe): each role runs ``<role> serve --config``, in its own process group, and is ready when
it sends READY=1. The model is whatever listens on ``model.sock`` (the scripted model, or a
fault proxy in front of the real llama-server). Unlike ``bxctl up`` a role can be killed and
started again, which is the point of this suite.

    with FaultStack(tmp_path, model_socket) as stack:
        done = stack.turn("s1", "hello", resume=False)
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bxcore.canonical import canonical_text
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.memory_tool import MEMORY_TOOL_SCHEMAS
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn
from bxctl.stack.local import network_isolation
from bxctl.stack.notify import NotifyListener
from bxctl.stack.processes import Started, alive, spawn, stop

BIN = Path(sys.executable).parent
ROLES = ("inferproxy", "memoryd", "brokerd", "loopd")
SOCKETS = {"inferproxy": "infer", "memoryd": "memory", "brokerd": "broker", "loopd": "loop",
           "gatewayd": "gateway"}
READY_WAIT = 120.0
TURN_WAIT = 120.0


def q(value: object) -> str:
    return canonical_text(str(value))


def registry_file(path: Path) -> Path:
    """The toolkit's schemas plus memoryd's tools: everything the model may reach."""
    import subprocess

    subprocess.run([str(BIN / "bx-tool"), "schemas", "--out", str(path)], check=True)
    schemas = json.loads(path.read_text())
    schemas += [schema.model_dump(mode="json") for schema in MEMORY_TOOL_SCHEMAS]
    path.write_text(json.dumps(schemas))
    return path


INFERENCE = {"model": "fake", "retries": 2, "retry_backoff": 0.05, "liveness_timeout": 5,
             "first_byte_timeout": 10, "waiting_notice": 1}


def render_config(root: Path, model_socket: Path, grants: Path, extra: str = "",
                  inference: dict[str, object] | None = None,
                  approval_timeout: float = 5.0, approvers: tuple[str, ...] = ()) -> str:
    """``approvers``: who may answer an ask call besides the local user (Mattermost ids)."""
    settings = {**INFERENCE, **(inference or {})}
    inference_lines = "\n".join(f"{key} = {json.dumps(value)}" for key, value in settings.items())
    return f"""[paths]
home = {q(root / "home")}
run = {q(root / "run")}

[inferproxy]
upstream = {q("unix:" + str(model_socket))}
mode = 384

[inference]
{inference_lines}

[inference.serving]
slot_count = 2
per_slot_context = 4096

[loop]
tools = "broker"
registry = {q(root / "registry.json")}

[broker]
grants = {q(grants)}
approvers = [{", ".join(q(a) for a in (f"local:{os.getuid()}", *approvers))}]
backend = "bubblewrap"
approval_timeout = {approval_timeout}
{extra}"""


class FaultStack:
    def __init__(self, root: Path, model_socket: Path, *, roles: tuple[str, ...] = ROLES,
                 extra_config: str = "", env: dict[str, str] | None = None,
                 inference: dict[str, object] | None = None, approval_timeout: float = 5.0,
                 approvers: tuple[str, ...] = (),
                 tracer: Callable[[str], list[str]] | None = None):
        self.root = root
        self.roles = roles
        self.grants = root / "grants"
        self.logs = root / "logs"
        self.config = root / "config.toml"
        for directory in (root / "home", root / "run", self.grants, self.logs):
            directory.mkdir(parents=True, exist_ok=True)
        registry_file(root / "registry.json")
        self._render = functools.partial(render_config, root, model_socket, self.grants,
                                         extra_config, approval_timeout=approval_timeout,
                                         approvers=approvers)
        self.config.write_text(self._render(inference=inference))
        self.env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET",)}
        self.env.update(env or {})
        self.tracer = tracer  # a command prefix per role, e.g. strace's (the egress test)
        self.running: dict[str, Started] = {}
        self._listener = NotifyListener(root / "run" / "notify.sock")

    @property
    def home(self) -> Path:
        return self.root / "home"

    def socket(self, role: str) -> Path:
        return self.root / "run" / f"{SOCKETS[role]}.sock"

    def __enter__(self) -> FaultStack:
        try:
            for role in self.roles:
                self.start(role)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        stop(list(self.running.values()), grace=10.0)
        self.running.clear()
        self._listener.close()

    def start(self, role: str) -> Started:
        prefix = network_isolation() if role == "loopd" else []
        traced = self.tracer(role) if self.tracer else []
        argv = [*traced, *prefix, str(BIN / role), "serve", "--config", str(self.config)]
        env = {**self.env, "NOTIFY_SOCKET": str(self._listener.path)}
        proc = spawn(role, argv, self.logs, env)
        started = Started(role, proc.pid, argv, str(self.socket(role)))
        self.running[role] = started
        if self._listener.wait_ready({proc.pid}, READY_WAIT, lambda: proc.poll() is None) is None:
            raise RuntimeError(f"{role} did not get ready:\n{self.log(role)}")
        return started

    def restart(self, role: str, *, inference: dict[str, object]) -> Started:
        """Stop ``role`` and start it again on a config with these ``[inference]`` settings
        (the roles already running keep the config they read)."""
        stop([self.running.pop(role)], grace=10.0)
        self.config.write_text(self._render(inference=inference))
        return self.start(role)

    def kill(self, role: str) -> None:
        """SIGKILL the role's whole process group, as a power cut would, and reap it."""
        started = self.running.pop(role)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started.pid, signal.SIGKILL)
        while alive(started.pid):
            time.sleep(0.01)

    def log(self, role: str) -> str:
        path = self.logs / f"{role}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def turn(self, session: str, content: str, *, resume: bool,
             timeout: float = TURN_WAIT, kind: wire.SessionKind = "main") -> list[Frame]:
        """One turn over loop.sock: every frame loopd sent, the final one last."""
        return list(self.turn_frames(session, content, resume=resume, timeout=timeout,
                                     kind=kind))

    def turn_frames(self, session: str, content: str, *, resume: bool,
                    timeout: float = TURN_WAIT, kind: wire.SessionKind = "main"
                    ) -> Iterator[Frame]:
        body = Turn(session=session, content=content, resume=resume, session_kind=kind)
        with SyncFrameSocket.connect(self.socket("loopd"), wire.FROM_LOOPD,
                                     timeout=timeout) as conn:
            conn.write(Frame.of(wire.TURN, body, final=False))
            while True:
                frame = conn.read(timeout=timeout)
                yield frame
                if frame.final:
                    return


def final(frames: list[Frame]) -> Frame:
    assert frames and frames[-1].final, frames
    return frames[-1]


def body_of(frame: Frame) -> dict[str, Any]:
    return dict(frame.body)


def is_socket_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True
