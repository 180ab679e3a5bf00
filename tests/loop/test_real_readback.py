"""Class: nothing a model emits makes its session unusable, with the real llama-server as judge.

The property: after a completion of any shape (arguments that are not JSON, lone surrogates as
escapes and as raw bytes, deep nesting, NUL and control characters, long strings, a call cut
off by max_tokens; tool names, content and reasoning of any kind), the session's next plain turn
is answered by the real server (no HTTP error), the log on disk opens again (a loopd restart)
and the turn after it is answered too, and from the first real request after the hostile
completion on, every request's prompt is held in the slot's cache whole: the prompt cache
diverged at most once, where readback.py's form first replaced what the server could not read.

The hostile completions come from a scripted proxy in front of the real server (an httpx
transport, as the fault suite's hostile model speaks the server's format): it answers one chat
request with generated chunks and passes every other request to the real server. The realistic
path needs no proxy: the real server cutting a real tool call off at max_tokens.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Sequence
from itertools import pairwise
from pathlib import Path

import anyio
import httpx
import pytest
from bxcore.chat import ToolSchema
from bxcore.config import InferenceSection
from bxcore.config.inference import SamplingSection
from bxcore.records import Assistant, CacheLoss, ToolResult, Usage
from faults.profile import LONG, by_profile, fuzz_at_most, hang_guard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inference.fake_server import FakeServer, _Body, completion
from loopd.baseline import Baseline
from loopd.errors import TurnEnded
from loopd.inference import InferenceClient
from loopd.inference.request import CHAT_PATH
from loopd.readback import arguments_problem
from loopd.store import SessionStore
from loopd.turn import run_turn
from support.llama import LlamaServer, nonce

from .support import Events, fake_registry, make_loop

pytestmark = pytest.mark.real_server

MODEL = "qwen-tools"  # the tiny Qwen with Boxmaker's bare-JSON tool template
ANSWER_TOKENS = 2  # each real answer is short: the property is about reading the prompt
CACHE_SLACK = 4  # tokens re-tokenised where one request's end meets the next's new text
LONG_EXAMPLES = 1000
EXAMPLES = by_profile(short=4, long=LONG_EXAMPLES)
RAW_MARK = "RAWBYTESHERE"  # replaced in the chunk bytes by raw bytes no UTF-8 decoder accepts
NOT_UTF8 = [b"\xed\xa0\x80", b"\xff", b"\xc3", b"\xf4\x90\x80\x80"]  # a lone surrogate, ...

MARKUP = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>",
          "{{", "{%", "%}", "}}", "```json", '"', "\\", "\x00", "\x1b", "\u2028", "\ufffd",
          "\U0001f600", "é"]
odd_text = st.lists(st.text(st.characters(codec="utf-8"), max_size=8) | st.sampled_from(MARKUP),
                    max_size=8).map("".join)
surrogate_escape = st.sampled_from(["\\ud800", "\\udfff", "\\uDBFF", "\\ud83d", "\\ude00"])
# Integers around where a double runs out (310 digits): nlohmann reads them with strtod.
huge_integer = st.integers(10**300, 10**330) | st.integers(-(10**330), -(10**300))
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | huge_integer | st.floats(allow_nan=False)
    | odd_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def escaped_surrogate(draw: st.DrawFn) -> str:
    """A valid-looking object whose string holds the JSON escape of a lone surrogate."""
    text = json.dumps({"path": f"/x/{draw(odd_text)}MARK"}, ensure_ascii=draw(st.booleans()))
    return text.replace("MARK", draw(surrogate_escape))


@st.composite
def nested(draw: st.DrawFn) -> str:
    depth = draw(st.integers(1, 3000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    return opener * depth + "1" + closer * draw(st.sampled_from([depth, depth // 2]))


arguments_text = st.one_of(
    json_value.map(json.dumps),  # valid JSON, not always an object
    st.dictionaries(odd_text, json_value, max_size=4).map(lambda d: json.dumps(d)[: -1]),
    st.dictionaries(odd_text, json_value, max_size=4).map(json.dumps).flatmap(
        lambda t: st.integers(0, len(t)).map(lambda n: t[:n])),  # cut off anywhere
    escaped_surrogate(),
    nested(),
    st.sampled_from(['{"a": NaN}', '{"a": 1e999}', '{"a": Infinity}', '{"a": 1} tail', "{",
                     '{"a": "\x00"}', '{"a": "\n\t\x1f"}', "\ufeff{}", "", " "]),
    st.integers(1000, 6000).map(lambda n: json.dumps({"text": "y" * n})),  # long, whole
    odd_text,
)
tool_name = st.one_of(
    st.sampled_from(["clock", "echo", "call_tool", "find_tool", "fs.read"]), odd_text)
# A call that runs: the fake echo tool gives back odd text, so tool results of any kind reach the
# real server too.
echo_call = odd_text.map(lambda text: (
    "call_tool", json.dumps({"name": "echo", "arguments": {"text": text}})))
a_call = st.tuples(tool_name, arguments_text) | echo_call


@st.composite
def hostile_completion(draw: st.DrawFn) -> tuple[list[bytes], bool, bool]:
    """The chunks of one completion in the real server's format, with what a model could put
    in it; whether they hold bytes that are not UTF-8 (which loopd refuses, logging
    nothing: llama-server never sends them); and whether max_tokens cut it."""
    calls = tuple((f"call-{i}", *draw(a_call)) for i in range(draw(st.integers(0, 2))))
    content = draw(st.none() | odd_text)
    raw = draw(st.none() | st.sampled_from(NOT_UTF8))
    if raw is not None:
        content = (content or "") + RAW_MARK
    steps = completion(content=content or "", reasoning=draw(st.none() | odd_text) or "",
                       tool_calls=calls)
    cut = bool(calls) and draw(st.booleans())
    if cut:  # cut off by max_tokens, as the real server ends it
        steps = [s.replace(b'"finish_reason":"tool_calls"', b'"finish_reason":"length"')
                 for s in steps]
    if raw is not None:
        steps = [s.replace(RAW_MARK.encode(), raw) for s in steps]
    return steps, raw is not None, cut


class ScriptedProxy(httpx.AsyncBaseTransport):
    """The real server's socket, but the next chat request is answered with ``pending``."""

    def __init__(self, socket: Path):
        self._upstream = httpx.AsyncHTTPTransport(uds=str(socket))
        self.pending: list[bytes] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == CHAT_PATH and self.pending is not None:
            steps, self.pending = self.pending, None
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=_Body(steps, FakeServer([])))
        return await self._upstream.handle_async_request(request)

    async def aclose(self) -> None:
        await self._upstream.aclose()


class Trial:
    """One session on the real server: its turns, and the log read back as a restart would."""

    def __init__(self, home: Path, server: LlamaServer, identity: str = "",
                 summary: str | None = None, tools: Sequence[ToolSchema] | None = None):
        self.store = SessionStore(home)
        self.server = server
        self.id = f"rb-{secrets.token_hex(6)}"
        baseline = Baseline(system=f"{nonce()} You are terse.\n\n{identity}",
                            tools=list(tools or fake_registry().core_schemas()), summary=summary)
        self.session = self.store.create(self.id, baseline, slot=0, time="2026-12-03T00:00:00Z")

    def turn(self, content: str, injected: list[bytes] | None = None,
             choices: tuple[str, ...] = ("none",) * 4, max_tokens: int = ANSWER_TOKENS) -> str:
        """One turn through the proxy; its ``TurnEnded`` code, or "done"."""
        async def run() -> str:
            proxy = ScriptedProxy(self.server.socket)
            proxy.pending = injected
            section = InferenceSection(model=MODEL, max_tokens=max_tokens, retries=0,
                                       sampling=SamplingSection(temperature=0))
            async with InferenceClient(section, transport=proxy) as client:
                try:
                    await run_turn(make_loop(client), self.session, content, Events(), choices)
                except TurnEnded as ended:
                    return f"{ended.code.value}: {ended}"
            return "done"
        return anyio.run(run)

    def reopen(self) -> None:
        self.session = self.store.open(self.id)

    def usages_since(self, start: int) -> list[Usage]:
        return [r for r in self.session.records[start:] if isinstance(r, Usage)]


def assert_cache_held(trial: Trial, injected: bool) -> None:
    """Each real request found the whole prompt of the one before in the slot (the request
    after a hostile completion too: what changed is in the completion, not the prompt before
    it), and the only cache loss loopd saw is the one allowed: on the first request after the
    hostile completion was replayed (the server never held it as replayed). ``injected``: the
    session's first completion is the proxy's, whose timings are made up."""
    records = trial.session.records
    usages = [i for i, r in enumerate(records) if isinstance(r, Usage)]
    for before, after in pairwise(records[i] for i in (usages[1:] if injected else usages)):
        assert isinstance(before, Usage) and isinstance(after, Usage)
        assert after.cache_n >= before.cache_n + before.prompt_n - CACHE_SLACK, (before, after)
    hostile = next((i for i, r in enumerate(records) if isinstance(r, Assistant) and (
        injected or any(arguments_problem(c.function.arguments) for c in r.tool_calls or ()))),
        None)
    after_hostile = [i for i in usages if hostile is not None and i > hostile]
    allowed = {after_hostile[1] + 1} if len(after_hostile) > 1 else set()
    losses = {i for i, r in enumerate(records) if isinstance(r, CacheLoss)}
    assert losses <= allowed, [records[i] for i in losses]


def check_cut_told(trial: Trial, cut: bool) -> None:
    """A call the token limit cut, which the server could not read back, is answered saying
    so (not blaming its escaping); no other call's answer speaks of the limit."""
    records = trial.session.records
    hostile = next(r for r in records if isinstance(r, Assistant))
    results = {r.tool_call_id: r.content for r in records if isinstance(r, ToolResult)}
    calls = hostile.tool_calls or []
    for call in calls:
        told = "cut off at the token limit" in results[call.id]
        last_cut = cut and call is calls[-1] and results[call.id].startswith("Not run: your")
        assert told == (last_cut and arguments_problem(call.function.arguments) is not None), (
            call, results[call.id])


def check_session_survives(trial: Trial, injected: bool) -> None:
    """A plain turn is answered; the log opens again (a restart) and the next turn is too,
    with no cache loss after the one allowed."""
    assert trial.turn("Say ok.") == "done", trial.server.log()
    trial.reopen()
    assert trial.turn("Say ok again.") == "done", trial.server.log()
    assert_cache_held(trial, injected)


@pytest.fixture(scope="module")
def server(llama_router: LlamaServer) -> Iterator[LlamaServer]:
    yield llama_router


# Each example is a few real completions: the short profile's own count and checks. The long one
# sets both in fuzz_at_most (hypothesis takes one settings object per test).
short_profile = (lambda test: test) if LONG else settings(
    max_examples=EXAMPLES, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large])


@fuzz_at_most(LONG_EXAMPLES)
@hang_guard(EXAMPLES, 120)
@short_profile
@given(injected=hostile_completion(), identity=odd_text, summary=st.none() | odd_text)
def test_any_completion_leaves_a_session_the_real_server_answers(
    server, tmp_path, injected, identity, summary
):
    """Identity text and a compaction summary of any kind open the session (what memoryd and
    compaction hand loopd), so the real server reads those too."""
    steps, not_utf8, cut = injected
    trial = Trial(tmp_path / secrets.token_hex(4), server, identity, summary)
    outcome = trial.turn("Hello.", steps)
    if not_utf8:  # refused as a bad stream: nothing of it is logged
        assert outcome.startswith("inference"), outcome
        assert not [r for r in trial.session.records if isinstance(r, Assistant)]
    else:
        assert outcome == "done", outcome
        check_cut_told(trial, cut)
    check_session_survives(trial, injected=not not_utf8)


# No proxy: what the real model writes under the server's own tool-call grammar. Measured
# (docs/decisions/replay-what-the-server-reads.md): a required call cut at 10 tokens comes back
# with arguments "{", finish_reason "length"; asked for it, the model writes the escape of a
# lone surrogate and the server returns it as the call's arguments.
REAL_ATTACKS = [
    ("Use find_tool to search for a tool that writes long poems about the sea.", 8),
    ("Call the echo tool with the text /x/\\ud800.txt (write it exactly, with the backslash "
     "escape).", 60),
]


@pytest.mark.parametrize(("prompt", "max_tokens"), REAL_ATTACKS)
def test_what_the_real_model_emits_leaves_a_session_the_server_answers(
    server, tmp_path, prompt, max_tokens
):
    trial = Trial(tmp_path, server)
    outcome = trial.turn(prompt, None, ("required", "none", "none"), max_tokens=max_tokens)
    assert outcome == "done", outcome
    calls = [c for r in trial.session.records if isinstance(r, Assistant)
             for c in r.tool_calls or ()]
    print(f"the real model emitted: {[(c.function.name, c.function.arguments) for c in calls]}")
    check_session_survives(trial, injected=False)


def test_a_call_the_servers_parser_refuses_is_answered_without_tools(server, tmp_path):
    """With tools on (``auto``), a real call cut at 12 tokens is refused by the server's own
    parser (an error event "does not match the expected peg-native format", measured with this
    tool and prompt), every time for the same prompt: the turn asks once more without tools and
    is answered, and the session goes on
    (the third attack on issue 32 found identity text that made the tiny model do this on
    every turn)."""
    fs_write = ToolSchema(name="fs_write", description="write a file", core=True, parameters={
        "type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"]})
    trial = Trial(tmp_path, server, tools=[fs_write])
    outcome = trial.turn("Write a long poem about the sea to /tmp/sea.txt using fs_write.", None,
                         ("auto", "none", "none"), max_tokens=12)
    assert outcome == "done", (outcome, trial.server.log()[-2000:])
    answers = [r for r in trial.session.records if isinstance(r, Assistant)]
    assert len(answers) == 1 and answers[0].tool_calls is None and answers[0].content, answers
    check_session_survives(trial, injected=False)


def test_a_model_that_repeats_a_call_still_answers_every_turn(server, tmp_path):
    """The real tiny model, asked to use the clock with the server's default tool choice,
    repeats the call until the turn's repeat limit; the log then primes it to repeat on every
    later turn. Each turn that hits a limit is asked once more without tools, so every turn is
    answered, after a restart too (the attack on issue 32 found four of four ending
    ``turn_limit``, for good)."""
    trial = Trial(tmp_path, server)
    first = trial.turn("Use the clock tool to tell me the time.", None, (), max_tokens=512)
    assert first == "done", (first, trial.server.log()[-2000:])
    assert trial.turn("Say hello.", None, (), max_tokens=128) == "done"
    trial.reopen()
    assert trial.turn("Say ok.", None, (), max_tokens=128) == "done"
