"""Recorded real streams (tests/fixtures/sse/) replayed through the parser, the assembler and
the client; and the fake server's chunks checked against them, key for key."""

from __future__ import annotations

import json
import random

import pytest
from bxcore.chat import FunctionCall, ToolCall
from bxcore.config import InferenceSection
from bxcore.protocol.loop import Content, Progress, Reasoning
from bxcore.sse import END, NEED_DATA, Message, SSEParser
from hypothesis import given, settings
from hypothesis import strategies as st
from loopd.inference import Completion, InferenceClient, SessionFull, cache_outcome
from loopd.inference.assembler import CompletionAssembler
from loopd.inference.chunks import parse_chunk
from loopd.inference.errors import BadStream

from . import fake_server as fake
from .replay import FIXTURES, fixture_names, read_fixture
from .test_client import REQUEST, Sink

pytestmark = pytest.mark.anyio


def assemble(raw: bytes, cut_every: int = 0):
    parser = SSEParser()
    assembler = CompletionAssembler()
    events = []
    pieces = [raw[i : i + cut_every] for i in range(0, len(raw), cut_every)] if cut_every else [raw]
    for piece in [*pieces, b""]:
        parser.feed(piece)
        while (event := parser.next_event()) is not NEED_DATA and event is not END:
            assert isinstance(event, Message)
            events += assembler.add(parse_chunk(event.data))
    return assembler.finish(thinking_capped=False), events


def test_a_plain_answer_replays_to_its_text_progress_and_timings():
    completion, events = assemble(read_fixture("qwen_turn1"))
    assert completion.content == "Three colors are red, blue, and yellow."
    assert completion.reasoning_content is None and completion.tool_calls is None
    assert (completion.cache_n, completion.prompt_n, completion.predicted_n) == (0, 40, 11)
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress == [
        Progress(total=40, cache=0, processed=0),
        Progress(total=40, cache=0, processed=40),
    ]


def test_the_second_turn_reuses_the_first_turns_cache():
    first, _ = assemble(read_fixture("qwen_turn1"))
    second, _ = assemble(read_fixture("qwen_turn2"))
    assert second.cache_n >= first.slot_tokens - 2
    assert cache_outcome(first, second, 0.5) is None


def test_a_tool_call_replays_with_its_id_name_and_argument_text():
    completion, _ = assemble(read_fixture("qwen_tool_call"))
    [call] = completion.tool_calls
    assert call.id == "b87Mscr4tH8iGurRZdDEymSJSlaHDZFK"
    assert call.function.name == "read_file"
    assert call.function.arguments == '{"path": "README.md"}'
    assert completion.finish_reason == "tool_calls"


def test_reasoning_ended_by_the_control_call_replays_as_reasoning_then_content():
    completion, events = assemble(read_fixture("qwen_think_capped"))
    assert completion.reasoning_content == "It's because the sky"
    assert completion.reasoning_tokens == 5
    assert completion.content == " is blue because the sun is shining on it."
    kinds = [type(e) for e in events if not isinstance(e, Progress)]
    assert kinds == [Reasoning] * 5 + [Content] * 10


@pytest.mark.parametrize("name", fixture_names())
@pytest.mark.parametrize("cut_every", [1, 3, 64])
def test_any_split_of_a_recording_assembles_to_the_same_completion(name, cut_every):
    assert assemble(read_fixture(name), cut_every) == assemble(read_fixture(name))


@pytest.mark.parametrize("name", fixture_names())
async def test_the_client_replays_a_recording_split_at_random(name):
    raw = read_fixture(name)
    rng = random.Random(name)
    cuts = sorted(rng.sample(range(1, len(raw)), 20))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    replies = [fake.Reply.stream(pieces)]
    async with InferenceClient(
        InferenceSection(),
        transport=fake.FakeServer(replies).transport(),
    ) as client:
        result = await client.chat(REQUEST, Sink())
    assert result == assemble(raw)[0]


async def test_the_recorded_context_overflow_is_session_full():
    body = (FIXTURES / "smol_context_full.error").read_bytes()
    server = fake.FakeServer([fake.Reply.error(400, body)])
    async with InferenceClient(InferenceSection(), transport=server.transport()) as client:
        with pytest.raises(SessionFull, match=r"2531 tokens\) exceeds") as full:
            await client.chat(REQUEST, Sink())
    assert full.value.prompt_tokens == 2531  # the server's count, recorded as the turn's Usage


def shape(value):
    """The structure of a JSON value: keys and value types, not values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def kind(chunk: dict) -> str:
    if "usage" in chunk:
        return "usage"
    if "prompt_progress" in chunk:
        return "progress"
    [choice] = chunk["choices"]
    if choice["finish_reason"]:
        return "finish"
    delta = choice["delta"]
    if "tool_calls" in delta:
        return "tool_first" if "id" in delta["tool_calls"][0] else "tool_more"
    return "delta:" + ",".join(sorted(delta))


def chunks_by_kind(raw: bytes) -> dict[str, dict]:
    found = {}
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: {"):
            chunk = json.loads(block[len("data: ") :])
            found.setdefault(kind(chunk), shape(chunk))
    return found


def test_the_fake_servers_chunks_have_the_recorded_keys_and_types():
    recorded = {}
    for name in fixture_names():
        recorded.update(chunks_by_kind(read_fixture(name)))
    steps = fake.completion(
        content="a b", reasoning="r s", tool_calls=(("id1", "read_file", '{"path": "README.md"}'),)
    )
    faked = chunks_by_kind(b"".join(s for s in steps if isinstance(s, bytes)))
    assert set(faked) <= set(recorded), set(faked) - set(recorded)
    for chunk_kind, structure in faked.items():
        assert structure == recorded[chunk_kind], chunk_kind


def test_the_fake_servers_error_body_has_the_recorded_shape():
    recorded = json.loads((FIXTURES / "smol_context_full.error").read_bytes())
    faked = json.loads(
        fake.error_body("m", "exceed_context_size_error", n_prompt_tokens=1, n_ctx=1)
    )
    assert shape(faked) == shape(recorded)


# Class: a stream frame whose token counts are not counts. Property: any value in a recorded
# chunk's prompt_progress or timings fields either assembles to the same completion shape (a
# non-negative count) or is a BadStream naming the field, never another exception (which the
# turn would report as a failure of loopd's own).
READ_FIELDS = {"prompt_progress": ["total", "cache", "processed"],
               "timings": ["cache_n", "prompt_n", "predicted_n"]}
count_value = st.one_of(st.integers(), st.floats(), st.text(max_size=3), st.none(), st.booleans(),
                        st.lists(st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(part=st.sampled_from(["prompt_progress", "timings"]), value=count_value,
       data=st.data())
def test_any_count_in_a_stream_frame_is_a_count_or_a_bad_stream(part, value, data):
    frames = [json.loads(line.removeprefix(b"data: ")) for line in
              read_fixture("qwen_turn1").splitlines() if line.startswith(b"data: {")]
    holding = [f for f in frames if part in f]
    frame = data.draw(st.sampled_from(holding))
    field = data.draw(st.sampled_from(READ_FIELDS[part]))
    frame[part][field] = value
    raw = b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames)
    try:
        completion, events = assemble(raw + b"data: [DONE]\n\n")
    except BadStream as exc:
        assert field in str(exc) and part in str(exc), exc
        return
    assert isinstance(value, int) and value >= 0 and not isinstance(value, bool), value
    assert min(completion.cache_n, completion.prompt_n, completion.predicted_n) >= 0
    assert all(min(e.total, e.cache, e.processed) >= 0 for e in events
               if isinstance(e, Progress))


@given(content=st.one_of(st.none(), st.text(max_size=5)),
       reasoning=st.one_of(st.none(), st.text(max_size=5)),
       calls=st.integers(min_value=0, max_value=2))
def test_a_completion_is_replayed_as_a_message_the_server_reads(content, reasoning, calls):
    """A completion with neither content nor calls (one probe token of reasoning, or the end at
    once) replays with empty content, as the session log's replay does: the server refuses an
    assistant message with neither (HTTP 400). The self-test's slot_switch probe replays one."""
    tool_calls = tuple(ToolCall(id=f"c{n}", function=FunctionCall(name="t", arguments="{}"))
                       for n in range(calls)) or None
    completion = Completion(content=content, reasoning_content=reasoning, tool_calls=tool_calls,
                            cache_n=0, prompt_n=1, predicted_n=1, reasoning_tokens=0,
                            thinking_capped=False)
    message = completion.message()
    assert message.content == ("" if content is None and not calls else content)
    assert message.reasoning_content == reasoning and len(message.tool_calls or ()) == calls
