"""The real Honcho server on this machine, beside the local stack (``bxctl up --honcho``) and
under memoryd's tests: a throw-away PostgreSQL 15 cluster with pgvector, Honcho's API and its
deriver, and two llama-servers on loopback TCP for Honcho's model clients (one for chat, one
for embeddings: llama-server started with ``--embeddings`` serves nothing else).

Honcho is third-party AGPL code: it runs from the directory ``scripts/honcho-server.sh``
prints (a copy of its source, its own venv, the tokenizer files), as separate processes; nothing
of it is imported here. Why SmolLM2-135M and embeddings on: docs/decisions/honcho-in-tests.md.

``HonchoServer`` says what to run (argv, environment, directories); ``start_local`` runs it for
`bxctl up` (bxctl's processes.py stops it with the rest), a test fixture runs it its own way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .processes import Started, save, spawn

PG_BIN = Path("/usr/lib/postgresql/15/bin")
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBED_DIMENSIONS = 576  # SmolLM2-135M's hidden size: the vector columns are altered to it
READY_TIMEOUT = 300.0  # a busy 2-core machine imports Honcho in 5-10 s; bounded all the same


class HonchoStartError(Exception):
    """A part of the real Honcho did not start; the message names it and its log."""


@dataclass(frozen=True)
class Command:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Ports:
    api: int = field(default_factory=free_port)
    postgres: int = field(default_factory=free_port)
    llm: int = field(default_factory=free_port)
    embed: int = field(default_factory=free_port)


def honcho_config(ports: Ports) -> str:
    """Honcho's config.toml: every model client on the local llama-servers, small outputs (the
    answers' quality does not matter here, the round trips do), no dreams, no cache, no
    per-message embeddings."""
    llm = f"http://127.0.0.1:{ports.llm}/v1"
    model = '\ntransport = "openai"\nmodel = "local"\n'
    return f"""# Written by Boxmaker for a local Honcho (bxctl/stack/honcho.py)
[app]
LOG_LEVEL = "INFO"
# Each message's own embedding is background work nothing here reads, and a 25,000-character
# message is minutes of it for this CPU; the dialectic's and the deriver's embeddings stay on.
EMBED_MESSAGES = false
[db]
CONNECTION_URI = "postgresql+psycopg://postgres@127.0.0.1:{ports.postgres}/postgres"
[auth]
USE_AUTH = false
[llm]
OPENAI_API_KEY = "local"
OPENAI_BASE_URL = "{llm}"
DEFAULT_MAX_TOKENS = 128
[embedding]
VECTOR_DIMENSIONS = {EMBED_DIMENSIONS}
MAX_INPUT_TOKENS = 1024
[embedding.model_config]{model}
[embedding.model_config.overrides]
base_url = "http://127.0.0.1:{ports.embed}/v1"
api_key = "local"
[deriver]
ENABLED = true
POLLING_STARTUP_JITTER_SECONDS = 0.0
FLUSH_ENABLED = true
[deriver.model_config]{model}
[dialectic.levels.low]
MAX_TOOL_ITERATIONS = 1
MAX_OUTPUT_TOKENS = 32
[dialectic.levels.low.model_config]{model}
[summary.model_config]{model}
[dream]
ENABLED = false
[cache]
ENABLED = false
"""


def as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user
    Debian's package made."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]


@dataclass
class HonchoServer:
    """One real Honcho: ``install`` is what scripts/honcho-server.sh printed, ``work`` a
    directory for its config and logs, ``pgdata`` the cluster's (made readable by the postgres
    user when run as root)."""

    install: Path
    work: Path
    llama_server: Path
    models: Path
    ports: Ports = field(default_factory=Ports)
    pgroot: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.api}"

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    @property
    def run_dir(self) -> Path:
        return self.work / "honcho"

    @property
    def python(self) -> str:
        return str(self.install / "app" / ".venv" / "bin" / "python")

    def prepare(self) -> None:
        """Config, the run directory (config.toml beside links to Honcho's source, which reads
        both from its working directory) and a fresh cluster."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name in ("src", "migrations", "scripts", "alembic.ini"):
            link = self.run_dir / name
            if not link.is_symlink():
                link.symlink_to(self.install / "app" / name)
        (self.run_dir / "config.toml").write_text(honcho_config(self.ports))
        self.pgroot = self._pgroot()
        subprocess.run(
            [*as_postgres_user(), str(PG_BIN / "initdb"), "-D", str(self.pgroot / "data"),
             "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )

    def _pgroot(self) -> Path:
        """A fresh directory the cluster's user owns: ``pgroot`` if given (emptied first), else
        ``work/pg``; under root, a new one in /tmp (the postgres user cannot enter root's
        home)."""
        root = self.pgroot
        if root is None and os.geteuid() == 0:
            root = Path(tempfile.mkdtemp(prefix="bx-honcho-pg-"))
        elif root is None:
            root = self.work / "pg"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        return root

    def _env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ")}
        return {**keep, "TIKTOKEN_CACHE_DIR": str(self.install / "tiktoken"),
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}

    def llm_command(self) -> Command:
        return Command("honcho-llm", [
            str(self.llama_server), "-m", str(self.models / MODEL), "--host", "127.0.0.1",
            # one thread: llama.cpp's threads wait for each other at every step, and on a
            # machine busier than its cores two threads made a 135M model 100x slower
            "--port", str(self.ports.llm), "-c", "16384", "-np", "2", "-t", "1", "--jinja",
            "--no-ui"], self._env(), self.work)

    def embed_command(self) -> Command:
        return Command("honcho-embed", [
            str(self.llama_server), "-m", str(self.models / MODEL), "--host", "127.0.0.1",
            "--port", str(self.ports.embed), "--embeddings", "--pooling", "mean", "-c", "4096",
            "-np", "2", "-b", "2048", "-ub", "2048", "-t", "1", "--no-ui"], self._env(),
            self.work)

    def postgres_command(self) -> Command:
        assert self.pgroot is not None, "prepare() first"
        return Command("honcho-postgres", [
            *as_postgres_user(), str(PG_BIN / "postgres"), "-D", str(self.pgroot / "data"),
            "-p", str(self.ports.postgres), "-h", "127.0.0.1", "-k", str(self.pgroot),
            # A throw-away cluster: no fsync (only a machine crash loses what it skips). Commits
            # stay synchronous: without that a crashed PostgreSQL loses commits it acknowledged,
            # and Honcho, which cached them, then fails every write with a 500.
            "-c", "fsync=off", "-c", "full_page_writes=off"],
            self._env(), self.work)

    def api_command(self) -> Command:
        return Command("honcho-api", [
            self.python, "-m", "uvicorn", "src.main:app", "--host", "127.0.0.1",
            "--port", str(self.ports.api)], self._env(), self.run_dir)

    def deriver_command(self) -> Command:
        return Command("honcho-deriver", [self.python, "-m", "src.deriver"], self._env(),
                       self.run_dir)

    def migrate(self) -> None:
        """Honcho's migrations, then its vector columns altered to the embedding model's size
        (what Honcho's own bootstrap says to do for a model other than its default)."""
        for script in (["scripts/provision_db.py"], ["scripts/configure_embeddings.py", "--yes"]):
            result = subprocess.run([self.python, *script], cwd=self.run_dir, env=self._env(),
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
                raise HonchoStartError(f"Honcho's {script[0]} failed:\n{tail}")

    def cleanup(self) -> None:
        """Remove the cluster's files (the processes must be stopped)."""
        if self.pgroot is not None:
            shutil.rmtree(self.pgroot, ignore_errors=True)


def running(process: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: process.poll() is None


def wait_http(url: str, alive: Callable[[], bool], name: str, log: Path,
              timeout: float = READY_TIMEOUT) -> None:
    """Until ``url`` answers 200; ``alive()`` false (the process exited) fails at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise HonchoStartError(f"{name} exited; see {log}")
        with (contextlib.suppress(OSError, urllib.error.URLError),
              urllib.request.urlopen(url, timeout=2) as response):
            if response.status == 200:
                return
        time.sleep(0.1)
    raise HonchoStartError(f"{name} did not answer {url} within {timeout:g} s; see {log}")


def wait_postgres(server: HonchoServer, alive: Callable[[], bool]) -> None:
    assert server.pgroot is not None
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if not alive():
            raise HonchoStartError(f"PostgreSQL exited; see {server.logs}")
        probe = subprocess.run(
            [str(PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-U", "postgres", "-p",
             str(server.ports.postgres)], check=False)
        if probe.returncode == 0:
            return
        time.sleep(0.1)
    raise HonchoStartError(f"PostgreSQL not ready within {READY_TIMEOUT:g} s")


def memory_section(url: str, workspace: str = "boxmaker") -> str:
    """The [memory.honcho] a local stack with --honcho adds to its config: our workspace,
    trusted, with the sync kicked after every turn as always."""
    return f"""
[memory.honcho]  # added by `bxctl up --honcho`: the local real Honcho
url = "{url}"
workspace = "{workspace}"
[[memory.honcho.workspaces]]
id = "{workspace}"
trusted = true
"""


def configured_port(config_text: str) -> int | None:
    """The API port of a local Honcho an earlier `up --honcho` put in the config, if any."""
    for line in config_text.splitlines():
        if line.startswith('url = "http://127.0.0.1:') and "[memory.honcho]" in config_text:
            with contextlib.suppress(ValueError):
                return int(line.split(":")[2].split('"')[0].split("/")[0])
    return None


def stack_pgroot(state: Path) -> Path:
    """Where a local stack's cluster lives, made afresh on every `up`: under the state
    directory, or under root in /tmp (the postgres user cannot enter root's home)."""
    if os.geteuid() != 0:
        return state / "honcho" / "pg"
    return Path(tempfile.gettempdir()) / (
        "bx-honcho-pg-" + hashlib.sha256(str(state).encode()).hexdigest()[:12])


def start_local(state: Path, install: Path, *, llama_server: Path, models: Path,
                api_port: int | None, started: list[Started], record: Path) -> HonchoServer:
    """Start a local real Honcho for `bxctl up --honcho`, each process recorded in
    ``started`` (and saved to ``record``) as soon as it runs, so `bxctl down` stops it."""
    server = HonchoServer(install=install, work=state / "honcho", llama_server=llama_server,
                          models=models, ports=Ports(api=api_port) if api_port else Ports(),
                          pgroot=stack_pgroot(state))
    server.prepare()

    def run(command: Command) -> subprocess.Popen[bytes]:
        process = spawn(command.name, command.argv, server.logs, command.env, cwd=command.cwd)
        started.append(Started(command.name, process.pid, command.argv, None))
        save(record, started)
        return process

    llm, embed = run(server.llm_command()), run(server.embed_command())
    postgres = run(server.postgres_command())
    wait_postgres(server, running(postgres))
    server.migrate()
    run(server.deriver_command())
    api = run(server.api_command())
    for name, process, url in (("Honcho's API", api, f"{server.url}/health"),
                               ("honcho-llm", llm, f"http://127.0.0.1:{server.ports.llm}/health"),
                               ("honcho-embed", embed,
                                f"http://127.0.0.1:{server.ports.embed}/health")):
        wait_http(url, running(process), name, server.logs)
    return server
