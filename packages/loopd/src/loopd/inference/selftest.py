"""The startup self-test (docs/design.md): loopd refuses to start if any check fails.

Checks, each named in the report:

- ``tool_call``: a request that must call a tool comes back with a parsed tool call whose
  arguments are a JSON object;
- ``round_trip``: the tool result sent back gives a completion;
- ``cache_hit``: that second request, which extends the first, reused the first one's cache;
- ``slots``: the configured slots exist, and the slot count matches ``/props`` and ``/slots``;
- ``context``: the per-slot context of ``/props`` and ``/slots`` matches the recorded one;
- ``chat_template``: the sha256 of the served chat template matches the recorded one;
- ``speculative``: no slot decodes speculatively (or as recorded);
- ``kv_cache``: the KV cache type the router's ``/models`` shows the model launched with matches
  the recorded one (a server that does not show it fails a recorded type: it cannot be checked).

Checks whose recorded value is left out of ``[inference.serving]`` report what the server runs
with and pass. The test runs on the background slot, so the main sessions' cache is untouched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bxcore.chat import SystemMessage, ToolMessage, ToolSchema, UserMessage
from bxcore.protocol.loop import TurnEventBody
from bxcore.util import sha256

from .api import ChatRequest, Completion, cache_outcome
from .client import InferenceClient
from .errors import InferenceError
from .passed import PassedProbes, probe_key
from .serving import kv_cache_type

PROBE_TOOL = ToolSchema(
    name="read_file",
    description="Read a text file and return its contents.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Path of the file"}},
        "required": ["path"],
    },
)
PROBE_SYSTEM = "You are a file assistant. Answer with a tool call when a file is needed."
PROBE_USER = "Read the file README.md."
PROBE_RESULT = "# Boxmaker\nA personal agent harness."


@dataclass(frozen=True, kw_only=True)
class SelfTestCheck:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class SelfTestReport:
    checks: tuple[SelfTestCheck, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> tuple[SelfTestCheck, ...]:
        return tuple(check for check in self.checks if not check.ok)

    def describe(self) -> str:
        return "\n".join(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in self.checks)


async def _ignore(_event: TurnEventBody) -> None:
    return None


ROUND_TRIP = ("tool_call", "round_trip", "cache_hit")
# What the probe is: a change to it makes every probe key new.
PROBE = sha256(json.dumps([PROBE_TOOL.model_dump(mode="json"), PROBE_SYSTEM, PROBE_USER,
                           PROBE_RESULT]).encode())


async def self_test(client: InferenceClient, passed: PassedProbes | None = None
                    ) -> SelfTestReport:
    """Every check. With ``passed`` (``loopd serve``), the probe's round trip is skipped on a
    server, model and template it passed on before, and recorded when it passes: generating
    the probe was most of a warm start (docs/decisions/probe-once-per-server.md)."""
    key = None
    try:
        props = await client.get_json("/props")
        slots = await client.get_json("/slots")
    except InferenceError as exc:
        serving = [SelfTestCheck(name="serving", ok=False,
                                 detail=f"cannot read /props, /slots: {exc}")]
    else:
        models = await router_models(client)
        serving = serving_checks(client, props, slots, models)
        key = probe_key(client.section, PROBE, props, models)
    checks = await once(passed, key, ROUND_TRIP, lambda: _round_trip_checks(client))
    return SelfTestReport(checks=(*checks, *serving))


async def once(passed: PassedProbes | None, key: str | None, names: Sequence[str],
               run: Callable[[], Awaitable[list[SelfTestCheck]]]) -> list[SelfTestCheck]:
    """``run``'s checks, recorded under ``key`` when all pass; where ``key`` passed before, each
    of ``names`` passed as then, and nothing is sent. Without ``passed`` or ``key``, ``run``."""
    when = passed.passed_at(key) if passed is not None and key is not None else None
    if when is not None:
        return [SelfTestCheck(name=name, ok=True,
                              detail=f"passed on this server, model, template and flags at "
                                     f"{when} (loopd selftest runs it again)")
                for name in names]
    checks = await run()
    if passed is not None and key is not None and all(check.ok for check in checks):
        passed.record(key)
    return checks


async def router_models(client: InferenceClient) -> Any:
    """The router's /models; None from a server that is not a router."""
    try:
        return await client.get_json("/models")
    except InferenceError:
        return None


async def _round_trip_checks(client: InferenceClient) -> list[SelfTestCheck]:
    def probe(messages: tuple[Any, ...], max_tokens: int, tool_choice: str) -> ChatRequest:
        return ChatRequest(
            messages=messages,
            tools=(PROBE_TOOL,),
            session="self-test",
            slot=client.section.slots.background,
            max_tokens=max_tokens,
            tool_choice=tool_choice,
        )

    asked = (SystemMessage(content=PROBE_SYSTEM), UserMessage(content=PROBE_USER))
    try:
        first = await client.chat(probe(asked, 64, "required"), _ignore)
    except InferenceError as exc:
        return [SelfTestCheck(name="tool_call", ok=False, detail=f"the request failed: {exc}")]
    problem = _tool_call_problem(first)
    if problem or not first.tool_calls:
        return [SelfTestCheck(name="tool_call", ok=False, detail=problem or "no tool call")]
    call = first.tool_calls[0].function
    checks = [SelfTestCheck(name="tool_call", ok=True, detail=f"{call.name}({call.arguments})")]
    result = ToolMessage(tool_call_id=first.tool_calls[0].id, content=PROBE_RESULT)
    try:
        # one token: a completion is all round_trip and cache_hit need, and every token
        # generated costs a start as much as ~8 prompt tokens (docs/performance.md, bench:up)
        second = await client.chat(probe((*asked, first.message(), result), 1, "none"), _ignore)
    except InferenceError as exc:
        checks.append(SelfTestCheck(name="round_trip", ok=False,
                                    detail=f"the tool result failed: {exc}"))
        return checks
    checks.append(SelfTestCheck(name="round_trip", ok=True,
                                detail=f"finish_reason {second.finish_reason}"))
    loss = cache_outcome(first, second, client.section.cache_loss_ratio)
    detail = f"cache_n {second.cache_n} of {first.slot_tokens} tokens in the slot"
    checks.append(SelfTestCheck(name="cache_hit", ok=loss is None, detail=detail))
    return checks


def _tool_call_problem(completion: Completion) -> str | None:
    if not completion.tool_calls:
        return f"no tool call was parsed (content {completion.content!r:.120})"
    call = completion.tool_calls[0]
    if call.function.name != PROBE_TOOL.name:
        return f"the tool call names {call.function.name!r}, not {PROBE_TOOL.name!r}"
    try:
        arguments = json.loads(call.function.arguments)
    except ValueError:
        return f"the arguments are not JSON: {call.function.arguments!r}"
    if not isinstance(arguments, dict):
        return f"the arguments are not a JSON object: {call.function.arguments!r}"
    return None


def serving_checks(client: InferenceClient, props: Any, slots: Any, models: Any = None
                   ) -> list[SelfTestCheck]:
    """Compare the server's /props, /slots and (a router's) /models with the configuration
    (pure)."""
    if not isinstance(props, dict) or not isinstance(slots, list):
        return [SelfTestCheck(name="serving", ok=False,
                              detail="/props or /slots has an unexpected shape")]
    section = client.section
    recorded = section.serving
    total = props.get("total_slots")
    wanted = (section.slots.main, section.slots.background)
    slot_problems = []
    if recorded.slot_count is not None and total != recorded.slot_count:
        slot_problems.append(f"the server runs {total} slots, recorded {recorded.slot_count}")
    if total != len(slots):
        slot_problems.append(f"/props says {total} slots, /slots lists {len(slots)}")
    if not isinstance(total, int) or max(wanted) >= total:
        slot_problems.append(f"configured slots {wanted} do not all exist (server has {total})")
    checks = [
        SelfTestCheck(
            name="slots",
            ok=not slot_problems,
            detail="; ".join(slot_problems) or f"{total} slots, using {wanted}",
        )
    ]

    ctx = props.get("default_generation_settings", {}).get("n_ctx")
    slot_ctx = sorted({str(s.get("n_ctx")) for s in slots if isinstance(s, dict)})
    ctx_problems = []
    if slot_ctx != [str(ctx)]:
        ctx_problems.append(f"/props n_ctx {ctx} but /slots n_ctx {slot_ctx}")
    if recorded.per_slot_context is not None and ctx != recorded.per_slot_context:
        ctx_problems.append(f"per-slot context {ctx}, recorded {recorded.per_slot_context}")
    checks.append(
        SelfTestCheck(
            name="context",
            ok=not ctx_problems,
            detail="; ".join(ctx_problems) or f"{ctx} tokens per slot",
        )
    )

    template = props.get("chat_template")
    served = sha256(template.encode()) if isinstance(template, str) else None
    want = recorded.chat_template_sha256
    checks.append(
        SelfTestCheck(
            name="chat_template",
            ok=want is None or served == want,
            detail=f"served {served}" + ("" if want is None else f", recorded {want}"),
        )
    )

    speculative = sorted({bool(s.get("speculative")) for s in slots if isinstance(s, dict)})
    ok = recorded.speculative is None or speculative == [recorded.speculative]
    checks.append(
        SelfTestCheck(
            name="speculative",
            ok=ok,
            detail=f"slots speculative: {speculative}, recorded {recorded.speculative}",
        )
    )
    checks.append(_kv_cache_check(kv_cache_type(models, section.model), recorded.kv_cache_type))
    return checks


def _kv_cache_check(served: str | None, recorded: str | None) -> SelfTestCheck:
    if served is None:
        detail = "the server does not say (only a router's /models lists launch flags)"
        return SelfTestCheck(name="kv_cache", ok=recorded is None,
                             detail=detail if recorded is None
                             else f"{detail}, so the recorded {recorded} cannot be checked")
    return SelfTestCheck(name="kv_cache", ok=recorded is None or served == recorded,
                         detail=f"served {served}" + ("" if recorded is None
                                                      else f", recorded {recorded}"))
