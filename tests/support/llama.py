"""A real llama-server for tests: started, health-checked and stopped by the test, never shared
with anything outside it.

    from support.llama import nonce    # the fixtures come from tests/conftest.py

    def test_something(llama_router):               # session-scoped router, presets loaded
        response = llama_router.post("/v1/chat/completions", {...})

What it does:

- ``llama_paths()`` runs ``scripts/llama-server.sh all`` once per test session: it builds
  llama-server (or waits for a build in progress, or finds the cached binary) and fetches the
  hash-pinned models. If that fails, real-server tests are SKIPPED with the script's own error,
  never failed and never silently passed.
- ``start_router()`` runs router mode with ``serving/presets.ini`` (coder, qwen-tools,
  qwen-think, smol; a model loads on its first request, so tests that never name coder never
  load it); ``start_single()`` runs one model. Either listens on ``llama.sock`` in a fresh short
  temp dir (a stale socket file is removed first: llama-server leaves it behind and then cannot
  bind), with ``models/`` and ``templates/`` symlinked beside it, as the presets expect.
- Stopping sends SIGTERM to the server, waits, then SIGKILLs whatever is left of its process
  group: a router's children (one llama-server per loaded model) are in that group.
- ``nonce()`` makes a prompt unique: the server's host-RAM prompt cache serves a prompt seen in
  an earlier request or test run, which would hide a cache miss a test wants to see.
- ``unload_model()`` unloads a router model and waits until the router reports it unloaded.
- ``proxied()`` puts a real inferproxy in front of a server's socket, as loopd reaches it.

Waits here are bounded (a server that never gets healthy fails the test with its log), but no
test measures time with them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from loopd.inference.client import KEEPALIVE_EXPIRY, closed_before_answering

from support.inferproxy import start_proxy, write_config

REPO = Path(__file__).resolve().parents[2]
SERVING = REPO / "serving"
PRESETS = SERVING / "presets.ini"
TEMPLATES = SERVING / "templates"
CODER = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"  # the `coder` preset; too slow for tests
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTER_MODELS = ("qwen-tools", "qwen-think", "smol")
READY_WAIT = 300.0  # bound on waiting for /health or a model state; generous for a busy box
STOP_WAIT = 20.0


class LlamaUnavailable(Exception):
    """scripts/llama-server.sh could not provide the binary or the models."""


@functools.cache
def llama_paths() -> tuple[Path, Path]:
    """(llama-server binary, models directory), built and fetched once per session."""
    script = REPO / "scripts" / "llama-server.sh"
    result = subprocess.run([str(script), "all"], capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or len(lines) < 2:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise LlamaUnavailable(f"scripts/llama-server.sh all failed ({result.returncode}): {tail}")
    binary, models = Path(lines[-2]), Path(lines[-1])
    if not os.access(binary, os.X_OK) or not models.is_dir():
        raise LlamaUnavailable(f"scripts/llama-server.sh printed unusable paths: {lines[-2:]}")
    return binary, models


def require_llama() -> tuple[Path, Path]:
    try:
        return llama_paths()
    except LlamaUnavailable as exc:
        pytest.skip(f"real llama-server unavailable: {exc}")


def nonce() -> str:
    """A random marker to put at the very start of a system prompt."""
    return f"[run {secrets.token_hex(6)}]"


class LlamaServer:
    """One llama-server process on a Unix socket in its own directory."""

    def __init__(self, args: list[str], directory: Path):
        self.args = args
        self.directory = directory
        self.socket = directory / "llama.sock"
        self.log_path = directory / "llama.log"
        self.process: subprocess.Popen[bytes] | None = None
        # The pool gives up idle connections well before the server's Keep-Alive timeout, as
        # loopd's does: with equal limits a request can go out on a connection the server is
        # closing ("Server disconnected without sending a response").
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(
                uds=str(self.socket), limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY)),
            base_url="http://llama",
            timeout=httpx.Timeout(READY_WAIT),
        )

    def start(self) -> None:
        binary, _ = llama_paths()
        self.socket.unlink(missing_ok=True)  # a stale file makes the bind fail
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(binary), *self.args, "--host", str(self.socket), "--no-ui"],
                cwd=self.directory,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + READY_WAIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.TransportError):
                if self._http.get("/health").status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"llama-server not healthy after {READY_WAIT:g} s:\n{self.log()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL the whole process group (the router's children too)."""
        self._http.close()
        process = self.process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_WAIT)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.socket.unlink(missing_ok=True)

    def log(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def get(self, path: str, **params: str) -> httpx.Response:
        return self._http.get(path, params=params)

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """A POST, sent once more when the pooled connection was closed before any answer
        (the server's idle close racing the pool's reuse), as loopd's own client does."""
        try:
            return self._http.post(path, json=body)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if not closed_before_answering(exc):
                raise
            return self._http.post(path, json=body)

    def model_status(self, model: str) -> str:
        for entry in self.get("/models").json()["data"]:
            if entry["id"] == model:
                return entry["status"]["value"]
        raise KeyError(f"the router has no model {model!r}")

    def wait_for_status(self, model: str, status: str) -> None:
        deadline = time.monotonic() + READY_WAIT
        while (now := self.model_status(model)) != status:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{model} is {now}, not {status}:\n{self.log()}")
            time.sleep(0.1)


def unload_model(server: LlamaServer, model: str) -> None:
    """Unload a router model (its KV cache goes with it) and wait until it is unloaded."""
    response = server.post("/models/unload", {"model": model})
    if response.status_code != 200:
        raise RuntimeError(f"unloading {model}: {response.status_code} {response.text}")
    server.wait_for_status(model, "unloaded")


def _workdir() -> Path:
    """A short temp dir (socket paths must fit 108 bytes) holding models/ and templates/."""
    _, models = llama_paths()
    directory = Path(tempfile.mkdtemp(prefix="bx-llama-"))
    (directory / "models").symlink_to(models)
    (directory / "templates").symlink_to(TEMPLATES)
    return directory


@contextlib.contextmanager
def _running(args: list[str]) -> Iterator[LlamaServer]:
    require_llama()
    directory = _workdir()
    server = LlamaServer(args, directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def start_router(*extra: str) -> contextlib.AbstractContextManager[LlamaServer]:
    """Router mode with serving/presets.ini; models load on their first request."""
    return _running(["--models-preset", str(PRESETS), "--models-max", "3", "--offline", *extra])


def start_single(
    model: str = QWEN, template: str | None = None, *extra: str
) -> contextlib.AbstractContextManager[LlamaServer]:
    """One model, 2 slots of 4096 tokens; ``template`` names a file in serving/templates/. Slots
    are never matched by similarity, as serving/presets.ini has it (loopd's self-test checks it:
    docs/decisions/new-thread-on-the-baseline.md)."""
    args = ["-m", f"models/{model}", "-np", "2", "-c", "8192", "-t", "2", "--jinja",
            "--slot-prompt-similarity", "1"]
    if template is not None:
        args += ["--chat-template-file", f"templates/{template}"]
    return _running([*args, *extra])


@contextlib.contextmanager
def proxied(upstream: Path) -> Iterator[Path]:
    """A real inferproxy forwarding a new socket to the Unix socket ``upstream`` (a server's
    ``.socket``); yields the proxy's socket path."""
    directory = Path(tempfile.mkdtemp(prefix="bx-proxy-"))
    log = directory / "inferproxy.log"
    process = start_proxy(write_config(directory, f"unix:{upstream}"), log=log)
    try:
        deadline = time.monotonic() + READY_WAIT
        while not (directory / "infer.sock").is_socket():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"inferproxy did not start: {log.read_text()!r}")
            time.sleep(0.05)
        yield directory / "infer.sock"
    finally:
        process.terminate()
        process.wait(timeout=STOP_WAIT)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def llama_router() -> Iterator[LlamaServer]:
    """The session's router (presets: coder, qwen-tools, qwen-think, smol)."""
    with start_router() as server:
        yield server


@pytest.fixture(scope="session")
def llama_router_proxy(llama_router: LlamaServer) -> Iterator[Path]:
    """inferproxy's socket in front of the session's router."""
    with proxied(llama_router.socket) as path:
        yield path
