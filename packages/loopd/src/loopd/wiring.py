"""loopd's parts, built from the config (docs/design.md, "loopd serve"): the tool registry,
memory, the system prompt, the inference client, and (once the start-up checks passed) the
sessions loop.sock serves, with the tool port over broker.sock. No socket is opened here:
sockets.py binds loop.sock. The one-shot reports (``loopd selftest``, ``budget``, ``serving``)
are run from here too.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bxcore.config import Config
from bxcore.errors import ConfigError
from bxcore.util import now_rfc3339

from . import sockets
from .budget import BaselineBudget, TokenCounter
from .checks import (
    budget_report,
    selftest_report,
    serving_since_check,
    serving_since_report,
    startup_checks,
)
from .epochs import Baselines, EpochSettings
from .identity_writes import IdentityWrites
from .inference.api import Inference
from .inference.budget import ServerTokens
from .inference.client import InferenceClient
from .inference.errors import InferenceError
from .inference.markers import RECENT, MarkerBook, Tokenize
from .inference.passed import PASSED_PROBES, PassedProbes
from .inference.serving import ServingSettings, fetch_serving
from .memory import IdentityFiles, Memory, MemoryLink
from .sessions import Sessions
from .store import SessionStore
from .subagents import DELEGATE_SCHEMA, Subagents
from .tools import (
    Registry,
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
ServingSource = Callable[[], Awaitable[ServingSettings]]


@dataclass(frozen=True, kw_only=True)
class LoopParts:
    """What ``build`` makes from the config, before any check: what ``serve`` starts from."""

    config: Config
    source: Path  # the config file, named in errors
    system: Path
    registry: Registry
    memory: Memory

    @property
    def baselines(self) -> Baselines:
        """Each epoch's baseline, built afresh: edits apply to epochs started after them."""
        return Baselines(system=self.system, tools=self.registry.core_schemas(),
                         memory=self.memory)

    def budgeted(self, counter: TokenCounter | None, opening_limit: int | None = None
                 ) -> Baselines:
        """``baselines``, each fitted to [inference] baseline_budget by ``counter`` (the
        server's tokenizer), and each epoch's opening with its summary under
        ``opening_limit`` (the compaction point); None: uncounted (a test double's server has
        no tokenizer)."""
        if counter is None:
            return self.baselines
        budget = BaselineBudget(counter=counter, limit=self.config.inference.baseline_budget)
        return dataclasses.replace(self.baselines, budget=budget, opening_limit=opening_limit)


def build(config: Config, config_path: Path) -> LoopParts:
    memory = memory_for(config)
    if config.loop.registry is None:
        raise ConfigError(
            f"{config_path}: loop.registry: set it to the toolkit's registry (bx-tool schemas "
            f"--out <file>): every tool call goes to brokerd, and loopd offers the tools it lists"
        )
    registry = with_clock(load_registry(config.loop.registry))
    if isinstance(memory, MemoryLink):  # the memory tools reach memoryd through brokerd
        registry = with_memory_tools(registry)
    registry = with_builtin(registry, [DELEGATE_SCHEMA])  # brokerd decides, loopd runs it
    return LoopParts(
        config=config, source=config_path, system=system_path(config, config_path),
        registry=registry, memory=memory,
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


async def serve(parts: LoopParts, client: InferenceClient) -> int:
    """``loopd serve``: the start-up checks against the server behind ``client`` (a generating
    probe that passed once is not run again: inference/passed.py), then loop.sock served until
    SIGTERM or SIGINT. Returns the exit status."""
    passed = PassedProbes(SessionStore(parts.config.paths.home).root / PASSED_PROBES)
    try:
        return await sockets.serve(
            parts.config, parts.source, lambda: startup_checks(client, parts.baselines, passed),
            lambda: sessions(parts, client, lambda: fetch_serving(client), ServerTokens(client),
                             client.tokenize))
    finally:
        await client.aclose()
        await parts.memory.aclose()


async def run_report(config: Config, config_path: Path, which: str) -> int:
    """``loopd selftest`` / ``budget`` / ``serving``: one named report on stdout; 0 if it
    passed."""
    parts = build(config, config_path)
    client = inference_client(config)
    try:
        if which == "selftest":
            report = await selftest_report(client)
        elif which == "serving":
            report = await serving_since_check(client, SessionStore(config.paths.home))
        else:
            report = await budget_report(client, parts.baselines, identity_required=isinstance(
                parts.memory, MemoryLink))
    finally:
        await client.aclose()
        await parts.memory.aclose()
    print(report.text())
    return 0 if report.ok else 1


async def sessions(parts: LoopParts, inference: Inference,
                   serving: ServingSource | None = None,
                   counter: TokenCounter | None = None,
                   tokenize: Tokenize | None = None) -> Sessions:
    """The sessions loop.sock serves, after the start-up checks passed: the turn loop, the
    session store (what a crash left half-created removed), the epochs' settings (the per-slot
    context from ``serving`` when the config does not set it, and what changed since the latest
    session began printed), every new baseline fitted to the budget by ``counter`` (and the
    model's identity writes checked against it), and the tool port over broker.sock, whose
    allowed delegate calls run their child in these same sessions (subagents.py). With
    ``tokenize`` (the server's), each new session gets a marker apart from those of the sessions
    whose logs were written last (inference/markers.py)."""
    store = SessionStore(parts.config.paths.home)
    for name in store.remove_staging():
        log.warning("removed %s: a session whose creation a crash interrupted", name)
    settings = await _served_now(serving, store)
    epochs = EpochSettings.from_config(
        parts.config, served_context=None if settings is None else settings.per_slot_context
    )
    baselines = parts.budgeted(counter, opening_limit=epochs.compact_at_tokens)
    writes = IdentityWrites(baselines) if baselines.budget is not None else None
    if epochs.compact_at_tokens is None:
        log.warning("the per-slot context is unknown ([inference.serving] per_slot_context is "
                    "not set and the server did not say): sessions are never compacted, and end "
                    "with session_full when their slot is full")
    markers = None if tokenize is None else MarkerBook(tokenize, store.recent_markers(RECENT))

    def served(children: Subagents) -> Sessions:
        port = BrokerPort(parts.config.served("broker").path, children=children)
        loop = Loop(
            inference=inference, tools=ToolRunner(parts.registry, port, writes),
            settings=TurnSettings.from_config(parts.config), now=now_rfc3339,
        )
        return Sessions(
            store=store, loop=loop, new_baseline=baselines,
            slots=parts.config.inference.slots, memory=parts.memory, epochs=epochs,
            serving=serving, markers=markers,
        )

    return Subagents(served).sessions


def inference_client(config: Config) -> InferenceClient:
    """The inference client, over inferproxy's socket."""
    return InferenceClient(config.inference, socket=config.served("infer").path)


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
