"""Tools: the registry and find_tool, call_tool's lookup (an unknown tool never reaches the
port), FakeTools, and BrokerPort over a broker.sock speaking
bxcore.protocol.broker."""

from __future__ import annotations

import asyncio
import json

import pytest
from bxcore.chat import FunctionCall, ToolCall, ToolSchema
from bxcore.errors import ErrorCode, WireError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import broker
from bxcore.tools import ToolRequest, ToolResponse
from loopd.errors import RegistryError
from loopd.readback import read_back
from loopd.tools import Registry, ToolRunner, load_registry
from loopd.tools.broker import BrokerPort
from loopd.tools.registry import first_clause
from support.fake_tools import ECHO, FakeTools

from .support import FIXED_TIME, Events, registry_json

pytestmark = pytest.mark.anyio

WEATHER = ToolSchema(name="weather", description="Forecast for a city.", parameters={})


def runner() -> tuple[ToolRunner, FakeTools]:
    tools = FakeTools(now=lambda: FIXED_TIME)
    return ToolRunner(Registry([*FakeTools.schemas, WEATHER]), tools), tools


async def run(name: str, arguments: str) -> tuple[str, FakeTools]:
    tool_runner, tools = runner()
    call = ToolCall(id="c", function=FunctionCall(name=name, arguments=arguments))
    outcome = await tool_runner.run(call, read_back(call.function.arguments), session="s1",
                                    number=5, events=Events())
    return outcome.response.content, tools


def test_the_tools_array_is_the_core_tools_then_find_tool_and_call_tool():
    names = [s.name for s in Registry([*FakeTools.schemas, WEATHER]).core_schemas()]
    assert names == ["clock", "find_tool", "call_tool"]


@pytest.mark.parametrize(
    ("query", "found"),
    [("echo", ["echo"]), ("ECHO", ["echo"]), ("city", ["weather"]), ("", ["echo", "weather"]),
     ("clock", []), ("nothing", [])],
)
async def test_find_tool_searches_name_and_description_ignoring_case(query, found):
    content, tools = await run("find_tool", json.dumps({"query": query}))
    if found:
        listing, suffix = content.split("\n")
        assert [s["name"] for s in json.loads(listing)] == found
        assert suffix == "Call it with call_tool."
    else:  # what find_tool finds, and every tool it could have found, named
        assert content == (
            f"No tool matches {json.dumps(query)}. find_tool finds tools by what they do, not the "
            "text you want. Call find_tool again with one of these tool names: echo (Echo); "
            "weather (Forecast for a city)."
        )
    assert tools.requests == []


FILE_TOOLS = Registry([
    ToolSchema(name="fs.read", description="Read a text file the owner granted.", parameters={}),
    ToolSchema(name="fs.list", description="List a granted directory; files show their size.",
               parameters={}),
    ToolSchema(name="ask_memory", description="Ask a question about past work in memory.md.",
               parameters={}),
    ToolSchema(name="echo", description="Return the text. For checking that tool calls work.",
               parameters={}),
])


@pytest.mark.parametrize(
    ("query", "found"),
    [("fs.read", ["fs.read"]),  # the whole query in a name, before any word of it
     ("fs", ["fs.read", "fs.list"]),
     ("read file", ["fs.read"]),  # a word of the query as a part of a name
     ("MEMORY", ["ask_memory"]),
     ("text file", ["fs.read"]),  # the first clause holding the most of the query's words
     ("files", ["fs.read"]),  # "files" meets "file"; fs.list's files are past its first clause
     ("size", ["fs.list"]),  # the whole description, when no first clause holds a word
     ("question", ["ask_memory"]),
     ("ls", []),  # a whole word only: not the "ls" of "calls"
     ("notes.md", []),  # words of three letters or more: not the "md" of "memory.md"
     ("code word", [])],
)
def test_find_tool_finds_by_name_then_by_what_a_tool_does_then_by_its_description(query, found):
    assert [s.name for s in FILE_TOOLS.search(query)] == found


@pytest.mark.parametrize(
    ("description", "clause"),
    [("Read a text file the owner granted, from an optional byte offset.",
      "Read a text file the owner granted, from an optional byte offset"),
     ("List a granted directory: one entry a line.", "List a granted directory"),
     ("Run one command in a directory; prints its output.", "Run one command in a directory"),
     ("Write memory.md or user.md. Takes effect later.", "Write memory.md or user.md"),
     ("Ask fs.read first", "Ask fs.read first")],
)
def test_a_miss_names_each_tool_with_the_first_clause_of_its_description(description, clause):
    """A dot inside a name ("fs.read", "memory.md") does not end the clause; ". ", ": ", "; "
    and the end do."""
    assert first_clause(description) == clause


async def test_a_query_no_channel_can_carry_is_not_run_and_comes_back_escaped():
    """A query holding a lone surrogate (JSON's "\\ud800") is arguments the model server cannot
    read back: not searched, and the answer quoting it is text every channel carries."""
    content, _ = await run("find_tool", '{"query": "x\\ud800"}')
    assert content.startswith("Not run: your arguments for find_tool") and "\\ud800" in content
    content.encode("utf-8")  # raises on a surrogate


def test_find_tool_with_nothing_to_find_says_only_that():
    assert Registry([]).find_tool_text("read") == "No tool matches."


@pytest.mark.parametrize(
    "arguments",
    ['{"name": "nope", "arguments": {}}', '{"name": "clock", "arguments": {}}',
     '{"name": "find_tool", "arguments": {}}', '{"arguments": {}}', '{"name": 3}',
     '{"name": "../x", "arguments": {}}'],
)
async def test_an_unknown_call_tool_never_reaches_the_port(arguments):
    content, tools = await run("call_tool", arguments)
    assert content.startswith("Unknown tool")
    assert tools.requests == []


async def test_an_unknown_call_tool_names_the_tools_it_can_call():
    """A made-up name ("ls") gets the real ones, as a find_tool miss does, not a dead end."""
    content, _ = await run("call_tool", '{"name": "ls", "arguments": {"path": "/x"}}')
    assert content == (
        "Unknown tool 'ls' for call_tool. Call find_tool with one of these tool names to get its "
        "arguments: echo (Echo); weather (Forecast for a city)."
    )
    assert Registry([]).unknown_tool_text("ls", through_call_tool=True) == (
        "Unknown tool 'ls' for call_tool: there are no tools to call."
    )


async def test_an_unknown_tool_called_on_its_own_gets_the_same_help():
    content, _ = await run("ls", '{"path": "/x"}')
    assert content == (
        "Unknown tool 'ls'. Call find_tool with one of these tool names to get its arguments: "
        "echo (Echo); weather (Forecast for a city)."
    )


async def test_call_tool_sends_the_inner_object_as_json_text():
    content, tools = await run("call_tool", '{"name": "echo", "arguments": {"text": "hi"}}')
    assert content == "hi"
    assert tools.requests == [ToolRequest(session="s1", call=5, tool="echo",
                                          arguments='{"text":"hi"}')]


async def test_call_tool_takes_arguments_sent_as_json_text():
    content, _ = await run("call_tool", '{"name": "echo", "arguments": "{\\"text\\": \\"hi\\"}"}')
    assert content == "hi"


async def test_a_core_tool_gets_the_arguments_exactly_as_the_model_wrote_them():
    content, tools = await run("clock", '{ }')
    assert content == FIXED_TIME
    assert tools.requests[0].arguments == "{ }"


@pytest.mark.parametrize(("arguments", "reason"), [
    ("not json", "not valid JSON: Expecting value at offset 0"),
    ("[1]", "a JSON array, not an object"),
    ('"x"', "a JSON string, not an object"),
    ("{", "not valid JSON: Expecting property name enclosed in double quotes at offset 1"),
    ('{"path": "/x/\\ud800"}', "a lone surrogate escape (\\ud800 at offset 13)"),
    ('{"a": NaN}', "NaN is not a JSON number"),
])
async def test_arguments_the_server_cannot_read_back_are_answered_without_the_port(
    arguments, reason
):
    content, tools = await run("clock", arguments)
    assert content.startswith(f"Not run: your arguments for clock ({len(arguments)} characters")
    assert reason in content and "again with its arguments as one JSON object" in content
    assert tools.requests == []


async def test_a_tool_outside_the_tools_array_called_directly_is_pointed_to_call_tool():
    content, tools = await run("echo", '{"text": "x"}')
    assert content == ("Unknown tool 'echo' as a call of its own: call call_tool with the name "
                       "'echo' and its arguments.")
    assert tools.requests == []


async def test_fake_echo_refuses_bad_arguments():
    tools = FakeTools()
    request = ToolRequest(session="s1", call=1, tool="echo", arguments='{"txt": 1}')
    response = await tools.call(request, Events())
    assert response.status == "failed"


def test_registry_file_round_trip_and_errors(tmp_path):
    path = tmp_path / "tools.json"
    path.write_text(registry_json([*FakeTools.schemas, WEATHER]))
    assert load_registry(path).search("forecast") == [WEATHER]
    path.write_text('[{"name": "x", "description": "d"}]')
    with pytest.raises(RegistryError, match=r"tools\.json: 0\.parameters: Field required"):
        load_registry(path)
    path.write_text(registry_json([ECHO, ECHO]))
    with pytest.raises(RegistryError, match=r"tools\.json: .*\['echo'\]"):
        load_registry(path)
    path.write_text(registry_json([ECHO.model_copy(update={"name": "call_tool"})]))
    with pytest.raises(RegistryError, match="reserved"):
        load_registry(path)
    with pytest.raises(RegistryError, match="cannot read"):
        load_registry(tmp_path / "missing.json")


# --- BrokerPort against a broker.sock served here -----------------------------------------

class FakeBroker:
    """Serves broker.sock as bxcore.protocol.broker says: reads one tool_call, answers with
    the scripted frames."""

    def __init__(self, frames: list[Frame]):
        self.frames = frames
        self.requests: list[ToolRequest] = []

    async def handle(self, reader, writer) -> None:
        stream = FrameStream(reader, writer, broker.TO_BROKERD)
        frame = await stream.read(timeout=5)
        self.requests.append(frame.parse(ToolRequest))
        for answer in self.frames:
            await stream.write(answer)
        await stream.close()


async def broker_call(tmp_path, frames: list[Frame]) -> tuple[ToolResponse, Events, FakeBroker]:
    fake = FakeBroker(frames)
    path = tmp_path / "broker.sock"
    server = await asyncio.start_unix_server(fake.handle, path=str(path))
    events = Events()
    try:
        request = ToolRequest(session="s1", call=3, tool="echo", arguments='{"text":"x"}')
        response = await BrokerPort(path).call(request, events)
    finally:
        server.close()
        await server.wait_closed()
    return response, events, fake


OK = ToolResponse.model_validate({"status": "ok", "content": "x", "class": "private",
                                  "untrusted": True, "truncated": False})


async def test_broker_port_sends_the_request_and_returns_the_response(tmp_path):
    response, events, fake = await broker_call(
        tmp_path, [Frame.of(broker.TOOL_RESPONSE, OK, final=True)]
    )
    assert response == OK
    assert fake.requests[0].call == 3
    assert events.seen == []


async def test_broker_port_forwards_tool_waiting_as_an_event(tmp_path):
    waiting = broker.ToolWaiting(approval="ap-1", expires="2026-09-18T13:00:00Z")
    response, events, _ = await broker_call(tmp_path, [
        Frame.of(broker.TOOL_WAITING, waiting, final=False),
        Frame.of(broker.TOOL_RESPONSE, OK, final=True),
    ])
    assert response == OK
    assert [(e.type, e.approval) for e in events.seen] == [("tool_waiting", "ap-1")]


async def test_broker_port_turns_an_error_frame_into_a_failed_answer(tmp_path):
    error = WireError(code=ErrorCode.INTERNAL, message="sandbox broke")
    response, _, _ = await broker_call(tmp_path, [Frame.of(broker.ERROR, error, final=True)])
    assert response.status == "failed"
    assert "internal: sandbox broke" in response.content


async def test_broker_port_answers_failed_when_the_broker_hangs_up(tmp_path):
    response, _, _ = await broker_call(tmp_path, [])
    assert response.status == "failed"
    assert "brokerd failed" in response.content


async def test_broker_port_answers_failed_when_brokerd_is_not_running(tmp_path):
    request = ToolRequest(session="s1", call=1, tool="echo", arguments="{}")
    response = await BrokerPort(tmp_path / "absent.sock").call(request, Events())
    assert response.status == "failed"
    assert "not running" in response.content


def test_find_tool_prefers_names_to_descriptions():
    read = ToolSchema(name="fs.read", description="Read a text file.", parameters={})
    memory = ToolSchema(name="memory", description="Write memory, if the session has not read "
                        "untrusted content.", parameters={})
    registry = Registry([read, memory])
    assert registry.search("read") == [read]  # not also memory, whose description says "read"
    assert registry.search("untrusted") == [memory]  # no name has it: the descriptions count
