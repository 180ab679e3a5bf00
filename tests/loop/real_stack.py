"""The real stack for loopd's end-to-end tests: llama-server on an ephemeral loopback TCP port
(the tiny Qwen with the bare-JSON tool template), a real inferproxy in front of it, and
``loopd serve`` in its own network namespace (``unshare -n``: only a loopback of its own), so it
can reach the model only through inferproxy's socket. Every process is stopped by the test.

``real_stack()`` sets it all up in one temp directory and yields a ``RealStack``: start loopd
with ``stack.loopd()`` (again, for a restart), take turns with ``stack.say(...)`` as the owner
would (``bxctl chat --say``), read a session's records with ``stack.records(...)``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from loopd.log import Record
from loopd.store import SessionStore
from support.fake_tools import FakeBroker, loop_section
from support.llama import QWEN, READY_WAIT, STOP_WAIT, TEMPLATES, llama_paths, require_llama

BIN = Path(sys.executable).parent  # the venv's console scripts: loopd, bxctl


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_WAIT)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _wait(ready, process: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + READY_WAIT
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{what} did not start (exit {process.poll()}):\n{text}")
        time.sleep(0.1)


@contextlib.contextmanager
def tcp_llama(directory: Path) -> Iterator[int]:
    """llama-server with the Qwen model on 127.0.0.1:<ephemeral port>; yields the port."""
    require_llama()
    binary, models = llama_paths()
    (directory / "models").symlink_to(models)
    (directory / "templates").symlink_to(TEMPLATES)
    port = free_port()
    log = directory / "llama.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(binary), "-m", f"models/{QWEN}", "--chat-template-file",
             "templates/qwen2.5-bare-json-tools.jinja", "-np", "2", "-c", "8192", "-t", "2",
             "--jinja", "--no-ui", "--host", "127.0.0.1", "--port", str(port),
             "--slot-prompt-similarity", "1"],  # as serving/presets.ini: loopd's self-test
            cwd=directory, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        def healthy() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
            return False

        _wait(healthy, process, "llama-server", log)
        yield port
    finally:
        _stop(process)


@contextlib.contextmanager
def inferproxy(directory: Path, port: int) -> Iterator[Path]:
    sock = directory / "infer.sock"
    config = directory / "inferproxy.toml"
    config.write_text(f'[inferproxy]\nsocket = "{sock}"\nupstream = "tcp://127.0.0.1:{port}"\n')
    log = directory / "inferproxy.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "inferproxy", "serve", "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        _wait(sock.is_socket, process, "inferproxy", log)
        yield sock
    finally:
        _stop(process)


def loopd_config(directory: Path, infer_sock: Path) -> Path:
    """Greedy sampling, so the tiny model answers the same way on every run."""
    path = directory / "config.toml"
    path.write_text(
        f'[paths]\nhome = "{directory}/home"\nrun = "{directory}/run"\n'
        f'[inferproxy]\nsocket = "{infer_sock}"\n'
        f'[inference]\nmax_tokens = 64\nliveness_timeout = 600.0\n'
        f'[inference.sampling]\ntemperature = 0.0\n'
        + loop_section(directory)  # no brokerd in this stack: FakeBroker's clock and echo
    )
    return path


@contextlib.contextmanager
def isolated_loopd(config: Path, loop_sock: Path, log: Path, attempts: int = 3) -> Iterator[int]:
    """``loopd serve`` in a new network namespace; yields its pid once loop.sock is bound.

    A loopd whose self-test fails is started again, as systemd's Restart=on-failure would:
    under load the self-test's GET /props through inferproxy sometimes meets "Server
    disconnected" (a keep-alive race outside loopd's turn loop); the log keeps every attempt."""
    for attempt in range(attempts):
        with log.open("ab") as out:
            process = subprocess.Popen(
                ["unshare", "-n", "--", str(BIN / "loopd"), "serve", "--config", str(config)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            _wait(lambda p=process: loop_sock.is_socket() or p.poll() is not None, process,
                  "loopd", log)
            if process.poll() is None:
                break
        except BaseException:
            _stop(process)
            raise
        if attempt + 1 == attempts:
            raise RuntimeError(f"loopd did not start in {attempts} attempts:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
    try:
        yield process.pid  # unshare execs loopd: the same process
    finally:
        _stop(process)


def tcp_reachable_from(pid: int | None, port: int) -> str:
    """Try 127.0.0.1:<port> from the network namespace of ``pid`` (None: from here)."""
    probe = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 5)"
             ".close()\n    print('connected')\nexcept OSError as exc:\n"
             "    print(type(exc).__name__)\n")
    command = [sys.executable, "-c", probe]
    if pid is not None:
        command = ["nsenter", "-t", str(pid), "-n", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="bx-loop-"))  # short: socket paths fit 108 bytes


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True)
class RealStack:
    directory: Path
    port: int  # llama-server's TCP port, which loopd cannot reach
    config: Path  # loopd's

    @property
    def loop_sock(self) -> Path:
        return self.directory / "run" / "loop.sock"

    def loopd(self) -> contextlib.AbstractContextManager[int]:
        """``loopd serve``, isolated; yields its pid. Every start logs to one loopd.log."""
        return isolated_loopd(self.config, self.loop_sock, self.directory / "loopd.log")

    def say(self, session: str, text: str, *choices: str) -> str:
        """One ``bxctl chat --say`` turn; ``choices`` are its ``--tool-choice`` values in
        order. Returns the answer; a failed turn fails the test with bxctl's stderr."""
        args = [str(BIN / "bxctl"), "chat", "--socket", str(self.loop_sock), "--session",
                session]
        for choice in choices:
            args += ["--tool-choice", choice]
        result = subprocess.run([*args, "--say", text], capture_output=True, text=True,
                                timeout=1800, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def records(self, session: str) -> tuple[Record, ...]:
        return SessionStore(self.directory / "home").open(session).records


@contextlib.contextmanager
def real_stack() -> Iterator[RealStack]:
    """llama-server and inferproxy running, loopd's config written; all removed after."""
    directory = workdir()
    try:
        with tcp_llama(directory) as port, inferproxy(directory, port) as infer_sock, \
                FakeBroker(directory / "run" / "broker.sock").in_thread():
            yield RealStack(directory, port, loopd_config(directory, infer_sock))
    finally:
        remove(directory)
