"""The self-test's ``slot_switch`` check: a session that leaves its slot for another session comes
back with its cache (docs/decisions/slot-switch-ram-cache.md).

Main sessions share one slot, so every reply in another thread switches it. The server keeps
the session that leaves only through its host-RAM prompt cache, and only when it is on
(``--cache-ram`` not 0) and slots are matched by similarity (``--slot-prompt-similarity`` not
0, which is also what makes it save a slot's prompt before another one replaces it). Neither
setting shows in ``/props`` or ``/slots``, so the check tries it: on the background slot, probe
session A, then probe session B with the same system text (as Boxmaker's sessions share their
baseline), then A again, one message longer. A must come back with everything it had in the
slot, bar ``SLACK`` tokens; the failure names the flags, and the one set to 0 where the router's
``/models`` shows the model's command line.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Sequence
from typing import Any

from bxcore.chat import SystemMessage, UserMessage
from bxcore.protocol.loop import TurnEventBody

from .api import ChatRequest, Completion
from .client import InferenceClient
from .errors import InferenceError
from .selftest import SelfTestCheck

NAME = "slot_switch"
# Tokens of a returning session the server may evaluate again: it always evaluates at least the
# last one, and the template may render the replayed answer's end differently from how it was
# generated (measured: 1 to 2 with the tiny Qwen).
SLACK = 4
# About 50 tokens of system text: a lost session re-reads all of it, over ten times the slack, and
# the three requests stay cheap at every start (each probe session reads it: they share only the
# template's first tokens).
PROBE_SYSTEM = "You are a terse assistant checking a model server. " + " ".join(
    f"Rule {n}: answer in one short line and never repeat the question back." for n in range(2)
)
FLAGS = {
    "--cache-ram": ("-cram", "the host-RAM prompt cache is off", "--cache-ram 8192 (the default)"),
    "--slot-prompt-similarity": (
        "-sps", "slots are not matched by similarity, so a slot's prompt is never saved before "
        "another replaces it", "--slot-prompt-similarity 0.10 (the default)",
    ),
}
HOW_TO_FIX = (
    "the server must run with its host-RAM prompt cache on (--cache-ram, not 0; default 8192 "
    "MiB) and slot similarity on (--slot-prompt-similarity, not 0; default 0.10)"
)


async def _ignore(_event: TurnEventBody) -> None:
    return None


def _probe(client: InferenceClient, session: str, messages: Sequence[Any]) -> ChatRequest:
    return ChatRequest(
        messages=tuple(messages), tools=(), session=session, max_tokens=1, tool_choice="none",
        slot=client.section.slots.background, thinking=False,
    )


async def slot_switch_check(client: InferenceClient) -> SelfTestCheck:
    """Three probe requests on the background slot: A, B, then A one message longer."""
    tag = secrets.token_hex(4)
    a = f"self-test-switch-a-{tag}"
    b = f"self-test-switch-b-{tag}"
    opening = [SystemMessage(content=PROBE_SYSTEM), UserMessage(content="Name a colour.")]
    try:
        first = await client.chat(_probe(client, a, opening), _ignore)
        await client.chat(_probe(client, b, [opening[0], UserMessage(content="Name a fruit.")]),
                          _ignore)
        longer = [*opening, first.message(), UserMessage(content="Another one.")]
        back = await client.chat(_probe(client, a, longer), _ignore)
    except InferenceError as exc:
        return SelfTestCheck(name=NAME, ok=False, detail=f"the probe requests failed: {exc}")
    reread = reread_tokens(first, back)
    detail = (f"a session back on its slot after another re-read {reread} of its "
              f"{first.slot_tokens} tokens")
    if reread <= SLACK:
        return SelfTestCheck(name=NAME, ok=True, detail=detail)
    return SelfTestCheck(name=NAME, ok=False, detail=f"{detail}: {await _diagnosis(client)}")


def reread_tokens(before: Completion, back: Completion) -> int:
    """Tokens the session had in the slot after ``before`` that ``back`` did not find cached."""
    return max(0, before.slot_tokens - back.cache_n)


async def _diagnosis(client: InferenceClient) -> str:
    try:
        models = await client.get_json("/models")
    except InferenceError:
        return HOW_TO_FIX
    named = flags_turned_off(models, client.section.model)
    if not named:
        return HOW_TO_FIX
    return "; ".join(named)


def flags_turned_off(models: Any, model: str) -> list[str]:
    """What the router's ``/models`` shows ``model`` runs with that breaks the switch, each with
    the flag that fixes it (pure). Empty when it shows nothing of the kind (or is no router)."""
    data = models.get("data") if isinstance(models, dict) else None
    entry = next((m for m in data or () if isinstance(m, dict) and m.get("id") == model), None)
    args = entry.get("status", {}).get("args") if isinstance(entry, dict) else None
    if not isinstance(args, list):
        return []
    found = []
    for flag, (short, meaning, fix) in FLAGS.items():
        for name, value in itertools.pairwise(args):
            if name in (flag, short) and _is_zero(value):
                found.append(f"{model} runs with {name} {value}: {meaning}; set {fix}")
    return found


def _is_zero(value: Any) -> bool:
    try:
        return float(value) == 0.0
    except (TypeError, ValueError):
        return False
