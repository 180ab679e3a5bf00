"""The whole harness on this machine, for a newcomer and for tests: ``bxctl up``.

Starts llama-server in router mode (the project's presets, on a private Unix socket), then
inferproxy, memoryd, brokerd and loopd, each with ``<role> serve --config``; loopd in a network
namespace with only loopback where the machine allows it; then ``bxctl scheduler``, which runs
the scheduled jobs in ``jobs/`` when they fall due (the host's systemd timers do that there).
Each daemon is ready when it sends READY=1 to our notify socket, as under systemd. Everything
lives in one state directory::

    <state>/config.toml  home/  run/*.sock  logs/*.log  serving/  jobs/*.toml  stack.json
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bxcore.canonical import canonical_text
from bxcore.config import load_config
from bxcore.errors import BoxmakerError, ConfigError

from . import honcho
from .grantdirs import prepare_writable_mounts
from .notify import NotifyListener
from .processes import Started, alive, load, save, spawn, stop

# Bounded: a daemon that never gets ready fails `up` with its log. loopd gets ready after its
# self-test completions: with the 1.5B `coder` preset, minutes on a busy 2-core machine.
READY_TIMEOUT = 1800.0


class StackError(BoxmakerError):
    """The local stack could not be started; the message says what to do."""


@dataclass(frozen=True)
class StackLayout:
    state: Path

    @property
    def config(self) -> Path:
        return self.state / "config.toml"

    @property
    def run(self) -> Path:
        return self.state / "run"

    @property
    def home(self) -> Path:
        return self.state / "home"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def serving(self) -> Path:
        return self.state / "serving"

    @property
    def jobs(self) -> Path:
        return self.state / "jobs"

    @property
    def record(self) -> Path:
        return self.state / "stack.json"

    def socket(self, name: str) -> Path:
        return self.run / f"{name}.sock"


def default_state() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(os.environ.get("BOXMAKER_STATE", Path(base) / "boxmaker"))


def render_config(layout: StackLayout, *, grants: Path, registry: Path, model: str,
                  backend: str) -> str:
    """The local stack's config.toml. Values are JSON-quoted, which TOML accepts for strings."""

    def q(value: object) -> str:
        return canonical_text(str(value))

    return f"""# Written by `bxctl up` for the local stack; edit freely, `bxctl up` keeps it.
[paths]
home = {q(layout.home)}
run = {q(layout.run)}
protected = [{q(layout.state)}]  # this file, the logs, the serving settings, stack.json

[inferproxy]
upstream = {q("unix:" + str(layout.socket("llama")))}
mode = 384  # 0o600

[inference]
model = {q(model)}
max_tokens = 512
# A small model on a small CPU (the 1.5B `coder` preset is 3x slower than the 0.5B): prompt
# progress arrives once per 2,048-token batch, so a busy machine can be silent for longer than
# the default 60 s while it is still working.
liveness_timeout = 900

[inference.sampling]
# Greedy: a small model's tool calls are most reliable so, and a turn is reproducible.
temperature = 0

[inference.serving]
slot_count = 2
per_slot_context = 4096

[loop]
tools = "broker"
registry = {q(registry)}

[broker]
grants = {q(grants)}
jobs = {q(layout.jobs)}  # scheduled jobs: `bxctl scheduler` runs them while the stack is up
approvers = [{q(f"local:{os.getuid()}")}]
backend = {q(backend)}
"""


def prepare(
    layout: StackLayout,
    *,
    models: Path,
    serving_src: Path,
    grants: Path,
    model: str,
    backend: str,
    bin_dir: Path,
) -> None:
    for directory in (layout.state, layout.run, layout.home, layout.logs, layout.serving,
                      layout.jobs):
        directory.mkdir(parents=True, exist_ok=True)
    layout.state.chmod(0o700)
    layout.run.chmod(0o700)
    for name, target in (("models", models), ("templates", serving_src / "templates")):
        link = layout.serving / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target.resolve())
    shutil.copyfile(serving_src / "presets.ini", layout.serving / "presets.ini")
    registry = layout.state / "toolkit-schemas.json"
    subprocess.run([str(bin_dir / "bx-tool"), "schemas", "--out", str(registry)], check=True)
    if not layout.config.exists():
        layout.config.write_text(
            render_config(
                layout, grants=grants.resolve(), registry=registry, model=model, backend=backend
            )
        )
    else:  # kept as the owner left it, but a config from before [paths] protected gets it
        text = layout.config.read_text()
        upgraded = protecting_state(text, layout)
        if upgraded != text:
            layout.config.write_text(upgraded)


_PATHS_HEADER = re.compile(r"^[ \t]*\[[ \t]*paths[ \t]*\][ \t]*(#.*)?$", re.MULTILINE)


def protecting_state(text: str, layout: StackLayout) -> str:
    """The local stack's config.toml with ``[paths] protected`` naming the stack's directory
    (this file, the logs, the serving settings, stack.json: no grant may reach them), added
    under ``[paths]`` when a config written before that key existed has none. A config that
    has one, whatever it names, is the owner's choice and stays as it is."""
    try:
        paths = tomllib.loads(text).get("paths", {})
    except tomllib.TOMLDecodeError as exc:
        raise StackError(f"{layout.config}: not valid TOML: {exc}") from None
    if "protected" in paths:
        return text
    header = _PATHS_HEADER.search(text)
    line = f"protected = [{canonical_text(str(layout.state))}]  # added by `bxctl up`: this " \
           "file, the logs, the serving settings, stack.json"
    upgraded = None if header is None else f"{text[:header.end()]}\n{line}{text[header.end():]}"
    if upgraded is None or _protected(upgraded) != [str(layout.state)]:
        raise StackError(f"{layout.config}: cannot tell where [paths] is to add `{line}` to it "
                         "(grants could reach the stack's own files): add it under [paths]")
    return upgraded


def _protected(text: str) -> object:
    try:
        return tomllib.loads(text).get("paths", {}).get("protected")
    except tomllib.TOMLDecodeError:
        return None


def network_isolation() -> list[str]:
    """The prefix that runs loopd with only loopback, or [] where the machine does not allow it."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    prefix = [unshare, "-n"] if os.geteuid() == 0 else [unshare, "-rn"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    return prefix if probe.returncode == 0 else []


def sandbox_backend() -> str:
    """bubblewrap where it can make a user namespace here, else podman."""
    bwrap = shutil.which("bwrap")
    if bwrap:
        probe = subprocess.run(
            [bwrap, "--unshare-all", "--ro-bind", "/", "/", "true"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return "bubblewrap"
    if shutil.which("podman"):
        return "podman"
    raise StackError("neither bubblewrap nor podman can run a sandbox here; run scripts/setup")


def _running(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


def wait_llama(sock: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"llama-server exited ({proc.returncode}); see {log}")
        if _http_ok(sock, "/health"):
            return
        time.sleep(0.2)
    raise StackError(f"llama-server not healthy after {READY_TIMEOUT:g} s; see {log}")


def _http_ok(sock: Path, path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(2)
            client.connect(str(sock))
            request = f"GET {path} HTTP/1.1\r\nHost: llama\r\nConnection: close\r\n\r\n"
            client.sendall(request.encode())
            return client.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


# serving/presets.ini: the 1.5B, which reads a granted note when asked in plain words; the 0.5B
# (`qwen-tools`) does not; it stays for tests that need speed (docs/decisions/small-local-models.md)
DEFAULT_MODEL = "coder"


def up(
    layout: StackLayout,
    *,
    llama_server: Path,
    models: Path,
    serving_src: Path,
    grants: Path,
    model: str = DEFAULT_MODEL,
    say: Callable[[str], None] = print,
    honcho: Path | None = None,
) -> list[Started]:
    """Start everything and return what runs. On any failure, stop what was started.
    ``honcho``: what scripts/honcho-server.sh printed; a real Honcho then runs too and memoryd
    syncs to it."""
    running = [s for s in load(layout.record) if alive(s.pid)]
    if running:
        raise StackError(f"the local stack is already running ({layout.state}); `bxctl down` first")
    bin_dir = Path(sys.executable).parent
    backend = sandbox_backend()
    prepare(
        layout,
        models=models,
        serving_src=serving_src,
        grants=grants,
        model=model,
        backend=backend,
        bin_dir=bin_dir,
    )
    try:
        broker = load_config(layout.config).broker
    except ConfigError as exc:
        raise StackError(str(exc)) from None
    for line in prepare_writable_mounts(broker.grants_dir(), broker.sandbox_uid):
        say(f"up: {line}")
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS")}
    started: list[Started] = []
    listener = NotifyListener(layout.run / "notify.sock")
    try:
        sock = layout.socket("llama")
        sock.unlink(missing_ok=True)  # llama-server leaves its socket behind and then can't bind
        argv = [
            str(llama_server),
            "--models-preset",
            "presets.ini",
            "--models-max",
            "2",
            "--offline",
            "--no-ui",
            "--host",
            str(sock),
        ]
        proc = spawn("llama-server", argv, layout.logs, env, cwd=layout.serving)
        started.append(Started("llama-server", proc.pid, argv, str(sock)))
        save(layout.record, started)
        wait_llama(sock, proc, layout.logs / "llama-server.log")
        preload(sock, model)
        say(f"up: llama-server (router, {model}) on {sock}")
        if honcho is not None:
            say(f"up: {_start_honcho(layout, honcho, llama_server, models, started)}")
        isolate = network_isolation()
        for group in START_ORDER:
            procs: dict[str, subprocess.Popen[bytes]] = {}
            for role in group:  # a group's daemons start together, each waits for none of them
                prefix = isolate if role == "loopd" else []
                argv = [*prefix, *_command(bin_dir, role), "--config", str(layout.config)]
                procs[role] = spawn(role, argv, layout.logs,
                                    {**env, "NOTIFY_SOCKET": str(listener.path)})
                served = _SOCKETS.get(role)
                started.append(Started(role, procs[role].pid, argv,
                                       str(layout.socket(served)) if served else None))
            save(layout.record, started)
            for role, proc in procs.items():
                _wait_ready(listener, role, proc, layout)
                say(f"up: {role}{_note(role, isolate, backend, layout)}")
    except BaseException:
        stop(started)
        layout.record.unlink(missing_ok=True)
        raise
    finally:
        listener.close()
    return started


# Who waits for whom: loopd's start-up checks call inferproxy and memoryd; the scheduler sends
# jobs to loopd. inferproxy, memoryd and brokerd need none of the others.
START_ORDER = (("inferproxy", "memoryd", "brokerd"), ("loopd",), ("scheduler",))


def _wait_ready(listener: NotifyListener, role: str, proc: subprocess.Popen[bytes],
                layout: StackLayout) -> None:
    if listener.wait_ready({proc.pid}, READY_TIMEOUT, partial(_running, proc)) is None:
        raise StackError(f"{role} did not get ready; see {layout.logs / (role + '.log')}")


def _note(role: str, isolate: list[str], backend: str, layout: StackLayout) -> str:
    if role == "loopd":
        return (" (network: loopback only)" if isolate
                else " (NOT network-isolated: unshare is not allowed on this machine)")
    if role == "brokerd":
        return f" (sandbox: {backend})"
    if role == SCHEDULER:
        return f" (scheduled jobs from {layout.jobs})"
    return ""


def preload(sock: Path, model: str) -> None:
    """Ask the router to load ``model`` now, so it loads while the daemons start (loopd's
    self-test would load it on its first request otherwise). Best effort: a failure here shows
    again, named, in that self-test."""
    body = canonical_text({"model": model}).encode()
    head = (f"POST /models/load HTTP/1.1\r\nHost: llama\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(10)
            client.connect(str(sock))
            client.sendall(head + body)
            client.recv(64)
    except OSError:
        return


def _start_honcho(layout: StackLayout, install: Path, llama_server: Path, models: Path,
                  started: list[Started]) -> str:
    """The real Honcho beside the stack, and memoryd's config pointed at it (kept on the next
    `up`, with the same port)."""
    text = layout.config.read_text()
    try:
        server = honcho.start_local(layout.state, install, llama_server=llama_server,
                                    models=models, api_port=honcho.configured_port(text),
                                    started=started, record=layout.record)
    except (honcho.HonchoStartError, OSError, subprocess.CalledProcessError) as exc:
        raise StackError(f"the local Honcho did not start: {exc}") from None
    if "[memory.honcho]" not in text:
        layout.config.write_text(text + honcho.memory_section(server.url))
    return (f"honcho at {server.url} (workspace from {layout.config}; its logs in "
            f"{server.logs}; its database is made afresh on every `up`)")


_SOCKETS = {"inferproxy": "infer", "memoryd": "memory", "brokerd": "broker", "loopd": "loop"}
SCHEDULER = "scheduler"  # bxctl scheduler: serves no socket


def _command(bin_dir: Path, name: str) -> list[str]:
    if name == SCHEDULER:
        return [str(bin_dir / "bxctl"), SCHEDULER]
    return [str(bin_dir / name), "serve"]


def down(layout: StackLayout) -> list[str]:
    """Stop everything `up` started; returns the names that had to be killed."""
    started = load(layout.record)
    killed = stop(started)
    for extra in ("approve", "notify"):
        layout.socket(extra).unlink(missing_ok=True)
    layout.record.unlink(missing_ok=True)
    return killed


def status(layout: StackLayout) -> list[tuple[str, int, bool]]:
    return [(s.name, s.pid, alive(s.pid)) for s in load(layout.record)]
