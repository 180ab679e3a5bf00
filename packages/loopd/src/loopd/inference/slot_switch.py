"""The self-test's ``slot_switch`` check: a session that leaves its slot for another session comes
back with its cache, and a new session starts on the baseline the slot holds
(docs/decisions/new-thread-on-the-baseline.md).

Main sessions share one slot, so every reply in another thread switches it. The server keeps
the session that leaves only through its host-RAM prompt cache, and only when it is on
(``--cache-ram`` not 0) and slots are never matched by similarity (``--slot-prompt-similarity``
1, so every switch saves the held session first: sessions share their baseline, and at a lower
value a held session that is mostly the baseline is reused in place and lost). Neither setting
shows in ``/props`` or ``/slots``, so the check tries it: on the background slot, probe session
A, then probe session B with the same system text (as Boxmaker's sessions share their baseline),
then A again, one message longer. A must come back with everything it had in the slot, bar
``SLACK`` tokens, and B must have found the system text cached; the failure names the flags,
and the one set wrong where the router's ``/models`` shows the model's command line.

What the check finds is decided by the server's build, the model and its template, and the
flags the router launched the model with, so ``loopd serve`` sends it once per those
(``slot_switch_once``; docs/decisions/slot-switch-once-per-server.md).
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from bxcore.chat import SystemMessage, UserMessage
from bxcore.protocol.loop import TurnEventBody
from bxcore.util import sha256

from .api import ChatRequest, Completion
from .client import InferenceClient
from .errors import InferenceError
from .markers import MARKERS
from .passed import PassedProbes, launch_args, probe_key
from .selftest import SelfTestCheck, once, router_models

NAME = "slot_switch"
# Tokens of a returning session the server may evaluate again: it always evaluates at least the
# last one, and the template may render the replayed answer's end differently from how it was
# generated (measured: 1 to 2 with the tiny Qwen).
SLACK = 4
# About 50 tokens of system text, read once (B finds it cached), and A's own part of about 30
# tokens: a lost A re-reads at least that, several times the slack.
PROBE_SYSTEM = "You are a terse assistant checking a model server. " + " ".join(
    f"Rule {n}: answer in one short line and never repeat the question back." for n in range(2)
)
PROBE_A = ("Name a colour that is common in nature, such as the colour of the sky, of grass or "
           "of the sea, in one word.")
# flag: (short form, what is wrong, the fix, whether a value is wrong)
FLAGS: dict[str, tuple[str, str, str, Callable[[float], bool]]] = {
    "--cache-ram": ("-cram", "the host-RAM prompt cache is off", "--cache-ram 8192 (the default)",
                    lambda value: value == 0.0),
    "--slot-prompt-similarity": (
        "-sps", "slots are matched by similarity, so a session sharing most of its prompt with "
        "the next one (the baseline) is reused in place and lost instead of saved",
        "--slot-prompt-similarity 1", lambda value: value < 1.0,
    ),
}
HOW_TO_FIX = (
    "the server must run with its host-RAM prompt cache on (--cache-ram, not 0; default 8192 "
    "MiB) and slots never matched by similarity (--slot-prompt-similarity 1; default 0.10)"
)


# What the check sends and accepts: a change to it makes every key new.
PROBE = sha256(json.dumps([NAME, PROBE_SYSTEM, PROBE_A, SLACK, MARKERS[:2]]).encode())


async def _ignore(_event: TurnEventBody) -> None:
    return None


def _probe(client: InferenceClient, session: str, marker: str, messages: Sequence[Any]
           ) -> ChatRequest:
    return ChatRequest(
        messages=tuple(messages), tools=(), session=session, max_tokens=1, tool_choice="none",
        slot=client.section.slots.background, thinking=False, marker=marker,
    )


async def slot_switch_once(client: InferenceClient, passed: PassedProbes | None
                           ) -> SelfTestCheck:
    """``slot_switch_check`` once per server build, model, template and launch flags: the key
    is read from the running server at every start (``/props``, the router's ``/models``), so
    another build, model file or flag sends the requests again. Every time without ``passed``,
    and from a server that does not show the model's flags (not a router): the flags decide."""
    key = None
    if passed is not None:
        try:
            props = await client.get_json("/props")
        except InferenceError:  # no key: the check runs and names what failed
            props = None
        models = await router_models(client)
        if launch_args(models, client.section.model) is not None:
            key = probe_key(client.section, PROBE, props, models)

    async def run() -> list[SelfTestCheck]:
        return [await slot_switch_check(client)]

    return (await once(passed, key, (NAME,), run))[0]


async def slot_switch_check(client: InferenceClient) -> SelfTestCheck:
    """Three probe requests on the background slot: A, B, then A one message longer. A and B
    have the first two of loopd's markers, whose first tokens differ (markers.py); the system
    text starts with a nonce, so nothing an earlier check left in the cache is found."""
    tag = secrets.token_hex(4)
    a, b = f"self-test-switch-a-{tag}", f"self-test-switch-b-{tag}"
    system = SystemMessage(content=f"Check {tag}. {PROBE_SYSTEM}")
    opening = [system, UserMessage(content=PROBE_A)]
    try:
        first = await client.chat(_probe(client, a, MARKERS[0], opening), _ignore)
        other = await client.chat(
            _probe(client, b, MARKERS[1], [system, UserMessage(content="Name a fruit.")]),
            _ignore)
        longer = [*opening, first.message(), UserMessage(content="Another one.")]
        back = await client.chat(_probe(client, a, MARKERS[0], longer), _ignore)
    except InferenceError as exc:
        return SelfTestCheck(name=NAME, ok=False, detail=f"the probe requests failed: {exc}")
    reread = reread_tokens(first, back)
    detail = (f"a session back on its slot after another re-read {reread} of its "
              f"{first.slot_tokens} tokens; a new one found {other.cache_n} tokens of the "
              f"shared system text cached")
    # B shares A's prompt up to A's marker: the system text, which is far longer than the slack
    if reread <= SLACK and other.cache_n > SLACK:
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
    for flag, (short, meaning, fix, wrong) in FLAGS.items():
        for name, value in itertools.pairwise(args):
            number = _number(value)
            if name in (flag, short) and number is not None and wrong(number):
                found.append(f"{model} runs with {name} {value}: {meaning}; set {fix}")
    return found


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
