"""Class: loopd's own answers repeat what the model chose (a tool name, a find_tool query, cut
or unreadable arguments). Property: whatever its length, an answer repeats at most a short
quoted prefix of it, so a model's long text never comes back whole into its own context (one
such echo took a session past its slot: issue 32); and a call the token limit cut is told so.
"""

from __future__ import annotations

import json

import anyio
from bxcore.chat import FunctionCall, ToolCall
from hypothesis import given, settings
from hypothesis import strategies as st
from loopd.readback import read_back
from loopd.tools import Registry, ToolRunner
from loopd.tools.registry import QUOTED
from support.fake_tools import FakeTools

from .support import FIXED_TIME, Events

BOUND = 4 * QUOTED + 40  # the quoted prefix, its escapes (at most \\uXXXX for a char), a count

model_text = st.text(min_size=0, max_size=20) | st.integers(0, 50_000).map(lambda n: "é<|" * n)
a_call = st.one_of(
    model_text.map(lambda name: (name, "{}")),
    model_text.map(lambda q: ("find_tool", json.dumps({"query": q}))),
    model_text.map(lambda name: ("call_tool", json.dumps({"name": name, "arguments": {}}))),
    st.integers(0, 50_000).map(lambda n: ("call_tool", json.dumps({"name": {"x": "y" * n}}))),
    model_text.map(lambda text: ("fs.read", '{"path": "' + text)),  # cut off, unreadable
    model_text.map(lambda name: (name, "{")),
)


def answer(name: str, arguments: str, *, cut: bool = False) -> str:
    runner = ToolRunner(Registry(FakeTools.schemas), FakeTools(now=lambda: FIXED_TIME))
    call = ToolCall(id="c1", function=FunctionCall(name=name, arguments=arguments))

    async def run() -> str:
        outcome = await runner.run(call, read_back(call.function.arguments), session="s",
                                   number=1, events=Events(), cut=cut)
        return outcome.response.content
    return anyio.run(run)


@settings(max_examples=200, deadline=None)
@given(call=a_call)
def test_an_answer_repeats_only_a_short_prefix_of_what_the_model_chose(call):
    longest = max(len(answer("", "{}")), len(answer("fs.read", "{")))  # loopd's own text
    assert len(answer(*call)) <= longest + 2 * BOUND, call[0][:100]


@given(text=st.text(max_size=200))
def test_a_call_cut_at_the_token_limit_is_told_so_not_to_escape_better(text):
    arguments = '{"path": "a", "text": ' + json.dumps(text)[:-1]  # the limit hit mid-string
    told = answer("fs.write", arguments, cut=True)
    assert "cut off at the token limit" in told and "again will be cut" in told
    assert "escaped as JSON requires" not in told
    assert "cut off" not in answer("fs.write", arguments)  # the same text, not cut: unreadable
