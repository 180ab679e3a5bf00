"""What a session holds in the slot after a completion is the start of its next request, with the
real llama-server (the tiny Qwen, Boxmaker's bare-JSON tool template) as judge.

The property: for a conversation of any turns through a real ``loopd serve`` (plain answers, calls
the model must make, calls it may make), every request after a completion finds in the slot all
the session held: the prompt and every generated token, except the server's floor and what its own
parser leaves out of the message. Read from the server's counts in the Usage records: the session
held ``cache_n + prompt_n + predicted_n`` tokens, and the next request's ``cache_n`` is the common
prefix of those with its prompt. Allowed (``reread_allowed``):

- 1, the floor: the last generated token (an end of turn, or the token ``max_tokens`` cut at) is
  sampled but never evaluated, so it is not in the slot;
- after a call, 1 + ``GRAMMAR_SPACE`` more: the tool-call grammar (json-schema-to-grammar.cpp's
  ``SPACE_RULE``, ``"\\n"{1,2} [ \\t]{0,20}``) lets the model write up to 22 whitespace
  characters after the call's JSON, which the parser leaves out of the message (the tiny Qwen
  writes its closing fence's newline and then 20 spaces there), and the first newline joins the
  call's last token;
- nothing for a call whose arguments the server could not read back (readback.py replaces them:
  the one divergence docs/decisions/replay-what-the-server-reads.md allows): that pair is left
  out.

Before the bare-JSON template rendered a call right after the content the parser had kept before
it ("```json\\n", its newline too), it put a newline of its own between them, and the next request
re-read the whole call: 65 tokens for the day bench's call to fs.read, and in the explicit example
33 (allowed 24, failing); with the call rendered where the model wrote it, 23.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from itertools import pairwise

import pytest
from bxcore.records import Assistant, Usage
from faults.profile import by_profile, hang_guard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from loopd.readback import arguments_problem

from .real_stack import RealStack, real_stack

pytestmark = pytest.mark.real_server

FLOOR = 1
GRAMMAR_SPACE = 1 + 22  # the token the first newline joins, then up to 22 whitespace tokens
EXAMPLES = by_profile(short=3, long=30)

CHOICES = (("none",), ("required", "none"), ("auto",))
ASKS = (
    "Use call_tool to run echo with the text {word}, then tell me what it returned.",
    "What time is it? Use the clock tool.",
    "Use find_tool to look for a tool about {word}.",
    "Say {word} in one short sentence.",
    "Write a numbered list of three things about {word}.",
    "First say what you will do about {word} in one sentence, then call the clock tool.",
    # the tiny Qwen answers this with the content "```json\n" before its call
    "Show me the JSON for calling the clock tool, in a markdown code block, and call it.",
)
word = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=12)
turn = st.tuples(st.sampled_from(ASKS), word, st.sampled_from(CHOICES))


@pytest.fixture(scope="module")
def stack() -> Iterator[RealStack]:
    with real_stack() as running, running.loopd():
        yield running


def reread_allowed(answer: Assistant) -> int | None:
    """Tokens the next request may re-read after ``answer``; None: not judged (unreadable call)."""
    if not answer.tool_calls:
        return FLOOR
    if any(arguments_problem(c.function.arguments) for c in answer.tool_calls):
        return None
    return FLOOR + GRAMMAR_SPACE


def rereads(stack: RealStack, session: str) -> list[tuple[int, int, Assistant]]:
    """Per completion followed by another: (re-read, allowed, the completion's answer)."""
    records = stack.records(session)
    completions = [(records[i - 1], r) for i, r in enumerate(records)
                   if isinstance(r, Usage) and isinstance(records[i - 1], Assistant)]
    found = []
    for (answer, before), (_, after) in pairwise(completions):
        allowed = reread_allowed(answer)  # type: ignore[arg-type]
        if allowed is not None:
            held = before.cache_n + before.prompt_n + before.predicted_n
            found.append((held - after.cache_n, allowed, answer))
    return found


@hang_guard(EXAMPLES, 600)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(turns=st.lists(turn, min_size=2, max_size=3))
@example(turns=[(ASKS[6], "", ("required", "none")), (ASKS[3], "thanks", ("none",))])
def test_a_session_finds_all_it_held_but_the_floor(stack, turns):
    session = f"prefix-{secrets.token_hex(4)}"
    for ask, text, choices in turns:
        stack.say(session, ask.format(word=text), *choices)
    found = rereads(stack, session)
    assert found, [r.type for r in stack.records(session)]
    over = [(reread, allowed, answer.content, answer.tool_calls)
            for reread, allowed, answer in found if reread > allowed]
    assert not over, over
