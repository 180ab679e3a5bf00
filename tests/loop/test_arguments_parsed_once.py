"""loopd reads a call's arguments once (docs/decisions/tool-arguments-parsed-once.md): the turn's
check that the model server can read them back (``readback.read_back``, in the turn's limits) is
the parse the repeat check, the name a channel shows and the run all use, and the port gets the
text it would have got anyway. Later requests replay the logged call, and each reads it once.
Judged by counting ``json.loads`` of each text the model wrote over a whole turn (a real
``run_turn`` with a scripted server), over generated argument objects, sent directly to a core
tool and through call_tool (its inner object as an object and as JSON text)."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

from bxcore.canonical import canonical_text
from bxcore.chat import ToolSchema
from bxcore.tools import CLOCK, ToolRequest, ToolResponse, plain_response
from hypothesis import given
from hypothesis import strategies as st
from loopd.tools import Registry, ToolRunner
from loopd.turn import Loop, TurnSettings, run_turn
from support.scratch import scratch_dir

from .support import FIXED_TIME, Events, ScriptedInference, call, new_session, say

WEATHER = ToolSchema(name="weather", description="Forecast for a city.", parameters={})
_real_loads = json.loads

scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
objects = st.dictionaries(st.text(max_size=8), values, max_size=4)


class RecordingPort:
    def __init__(self) -> None:
        self.requests: list[ToolRequest] = []

    async def call(self, request: ToolRequest, events: Any) -> ToolResponse:
        self.requests.append(request)
        return plain_response("ok", "done")


def parses_of(texts: list[str], name: str, arguments: str) -> tuple[list[int], ToolRequest]:
    """How many times each of ``texts`` was parsed over a turn in which the model makes the
    call, then answers (one request after the call: its replay), and what the port got."""
    port = RecordingPort()
    loop = Loop(inference=ScriptedInference([call((name, arguments)), say("done")]),
                tools=ToolRunner(Registry([CLOCK, WEATHER]), port), settings=TurnSettings(),
                now=lambda: FIXED_TIME)
    parsed: list[str] = []

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return _real_loads(text, *args, **kwargs)

    with scratch_dir() as home:  # in memory: the session's fsyncs were most of an example
        session = new_session(home)
        with mock.patch.object(json, "loads", counting):
            asyncio.run(run_turn(loop, session, "go", Events()))
    (request,) = port.requests
    return [parsed.count(text) for text in texts], request


REPLAYS = 1  # the answer's request replays the call once


@given(objects)
def test_a_direct_call_is_parsed_once_and_sent_as_written(arguments):
    text = json.dumps(arguments)
    counts, request = parses_of([text], "clock", text)
    assert counts == [1 + REPLAYS]
    assert request.arguments == text


@given(objects, st.booleans())
def test_a_call_through_call_tool_parses_each_text_once(inner, inner_as_text):
    inner_text = json.dumps(inner)
    outer = json.dumps({"name": "weather", "arguments": inner_text if inner_as_text else inner})
    counts, request = parses_of([outer, inner_text], "call_tool", outer)
    assert counts == [1 + REPLAYS, 1 if inner_as_text else 0]
    assert request.tool == "weather" and request.arguments == canonical_text(inner)
