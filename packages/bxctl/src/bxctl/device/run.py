"""``bxctl verify-device``'s shell: runs each measurement and check against the deployed router
and collects the verdicts, figures and reports for the document. A measurement that cannot be
made is a FAIL naming why; the others still run.
"""

from __future__ import annotations

import os
import platform
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bxcore.config import Config
from bxcore.util import sha256

from ..roles import run_role
from . import measure, probes
from .conversation import Conversation, run_conversation, scratch_config
from .measure import Figure, Filler, value_text
from .router import DeviceError, Router
from .verdicts import (
    Verdict,
    cache_reuse_verdict,
    conversation_verdicts,
    depth_plan,
    reasoning_verdict,
    report_verdicts,
    rereads,
    tool_parsing_verdict,
)

if TYPE_CHECKING:
    from .command import Plan


@dataclass
class Collected:
    verdicts: list[Verdict] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    reports: list[tuple[str, str]] = field(default_factory=list)
    conversation: list[str] = field(default_factory=list)

    def attempt(self, item: str, step: Callable[[], None]) -> None:
        try:
            step()
        except DeviceError as exc:
            self.verdicts.append(Verdict(item=item, status="FAIL",
                                         detail=f"could not be measured: {exc}"))


def machine() -> list[tuple[str, str]]:
    def meminfo() -> str:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
        return "unknown"

    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor() or "unknown")
    return [("host", platform.node()), ("CPU", f"{cpu}, {os.cpu_count()} logical cores"),
            ("memory", meminfo()), ("system", platform.platform())]


def server(router: Router, props: Any, models: Any) -> list[tuple[str, str]]:
    settings = props.get("default_generation_settings") or {}
    listed = (models or {}).get("data", ())
    entry: dict[str, Any] = next((m for m in listed if m.get("id") == router.model), {})
    args = " ".join(str(a) for a in (entry.get("status") or {}).get("args", ())) or "not listed"
    template = props.get("chat_template")
    return [
        ("router", router.where), ("model (config)", router.model),
        ("model file", str(props.get("model_path"))),
        ("server build", str(props.get("build_info"))),
        ("slots", f"{props.get('total_slots')} of {settings.get('n_ctx')} tokens"),
        ("chat template", sha256(template.encode()) if isinstance(template, str) else "none"),
        ("launch arguments (router's /models)", args),
    ]


def contract_checks(found: Collected, config_path: Path) -> None:
    """The self-test (serving settings, slot_switch) and the baseline budget with the real
    identity, each as the deployed loopd runs it (as ``bxctl doctor`` does)."""
    for which, what in (("selftest", "self-test"), ("budget", "baseline budget")):
        result = run_role("loopd", [which], config_path, capture=True)
        output = result.stdout + result.stderr
        found.reports.append((f"loopd {which} --config {config_path}", output))
        found.verdicts.extend(report_verdicts(output, result.returncode, what))


def measurements(found: Collected, router: Router, chat: probes.Chat, config: Config,
                 plan: Plan, slot_context: int) -> None:
    filler = Filler(router)
    slots = config.inference.slots
    depths = depth_plan(plan.depths, slot_context, plan.new_tokens)

    def add(figures: Sequence[Figure]) -> None:
        found.figures.extend(figures)
        found.verdicts.extend(Verdict(item=f.name, status="measured",
                                      detail=f"{value_text(f)} {f.unit}") for f in figures)

    found.attempt("prompt processing", lambda: add(measure.prompt_processing(
        router, filler, depths, plan.new_tokens, slots.background)))
    found.attempt("generation", lambda: add(
        measure.generation(router, filler, [slots.background], plan.generate)
        + measure.generation(router, filler, sorted({slots.main, slots.background}),
                             plan.generate)))
    found.attempt("tool-call parsing", lambda: _tool_parsing(found, chat, plan.tool_trials))
    found.attempt("cache reuse over a tool conversation",
                  lambda: _cache_reuse(found, chat, plan.turns))
    found.attempt("a queued request's stream",
                  lambda: _queued(found, router, chat, filler, plan.queued_tokens))
    found.attempt("the control endpoint ends a reasoning block", lambda: found.verdicts.append(
        reasoning_verdict(probes.reasoning(router, chat, plan.reasoning_tokens))))
    found.attempt("rewind", lambda: add([measure.rewind(router, filler, min(
        plan.rewind_tokens, slot_context - 1), slots.background)]))


def _tool_parsing(found: Collected, chat: probes.Chat, trials: int) -> None:
    problems = probes.tool_trials(chat, trials)
    found.verdicts.append(tool_parsing_verdict(problems))
    found.figures.append(Figure(
        name="tool calls parsed", value=sum(p is None for p in problems), unit=f"of {trials}",
        how=f"{trials} streamed chat completions on id_slot {chat.slot}, tool_choice required, "
            f"each asking to read another file"))


def _cache_reuse(found: Collected, chat: probes.Chat, turns: int) -> None:
    seen = probes.cache_conversation(chat, turns)
    found.verdicts.append(cache_reuse_verdict(seen, turns))
    found.figures.append(Figure(
        name=f"cache reuse: tokens of earlier prompts re-read over {turns} tool turns",
        value=sum(rereads(seen)), unit="tokens",
        how=f"{len(seen)} streamed chat completions on id_slot {chat.slot}, each the previous "
            f"one plus the assistant message as returned and the tool result; prompt_n per "
            f"request {[p for _, p in seen]}"))


def _queued(found: Collected, router: Router, chat: probes.Chat, filler: Filler,
            tokens: int) -> None:
    got = probes.queued(router, chat, filler, tokens)
    shown = ", ".join(map(repr, got.lines_before[:3]))
    carried = (f"{len(got.lines_before)} lines before it ({shown})" if got.lines_before
               else "no byte of the body before it")
    how = (f"a streamed chat completion (return_progress) on id_slot {chat.slot} while a "
           f"{tokens}-token generation ran there: the response head after {got.head_s:.2f} s, "
           f"{carried}; its first event ({got.first_event}) after {got.first_event_s:.2f} s, "
           f"the request ahead ended after {got.ahead_done_s:.2f} s")
    figures = [Figure(name="queued request: seconds to its first event", value=got.first_event_s,
                      unit="s", how=how),
               Figure(name="queued request: seconds to its response head", value=got.head_s,
                      unit="s", how="the same request")]
    found.figures.extend(figures)
    found.verdicts.append(Verdict(item="what a queued request streams before its first byte",
                                  status="measured", detail=how))


def conversation(found: Collected, config: Config, config_path: Path) -> None:
    system = config.baseline.system or (config_path.resolve().parent / "system.md")
    with tempfile.TemporaryDirectory(prefix="bx-verify-device-") as scratch:
        talk = Conversation(Path(scratch), scratch_config(
            config, system if system.is_file() else None, Path(scratch)))
        try:
            records, restarted_at = run_conversation(talk)
        except DeviceError as exc:
            found.verdicts.append(Verdict(item="on-device conversation", status="FAIL",
                                          detail=str(exc)))
            return
    found.conversation = [r.model_dump_json(by_alias=True)[:240] for r in records]
    found.conversation.insert(restarted_at, "(loopd restarted here)")
    found.verdicts.extend(conversation_verdicts(records, restarted_at))


def verify(config: Config, config_path: Path, plan: Plan
           ) -> tuple[Collected, list[tuple[str, str]]]:
    found = Collected()
    router = Router(config.inferproxy.upstream, config.inference.model)
    chat = probes.Chat(router=router, slot=config.inference.slots.background,
                       sampling=config.inference.sampling.model_dump())
    try:
        router.post("/tokenize", {"content": "load"})  # a router loads the model on a POST
        props, models = router.get("/props"), _optional(router, "/models")
        facts = server(router, props, models)
        slot_context = int((props.get("default_generation_settings") or {})["n_ctx"])
    except (DeviceError, KeyError, TypeError, ValueError) as exc:
        found.verdicts.append(Verdict(item="the router answers", status="FAIL", detail=str(exc)))
        return found, [("router", router.where)]
    try:
        contract_checks(found, config_path)
        measurements(found, router, chat, config, plan, slot_context)
        conversation(found, config, config_path)
    finally:
        router.close()
    return found, facts


def _optional(router: Router, path: str) -> Any:
    try:
        return router.get(path)
    except DeviceError:
        return None


