"""A real ``memoryd serve`` for loopd's tests: its own config and home in a short temp dir,
started as a process, stopped with SIGTERM (SIGKILL if it lingers). ``write`` sends a decided
``memory`` call over memory.sock exactly as brokerd does after its built-in policy said auto."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import memory as wire
from bxcore.tools import ToolRequest

MEMORYD = Path(sys.executable).with_name("memoryd")
START_WAIT = 120.0  # a bound on a busy machine, not a measurement


class Memoryd:
    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.socket = root / "run" / "memory.sock"
        self.config = root / "memoryd.toml"
        self.config.write_text(f'[paths]\nhome = "{self.home}"\nrun = "{root / "run"}"\n')
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.root / "memoryd.log").open("ab")
        self.process = subprocess.Popen(
            [str(MEMORYD), "serve", "--config", str(self.config)], stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"},
        )
        deadline = time.monotonic() + START_WAIT
        while not self.socket.is_socket():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memoryd did not start:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log(self) -> str:
        path = self.root / "memoryd.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def write(self, session: str, arguments: dict[str, object]) -> str:
        """A ``memory`` tool call as brokerd sends it; returns the answer's text."""
        return self.call(session, "memory", arguments)

    def recall(self, session: str, query: str) -> str:
        return self.call(session, "recall", {"query": query})

    def call(self, session: str, tool: str, arguments: dict[str, object]) -> str:
        """A memory tool call as brokerd sends it once decided; returns the answer's text."""
        request = ToolRequest(session=session, call=1, tool=tool,
                              arguments=json.dumps(arguments))
        body = wire.MemoryCall.model_validate(
            {"request": request, "class": "public", "untrusted": False})
        with contextlib.closing(SyncFrameSocket.connect(self.socket, wire.FROM_MEMORYD)) as sock:
            sock.write(Frame.of(wire.MEMORY_CALL, body, final=True))
            answer = sock.read(timeout=30)
        assert answer.kind == wire.TOOL_RESPONSE and answer.body["status"] == "ok", answer
        return str(answer.body["content"])


@contextlib.contextmanager
def running_memoryd(root: Path) -> Iterator[Memoryd]:
    memoryd = Memoryd(root)
    memoryd.start()
    try:
        yield memoryd
    finally:
        memoryd.stop()
