"""``loopd serve``: start-up checks, then loop.sock until SIGTERM (M2b design, section 8).

Order matters to channels: a stale socket file is removed first, so while the self-test runs a
client sees "not running" rather than "connection refused"; the socket is bound (``[channel]
mode`` and ``group``, 0600 by default, through bxcore.daemon) only after every check passed, and
READY=1 goes to systemd only after it is bound. SIGTERM cancels the serving coroutine, which
closes the listener and removes the socket on its way out.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bxcore.config import Config
from bxcore.daemon import (
    Notifier,
    listening,
    remove_stale_socket,
    run_until_signalled,
    wait_forever,
)
from bxcore.errors import ConfigError
from bxcore.protocol.delegate import DELEGATE_SCHEMA
from bxcore.util import now_rfc3339

from .checks import (
    budget_report,
    selftest_report,
    serving_since_check,
    serving_since_report,
    startup_checks,
)
from .epochs import Baselines, EpochSettings
from .inference.api import Inference
from .inference.client import InferenceClient
from .inference.errors import InferenceError
from .inference.serving import ServingSettings, fetch_serving
from .memory import IdentityFiles, Memory, MemoryLink
from .server import LoopServer
from .store import SessionStore
from .subagents import Subagents
from .tools import (
    FakeTools,
    Registry,
    ToolPort,
    ToolRunner,
    load_registry,
    with_clock,
    with_memory_tools,
)
from .tools.broker import BrokerPort
from .tools.registry import with_builtin
from .turn import Loop, TurnSettings

log = logging.getLogger("loopd")

DEFAULT_SYSTEM = Path(__file__).with_name("system.md")
StartupCheck = Callable[[], Awaitable[tuple[bool, str]]]
ServingSource = Callable[[], Awaitable[ServingSettings]]


@dataclass(frozen=True, kw_only=True)
class Role:
    """Everything ``serve`` wires together, built from the config."""

    config: Config
    source: Path  # the config file, named in errors
    system: Path
    registry: Registry
    port: ToolPort
    memory: Memory

    @property
    def baselines(self) -> Baselines:
        """Each epoch's baseline, built afresh: edits apply to epochs started after them."""
        return Baselines(system=self.system, tools=self.registry.core_schemas(),
                         memory=self.memory)


def build_role(config: Config, config_path: Path, tools: str | None = None) -> Role:
    choice = tools or config.loop.tools
    memory = memory_for(config)
    port: ToolPort
    if choice == "fake":
        fake = FakeTools()
        registry, port = Registry(fake.schemas), fake
    else:
        if config.loop.registry is None:
            raise ConfigError(
                f"{config_path}: loop.registry: set it to the toolkit's registry (bx-tool schemas "
                f"--out <file>): [loop] tools is \"broker\" (the default), which needs one; "
                f"tools = \"fake\" is a test double"
            )
        registry = with_clock(load_registry(config.loop.registry))
        if isinstance(memory, MemoryLink):  # the memory tools reach memoryd through brokerd
            registry = with_memory_tools(registry)
        registry = with_builtin(registry, [DELEGATE_SCHEMA])  # brokerd decides, loopd runs it
        port = BrokerPort(config.served("broker").path)
    return Role(
        config=config, source=config_path, system=system_path(config, config_path),
        registry=registry, port=port, memory=memory,
    )


def memory_for(config: Config) -> Memory:
    if config.loop.memory_source() == "memoryd":
        return MemoryLink(config.served("memory").path)
    home = config.paths.home
    return IdentityFiles([home / name for name in config.baseline.identity])


def system_path(config: Config, config_path: Path) -> Path:
    """[baseline] system if set; else system.md beside the config file; else the shipped one."""
    if config.baseline.system is not None:
        return config.baseline.system
    beside = config_path.resolve().parent / "system.md"
    return beside if beside.is_file() else DEFAULT_SYSTEM


async def serve(config: Config, config_path: Path, *, tools: str | None = None) -> int:
    """The real thing: the inference client over inferproxy's socket, then ``run``."""
    role = build_role(config, config_path, tools)
    client = InferenceClient(config.inference, socket=config.served("infer").path)
    notifier = Notifier()
    status = 0

    async def main() -> None:
        nonlocal status
        status = await run(role, client, lambda: startup_checks(client, role.baselines),
                           notifier=notifier, serving=lambda: fetch_serving(client))

    try:
        await run_until_signalled(main(), on_stop=notifier.stopping)
    finally:
        await client.aclose()
        await role.memory.aclose()
    return status


async def check(config: Config, config_path: Path, which: str) -> int:
    """``loopd selftest`` / ``budget`` / ``serving``: one named report on stdout; 0 if it
    passed."""
    role = build_role(config, config_path)
    client = InferenceClient(config.inference, socket=config.served("infer").path)
    try:
        if which == "selftest":
            report = await selftest_report(client)
        elif which == "serving":
            report = await serving_since_check(client, SessionStore(config.paths.home))
        else:
            report = await budget_report(client, role.baselines, identity_required=isinstance(
                role.memory, MemoryLink))
    finally:
        await client.aclose()
        await role.memory.aclose()
    print(report.text())
    return 0 if report.ok else 1


async def run(
    role: Role, inference: Inference, checks: StartupCheck, *,
    notifier: Notifier | None = None, stop: asyncio.Event | None = None,
    serving: ServingSource | None = None,
) -> int:
    """Check, then serve until cancelled (by ``serve``'s signal handling) or until ``stop`` is
    set. Returns the exit status: 1 if a check failed.

    ``serving`` reads the server's serving settings: once at start, for the per-slot context
    compaction needs when ``[inference.serving] per_slot_context`` is not set, and to name what
    changed since the latest session began; then for each new session's record."""
    served = role.config.served("loop")
    group = served.gid(role.source)
    remove_stale_socket(served.path)  # before the checks: clients see "not running" meanwhile
    ok, report = await checks()
    print(report, file=sys.stderr)
    if not ok:
        print("loopd: the self-test failed; not starting", file=sys.stderr)
        return 1
    loop = Loop(
        inference=inference, tools=ToolRunner(role.registry, role.port),
        settings=TurnSettings.from_config(role.config), now=now_rfc3339,
    )
    store = SessionStore(role.config.paths.home)
    for name in store.remove_staging():
        log.warning("removed %s: a session whose creation a crash interrupted", name)
    settings = await _served_now(serving, store)
    epochs = EpochSettings.from_config(
        role.config, served_context=None if settings is None else settings.per_slot_context
    )
    if epochs.compact_at_tokens is None:
        log.warning("the per-slot context is unknown ([inference.serving] per_slot_context is "
                    "not set and the server did not say): sessions are never compacted, and end "
                    "with session_full when their slot is full")
    server = LoopServer(
        store=store, loop=loop, new_baseline=role.baselines,
        slots=role.config.inference.slots, memory=role.memory, epochs=epochs, serving=serving,
    )
    if isinstance(role.port, BrokerPort):
        role.port.children = Subagents(server)  # an allowed delegate call's child runs here
    async with listening(served.path, server.handle, mode=served.mode, group=group):
        (notifier or Notifier()).ready(f"serving {served.path}")
        log.info("serving on %s", served.path)
        if stop is None:
            await wait_forever()
        await stop.wait()
    return 0


async def _served_now(serving: ServingSource | None, store: SessionStore) -> ServingSettings | None:
    """The serving settings at start, with what changed since the latest session began printed
    beside the self-test's report; None if there is no source or the server cannot say."""
    if serving is None:
        return None
    try:
        served = await serving()
    except InferenceError as exc:
        log.warning("cannot read the serving settings: %s", exc)
        return None
    print(serving_since_report(served, store).text(), file=sys.stderr)
    return served
