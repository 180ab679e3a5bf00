"""Class 9: loopd survives anything the model emits.

Arguments that cannot be encoded (a lone surrogate behind a ``\\ud800`` escape, one in the
name call_tool is asked for) used to raise out of ToolRunner.run, ending the turn with an
assistant tool call and no tool result. Every tool call gets a result and the session replays:
a property over hostile arguments in process, and the attack through the real loopd, brokerd
(bubblewrap) and memoryd.
"""

from __future__ import annotations

import json

import anyio
import pytest
from bxcore.chat import ToolCall
from bxcore.frames import Frame, encode_frame
from bxcore.protocol import broker as broker_wire
from bxcore.records import ToolResult
from bxcore.tools import ToolRequest, ToolResponse, plain_response
from hypothesis import given
from hypothesis import strategies as st
from loop.support import fake_registry
from loopd.readback import read_back
from loopd.store import SessionStore
from loopd.tools.dispatch import ToolRunner

from .laundering_support import directive, scripted_rig, tool_results, via_call_tool

# Text with what breaks encoders: lone surrogates, NULs, bidi overrides, deep nesting.
hostile_text = st.text(alphabet=st.sampled_from(
    ["a", "/", "\\", '"', "\x00", "\ud800", "\udfff", "\u202e", "\U0001f600", "é"]), max_size=8)
values = st.recursive(st.none() | st.booleans() | st.integers() | hostile_text,
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(hostile_text, inner, max_size=3), max_leaves=12)


class WirePort:
    """A port that encodes each request as the broker.sock frame would, as BrokerPort does."""

    def __init__(self) -> None:
        self.sent: list[ToolRequest] = []

    async def call(self, request: ToolRequest, events: object) -> ToolResponse:
        encode_frame(Frame.of(broker_wire.TOOL_CALL, request, final=False))
        self.sent.append(request)
        return plain_response("ok", "done")


async def _no_events(_event: object) -> None:
    return None


@given(name=st.sampled_from(["call_tool", "echo", "clock", "find_tool", "\ud800"]),
       target=st.sampled_from(["echo", "clock", "\ud800", "nope"]) | hostile_text,
       inner=values, raw=st.booleans())
def test_every_call_gets_an_answer_that_can_be_written(name, target, inner, raw):
    runner = ToolRunner(fake_registry(), WirePort())
    body = {"name": target, "arguments": inner} if name == "call_tool" else {"text": inner}
    arguments = json.dumps(body) if not raw else json.dumps(body)[:-1]
    call = ToolCall.model_validate({"id": "c1", "type": "function",
                                    "function": {"name": name, "arguments": arguments}})
    read = read_back(arguments)
    outcome = anyio.run(lambda: runner.run(call, read, session="s1", number=1,
                                           events=_no_events))
    ToolResult.model_validate({"time": "2026-01-01T00:00:00Z", "call": 1, "tool_call_id": "c1",
                               "content": outcome.response.content,
                               "class": outcome.response.data_class,
                               "untrusted": outcome.response.untrusted,
                               "truncated": False}).canonical()
    encode_frame(Frame.of("tool_result", {"name": outcome.name}, final=False))


@pytest.mark.sandbox
def test_hostile_arguments_through_the_real_daemons_leave_a_whole_replayable_log(short_dir):
    with scripted_rig(short_dir) as rig:
        stack, home = rig.stack, rig.stack.home
        calls = [
            via_call_tool("fs.read", {"path": "\ud800"}),
            via_call_tool("fs.read", {"path": str(rig.granted / "a.txt"), "x": ["\udfff"]}),
            via_call_tool("\ud800", {}),
            ("call_tool", {"name": "fs.read", "arguments": "{\"path\": \"\\ud800\"}"}),
            via_call_tool("fs.read", {"path": str(rig.granted / "a.txt")}),
        ]
        end = stack.turn("hostile", directive(*calls), resume=False)[-1]
        assert end.kind == "turn_done", end
        results = tool_results(home, "hostile")
        assert len(results) == len(calls)
        assert results[-1]["content"] == "alpha\n"  # the loop went on after the hostile ones
        assert all(r["content"].startswith(("Not run", "Unknown tool")) for r in results[:4])
        SessionStore(home).open("hostile")  # replays: every record parses, every call answered
        # and the session goes on
        assert stack.turn("hostile", "hello", resume=True)[-1].kind == "turn_done"
