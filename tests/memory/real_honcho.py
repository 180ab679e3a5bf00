"""The real Honcho for memoryd's tests: started once per test session (tests/memory/conftest.py)
from what scripts/honcho-server.sh installed, with bxctl's recipe (bxctl/stack/honcho.py), so
the tests meet the server `bxctl up --honcho` runs.

Each test takes a fresh workspace, so tests share the server without seeing each other's
messages. The API process can be killed and started again (the server down mid-sync) or
paused with SIGSTOP (a server too slow to answer: the request stays in its socket and is
served when it is continued).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from bxctl.stack.honcho import (
    Command,
    HonchoServer,
    HonchoStartError,
    running,
    wait_http,
    wait_postgres,
)
from support.llama import LlamaUnavailable, llama_paths
from support.requires import setup_done

REPO = Path(__file__).resolve().parents[2]
STOP_WAIT = 5.0
WARMUP_WAIT = 900.0  # bound on the warm-up chat: 2.5 min was seen at a load average of 12


def honcho_install() -> Path:
    """What scripts/honcho-server.sh prints (it installs once, then answers in a second)."""
    result = subprocess.run([str(REPO / "scripts" / "honcho-server.sh")], capture_output=True,
                            text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise HonchoStartError(f"scripts/honcho-server.sh failed ({result.returncode}): {tail}")
    return Path(lines[-1])


def unavailable(reason: str) -> None:
    """Skip where setup did not run; fail where it did (it installs all of this)."""
    if setup_done():
        pytest.fail(f"the real Honcho cannot start, but setup ran: {reason}", pytrace=False)
    pytest.skip(f"the real Honcho cannot start: {reason}")


@dataclass
class RealHoncho:
    server: HonchoServer
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_in: float = 0.0  # seconds from nothing to every part answering
    api_starts: list[float] = field(default_factory=list)  # seconds, each API (re)start
    _warmup: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def spawn(self, command: Command) -> subprocess.Popen[bytes]:
        with (self.server.logs / f"{command.name}.log").open("ab") as log:
            process = subprocess.Popen(command.argv, cwd=command.cwd, env=command.env,
                                       stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[command.name] = process
        return process

    def start(self) -> None:
        began = time.monotonic()
        server = self.server
        server.prepare()
        llm, embed = self.spawn(server.llm_command()), self.spawn(server.embed_command())
        postgres = self.spawn(server.postgres_command())
        wait_postgres(server, running(postgres))
        server.migrate()
        self.spawn(server.deriver_command())
        self.start_api()
        for name, process, port in (("honcho-llm", llm, server.ports.llm),
                                    ("honcho-embed", embed, server.ports.embed)):
            wait_http(f"http://127.0.0.1:{port}/health", running(process), name,
                      server.logs / f"{name}.log")
        self.started_in = time.monotonic() - began
        self._warmup = threading.Thread(target=self._warm_dialectic, daemon=True)
        self._warmup.start()

    def _warm_dialectic(self) -> None:
        """One dialectic chat in the background, so the model has read the dialectic's long
        prompt (the same for every workspace but the last words) by the time a test asks: on
        2 busy cores that first read is minutes, then seconds from llama-server's cache. Its
        outcome does not matter; the tests judge their own chats."""
        workspace = "bx-warmup"
        with contextlib.suppress(httpx.HTTPError):
            self.request("POST", "/v3/workspaces", {"id": workspace, "configuration": {
                "reasoning": {"enabled": False}}})
            self.request("POST", f"/v3/workspaces/{workspace}/sessions", {
                "id": "w", "peers": {"owner": {}, "agent": {}}})
            self.request("POST", f"/v3/workspaces/{workspace}/peers/agent/chat",
                         {"query": "Which editor does the owner use?", "target": "owner"},
                         timeout=WARMUP_WAIT)

    def warmed(self) -> None:
        """Wait for the warm-up chat (before the API is stopped or frozen under it)."""
        if self._warmup is not None:
            self._warmup.join(WARMUP_WAIT)

    def start_api(self) -> None:
        began = time.monotonic()
        api = self.spawn(self.server.api_command())
        wait_http(f"{self.url}/health", running(api), "Honcho's API",
                  self.server.logs / "honcho-api.log")
        self.api_starts.append(time.monotonic() - began)

    def kill_api(self) -> None:
        """The server gone at once, mid-request or not (SIGKILL: nothing is flushed)."""
        self.warmed()
        process = self.processes.pop("honcho-api")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_database(self) -> None:
        """PostgreSQL stopped at once (SIGQUIT: its immediate shutdown, as after a crash); the
        API stays up and answers what it cannot do with a 5xx."""
        self.warmed()
        process = self.processes.pop("honcho-postgres")
        os.kill(process.pid, signal.SIGQUIT)
        process.wait(timeout=STOP_WAIT)

    def start_database(self) -> None:
        postgres = self.spawn(self.server.postgres_command())
        wait_postgres(self.server, running(postgres))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The API frozen (SIGSTOP) inside the block: a request sent now waits in its socket
        and is served when the block ends."""
        self.warmed()
        process = self.processes["honcho-api"]
        os.killpg(process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Every process asked to stop at once; what is still running after STOP_WAIT (a
        deriver waiting on its model, a server mid-prompt) is killed: nothing here is kept."""
        processes, self.processes = self.processes, {}
        for name, process in processes.items():
            # PostgreSQL's fast shutdown (SIGINT) ends its clients' sessions; SIGTERM would
            # wait for them
            stop = signal.SIGINT if name == "honcho-postgres" else signal.SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, stop)
        deadline = time.monotonic() + STOP_WAIT
        for process in processes.values():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.server.cleanup()

    def log(self, name: str = "honcho-api", lines: int = 30) -> str:
        path = self.server.logs / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # -- the judge: what the real server holds ----------------------------------------------

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, Any] | None = None, timeout: float = 120) -> httpx.Response:
        with httpx.Client(base_url=self.url, timeout=timeout, trust_env=False) as client:
            return client.request(method, path, json=body, params=params)

    def sessions(self, workspace: str) -> list[str]:
        names, page = [], 1
        while True:
            body = self.request("POST", f"/v3/workspaces/{workspace}/sessions/list", {},
                                {"page": page, "size": 100}).json()
            names += [s["id"] for s in body["items"]]
            if page >= body["pages"]:
                return names
            page += 1

    def messages(self, workspace: str) -> list[dict[str, Any]]:
        """Every message of every session of ``workspace``, as the server lists them."""
        found = []
        for session in self.sessions(workspace):
            page = 1
            while True:
                body = self.request(
                    "POST", f"/v3/workspaces/{workspace}/sessions/{session}/messages/list", {},
                    {"page": page, "size": 100}).json()
                found += body["items"]
                if page >= body["pages"]:
                    break
                page += 1
        return found


def new_workspace(real: RealHoncho | None = None) -> str:
    """A fresh workspace id. Given the server, the workspace is made there first with Honcho's
    reasoning (the deriver's extraction) and summaries off: tests that do not ask the dialectic
    leave no background model work behind them (memoryd finds the workspace and uses it)."""
    workspace = f"bx-{secrets.token_hex(6)}"
    if real is not None:
        off = {"enabled": False}
        response = real.request("POST", "/v3/workspaces", {
            "id": workspace, "configuration": {"reasoning": off, "summary": off}})
        assert response.status_code == 201, response.text
    return workspace


def start_real_honcho(work: Path) -> RealHoncho:
    try:
        binary, models = llama_paths()
        install = honcho_install()
    except (LlamaUnavailable, HonchoStartError) as exc:
        unavailable(str(exc))
        raise
    real = RealHoncho(HonchoServer(install=install, work=work, llama_server=binary,
                                   models=models))
    try:
        real.start()
    except BaseException:
        logs = {name: real.log(name, 15) for name in list(real.processes)}
        real.stop()
        print(json.dumps(logs, indent=1))  # shown by pytest with the failure
        raise
    return real
