"""``loopd serve``: start-up checks, then loop.sock until SIGTERM (M2b design, section 8).

Order matters to channels: a stale socket file is removed first, so while the self-test runs a
client sees "not running" rather than "connection refused"; the socket is bound (mode 0600) only
after every check passed, and READY=1 goes to systemd only after it is bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import sdnotify
from bxcore.config import Config
from bxcore.errors import ConfigError
from bxcore.util import now_rfc3339

from .baseline import Baseline
from .inference.api import Inference
from .inference.budget import count_baseline_tokens
from .inference.client import InferenceClient
from .inference.errors import InferenceError
from .inference.selftest import self_test
from .server import LoopServer
from .store import SessionStore
from .tools import FakeTools, Registry, ToolPort, ToolRunner, load_registry
from .tools.broker import BrokerPort
from .turn import Loop, TurnSettings

log = logging.getLogger("loopd")

DEFAULT_SYSTEM = Path(__file__).with_name("system.md")
StartupCheck = Callable[[Baseline], Awaitable[tuple[bool, str]]]


@dataclass(frozen=True, kw_only=True)
class Role:
    """Everything ``serve`` wires together, built from the config."""

    config: Config
    system: Path
    registry: Registry
    port: ToolPort

    def baseline(self) -> Baseline:
        """A new session's baseline, read afresh: edits apply to sessions started after them."""
        home = self.config.paths.home
        return Baseline.assemble(
            system=self.system,
            identity=[home / name for name in self.config.baseline.identity],
            tools=self.registry.core_schemas(),
        )


def build_role(config: Config, config_path: Path, tools: str | None = None) -> Role:
    choice = tools or config.loop.tools
    port: ToolPort
    if choice == "fake":
        fake = FakeTools()
        registry, port = Registry(fake.schemas), fake
    else:
        if config.loop.registry is None:
            raise ConfigError(f"{config_path}: loop.registry: the broker port needs a registry")
        registry = load_registry(config.loop.registry)
        port = BrokerPort(config.broker.socket or config.socket("broker"))
    return Role(
        config=config, system=system_path(config, config_path), registry=registry, port=port
    )


def system_path(config: Config, config_path: Path) -> Path:
    """[baseline] system if set; else system.md beside the config file; else the shipped one."""
    if config.baseline.system is not None:
        return config.baseline.system
    beside = config_path.resolve().parent / "system.md"
    return beside if beside.is_file() else DEFAULT_SYSTEM


def remove_stale_socket(path: Path) -> None:
    """Remove a socket file nobody listens on; refuse one that is live or not a socket."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"{path}: exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise ConfigError(f"{path}: another loopd is serving on it")


async def inference_checks(client: InferenceClient, baseline: Baseline) -> tuple[bool, str]:
    """The inference self-test, then the baseline budget, as one report."""
    report = await self_test(client)
    lines = [report.describe()]
    ok = report.ok
    try:
        budget = await count_baseline_tokens(client, baseline.system, tuple(baseline.tools))
    except InferenceError as exc:
        ok = False
        lines.append(f"FAIL baseline_budget: cannot count the baseline's tokens: {exc}")
    else:
        ok = ok and budget.ok
        lines.append(f"{'ok  ' if budget.ok else 'FAIL'} baseline_budget: {budget.describe()}")
    return ok, "\n".join(lines)


async def serve(config: Config, config_path: Path, *, tools: str | None = None) -> int:
    """The real thing: the inference client over inferproxy's socket, then ``run``."""
    role = build_role(config, config_path, tools)
    socket_path = config.inference.socket or config.socket("infer")
    client = InferenceClient(config.inference, socket=socket_path)
    try:
        return await run(role, client, lambda baseline: inference_checks(client, baseline))
    finally:
        await client.aclose()


async def run(
    role: Role, inference: Inference, checks: StartupCheck, *,
    ready: Callable[[], None] | None = None, stop: asyncio.Event | None = None,
) -> int:
    """Serve until ``stop`` is set (SIGTERM or SIGINT by default). Returns the exit status."""
    path = role.config.loop_socket
    remove_stale_socket(path)
    ok, report = await checks(role.baseline())
    print(report, file=sys.stderr)
    if not ok:
        print("loopd: the self-test failed; not starting", file=sys.stderr)
        return 1
    loop = Loop(
        inference=inference, tools=ToolRunner(role.registry, role.port),
        settings=TurnSettings.from_config(role.config), now=now_rfc3339,
    )
    server = LoopServer(
        store=SessionStore(role.config.paths.home), loop=loop, new_baseline=role.baseline,
        slots=role.config.inference.slots,
    )
    stop = stop or _stop_on_signals()
    path.parent.mkdir(parents=True, exist_ok=True)
    previous_umask = os.umask(0o177)  # the socket is born 0600: no window with wider access
    try:
        listener = await asyncio.start_unix_server(server.handle, path=str(path))
    finally:
        os.umask(previous_umask)
    os.chmod(path, 0o600)
    (ready or _notify_ready)()
    log.info("serving on %s", path)
    try:
        await stop.wait()
    finally:
        listener.close()
        await listener.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return 0


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    running = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        running.add_signal_handler(number, stop.set)
    return stop


def _notify_ready() -> None:
    # A no-op when NOTIFY_SOCKET is unset (not started by systemd).
    sdnotify.SystemdNotifier().notify("READY=1\nSTATUS=serving loop.sock")
