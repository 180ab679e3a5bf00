"""The inference client against the scriptable fake server: the request, the completion, and
every fault the brief names."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from bxcore.chat import SystemMessage, ToolSchema, UserMessage
from bxcore.config import InferenceSection
from bxcore.protocol.loop import (
    Content,
    Progress,
    Queued,
    Reasoning,
    Retrying,
    ThinkingCapped,
    Waiting,
)
from loopd.inference import (
    BadStream,
    ChatRequest,
    InferenceClient,
    ServerRejected,
    ServerStreamError,
    SessionFull,
    Stalled,
    StreamCut,
    Unavailable,
    UnreadableOutput,
)
from loopd.inference.markers import legacy_marker
from loopd.inference.retry import backoff_delay

from .fake_server import (
    CUT,
    STALL,
    FakeServer,
    Pause,
    Reply,
    WaitFor,
    completion,
    delta_chunk,
    error_body,
    sse,
)

TOOL = ToolSchema(
    name="read_file",
    description="Read a file.",
    core=True,
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
REQUEST = ChatRequest(
    messages=(SystemMessage(content="sys"), UserMessage(content="hi")),
    tools=(TOOL,),
    slot=1,
    session="s1",
)
pytestmark = pytest.mark.anyio

OVERFLOW = error_body(
    "request (5030 tokens) exceeds the available context size (4096 tokens), try increasing it",
    "exceed_context_size_error",
    n_prompt_tokens=5030,
    n_ctx=4096,
)


def section(**overrides) -> InferenceSection:
    settings = dict(
        model="qwen-tools",
        liveness_timeout=0.3,
        first_byte_timeout=1.0,
        waiting_notice=0.05,
        retries=2,
        retry_backoff=0.01,
    )
    return InferenceSection(**{**settings, **overrides})


class Sink:
    def __init__(self):
        self.events = []

    async def __call__(self, event):
        self.events.append(event)

    def of(self, kind):
        return [e for e in self.events if isinstance(e, kind)]


async def no_sleep(_seconds: float) -> None:
    return None


async def chat(fake: FakeServer, request: ChatRequest = REQUEST, **overrides):
    sink = Sink()
    async with InferenceClient(
        section(**overrides), transport=fake.transport(), sleep=no_sleep, jitter=lambda: 0.5
    ) as client:
        result = await client.chat(request, sink)
    return result, sink


async def test_every_request_carries_the_contract_fields():
    fake = FakeServer([Reply.stream(completion(content="Hi"))])
    await chat(fake, max_tokens=48)
    body = fake.chat_bodies[0]
    assert body["stream"] is True and body["return_progress"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["id_slot"] == 1 and body["cache_prompt"] is True
    assert body["model"] == "qwen-tools" and body["reasoning_control"] is True
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.6, 0.95, 20)
    assert body["max_tokens"] == 48
    assert body["messages"] == [  # a session without a marker: test_slot_switch.py
        {"role": "system", "content": legacy_marker("s1") + "sys"},
        {"role": "user", "content": "hi"},
    ]
    assert body["tools"] == [TOOL.as_openai_tool()]


async def test_a_streamed_answer_becomes_a_completion_with_its_timings():
    fake = FakeServer(
        [Reply.stream(completion(content="Three colors here.", cache_n=600, prompt_n=14))]
    )
    result, sink = await chat(fake)
    assert result.content == "Three colors here."
    assert result.reasoning_content is None and result.tool_calls is None
    assert (result.cache_n, result.prompt_n, result.predicted_n) == (600, 14, 3)
    assert result.finish_reason == "stop"
    assert sink.of(Progress) == [
        Progress(total=614, cache=600, processed=600),
        Progress(total=614, cache=600, processed=614),
    ]
    assert "".join(e.text for e in sink.of(Content)) == "Three colors here."


async def test_tool_calls_keep_their_ids_names_and_argument_text():
    calls = (("id-a", "read_file", '{"path": "README.md"}'), ("id-b", "run_shell", "{}"))
    fake = FakeServer([Reply.stream(completion(tool_calls=calls))])
    result, _ = await chat(fake)
    assert [(c.id, c.function.name, c.function.arguments) for c in result.tool_calls] == list(calls)
    assert result.finish_reason == "tool_calls" and result.content is None


async def test_no_first_byte_within_its_limit_is_a_stall_after_a_waiting_event():
    fake = FakeServer([Reply(stall_before_head=True)])
    with pytest.raises(Stalled, match="first_byte_timeout"):
        await chat(fake, first_byte_timeout=0.2)
    assert len(fake.chat_bodies) == 1  # a stall is not retried


async def test_the_waiting_event_says_whether_another_client_holds_the_slot():
    fake = FakeServer([Reply(stall_before_head=True)], slots=[{"id": 1, "is_processing": True}])
    sink = Sink()
    async with InferenceClient(section(first_byte_timeout=0.2), transport=fake.transport()) as c:
        with pytest.raises(Stalled):
            await c.chat(REQUEST, sink)
    assert sink.events == [Waiting(slot_busy=True)]


async def test_silence_after_the_first_byte_is_a_liveness_stall():
    steps = [*completion(content="a b c")[:3], STALL]
    fake = FakeServer([Reply.stream(steps)])
    with pytest.raises(Stalled, match="liveness_timeout"):
        await chat(fake, liveness_timeout=0.1)


async def test_keep_alive_comments_count_as_bytes_for_liveness():
    steps = completion(content="ok")
    alive = [part for _ in range(4) for part in (Pause(0.1), b":\n\n")]
    fake = FakeServer([Reply.stream(steps[:2] + alive + steps[2:])])
    result, _ = await chat(fake, liveness_timeout=0.25)
    assert result.content == "ok"


async def test_a_stream_cut_mid_way_is_retried_and_the_retry_is_announced():
    cut = [*completion(content="partial answer")[:3], CUT]
    fake = FakeServer([Reply.stream(cut), Reply.stream(completion(content="whole"))])
    result, sink = await chat(fake)
    assert result.content == "whole"
    [retrying] = sink.of(Retrying)
    assert retrying.attempt == 1 and retrying.after_ms == 10
    assert "peer closed connection" in retrying.error


async def test_a_stream_that_ends_without_done_is_a_cut():
    fake = FakeServer([Reply.stream(completion(content="x")[:-1])] * 3)
    with pytest.raises(StreamCut, match=r"before \[DONE\]"):
        await chat(fake)
    assert len(fake.chat_bodies) == 3  # the first try and two retries


async def test_503_while_loading_is_retried_until_the_model_answers():
    loading = Reply.error(503, error_body("Loading model", "unavailable_error", 503))
    fake = FakeServer([loading, loading, Reply.stream(completion(content="ready"))])
    result, sink = await chat(fake)
    assert result.content == "ready"
    assert [r.attempt for r in sink.of(Retrying)] == [1, 2]


async def test_a_prompt_over_the_context_is_session_full_and_never_retried():
    fake = FakeServer([Reply.error(400, OVERFLOW)])
    with pytest.raises(SessionFull, match="exceeds the available context size"):
        await chat(fake)
    assert len(fake.chat_bodies) == 1


async def test_another_400_is_rejected_with_the_servers_message_and_not_retried():
    bad = error_body("Expected 'messages' to be an array", "invalid_request_error")
    fake = FakeServer([Reply.error(400, bad)])
    with pytest.raises(ServerRejected, match="Expected 'messages' to be an array"):
        await chat(fake)
    assert len(fake.chat_bodies) == 1


async def test_malformed_sse_is_a_bad_stream():
    steps = [*completion(content="x")[:2], b"data: {not json\n\n"]
    fake = FakeServer([Reply.stream(steps)])
    with pytest.raises(BadStream, match="not JSON"):
        await chat(fake)


async def test_an_error_event_mid_stream_carries_the_servers_message():
    error = {"error": {"code": 500, "message": "slot crashed", "type": "server_error"}}
    fake = FakeServer([Reply.stream([*completion(content="a b")[:3], sse(error)])])
    with pytest.raises(ServerStreamError, match="slot crashed"):
        await chat(fake)
    assert len(fake.chat_bodies) == 1


# Measured from the real server (docs/decisions/replay-what-the-server-reads.md): its tool-call
# parser refusing the model's own output, as an HTTP 500 (not streamed) or an error event.
REFUSED_OUTPUT = {"error": {"code": 500, "message": "The model produced output that does not "
                            "match the expected peg-native format", "type": "server_error"}}


@pytest.mark.parametrize("where", ["status", "stream"])
async def test_output_the_servers_parser_refuses_is_unreadable_output(where):
    reply = (Reply.error(500, json.dumps(REFUSED_OUTPUT).encode()) if where == "status"
             else Reply.stream([*completion(content="a")[:1], sse(REFUSED_OUTPUT)]))
    fake = FakeServer([reply])
    with pytest.raises(UnreadableOutput, match="does not match the expected peg-native"):
        await chat(fake)
    assert len(fake.chat_bodies) == 1


async def test_an_unreachable_socket_is_retried_then_unavailable(tmp_path):
    sink = Sink()
    client = InferenceClient(section(), socket=tmp_path / "absent.sock", sleep=no_sleep)
    async with client:
        with pytest.raises(Unavailable, match="inferproxy"):
            await client.chat(REQUEST, sink)
    assert [r.attempt for r in sink.of(Retrying)] == [1, 2]


async def test_one_request_per_slot_the_second_waits_with_an_event():
    release = asyncio.Event()
    first = completion(content="first")
    fake = FakeServer(
        [
            Reply.stream([*first[:4], WaitFor(release), *first[4:]]),
            Reply.stream(completion(content="second")),
        ]
    )
    sinks = [Sink(), Sink()]
    async with InferenceClient(section(), transport=fake.transport()) as client:
        one = asyncio.create_task(client.chat(REQUEST, sinks[0]))
        while not sinks[0].of(Content):
            await asyncio.sleep(0.01)
        two = asyncio.create_task(client.chat(REQUEST, sinks[1]))
        while not sinks[1].events:
            await asyncio.sleep(0.01)
        assert sinks[1].events == [Queued(ahead=1), Waiting(slot_busy=True)]
        assert len(fake.chat_bodies) == 1
        release.set()
        results = await asyncio.gather(one, two)
    assert [r.content for r in results] == ["first", "second"]
    assert fake.most_in_flight == 1


async def test_requests_on_different_slots_do_not_wait_for_each_other():
    release = asyncio.Event()
    first = completion(content="first")
    fake = FakeServer(
        [
            Reply.stream([*first[:4], WaitFor(release), *first[4:]]),
            Reply.stream(completion(content="other slot")),
        ]
    )
    other_slot = ChatRequest(messages=REQUEST.messages, tools=(), slot=0, session="s2")
    async with InferenceClient(section(), transport=fake.transport()) as client:
        one = asyncio.create_task(client.chat(REQUEST, Sink()))
        while not fake.chat_bodies:
            await asyncio.sleep(0.01)
        two = await client.chat(other_slot, Sink())
        release.set()
        await one
    assert two.content == "other slot"


async def test_the_thinking_cap_ends_reasoning_through_the_control_endpoint():
    fake = FakeServer(
        [
            Reply.stream(
                completion(
                    reasoning="one two three four five", content="answer", chunk_id="chatcmpl-R"
                )
            )
        ]
    )
    result, sink = await chat(fake, thinking_cap=3)
    assert fake.control_bodies == [
        {"id": "chatcmpl-R", "action": "reasoning_end", "model": "qwen-tools"}
    ]
    assert sink.of(ThinkingCapped) == [ThinkingCapped(tokens=3)]
    assert result.thinking_capped is True and result.reasoning_tokens == 5
    assert result.reasoning_content == "one two three four five"
    assert len(sink.of(Reasoning)) == 5


async def test_the_cap_counts_the_reasoning_of_the_turns_earlier_completions():
    """Runaway control: the cap is per turn. A completion whose turn already reasoned 2 of
    a cap of 3 tokens has its reasoning ended at its first token, and the event reports the
    turn's total."""
    fake = FakeServer([Reply.stream(completion(reasoning="one two three", content="answer"))])
    spent = ChatRequest(messages=REQUEST.messages, tools=(TOOL,), slot=1, session="s1",
                        reasoning_spent=2)
    async with InferenceClient(section(thinking_cap=3), transport=fake.transport()) as client:
        sink = Sink()
        result = await client.chat(spent, sink)
    assert len(fake.control_bodies) == 1
    assert sink.of(ThinkingCapped) == [ThinkingCapped(tokens=3)]
    assert result.thinking_capped is True and result.reasoning_tokens == 3


async def test_a_turn_whose_cap_is_spent_ends_reasoning_at_the_first_token():
    fake = FakeServer([Reply.stream(completion(reasoning="more", content="answer"))])
    spent = ChatRequest(messages=REQUEST.messages, tools=(TOOL,), slot=1, session="s1",
                        reasoning_spent=10)
    async with InferenceClient(section(thinking_cap=3), transport=fake.transport()) as client:
        result = await client.chat(spent, Sink())
    assert len(fake.control_bodies) == 1 and result.thinking_capped is True


async def test_a_completion_that_does_not_reason_is_never_capped_however_much_was_spent():
    fake = FakeServer([Reply.stream(completion(content="answer"))])
    spent = ChatRequest(messages=REQUEST.messages, tools=(TOOL,), slot=1, session="s1",
                        reasoning_spent=10)
    async with InferenceClient(section(thinking_cap=3), transport=fake.transport()) as client:
        result = await client.chat(spent, Sink())
    assert fake.control_bodies == [] and result.thinking_capped is False


async def test_a_refused_control_call_is_not_recorded_as_capped():
    fake = FakeServer([Reply.stream(completion(reasoning="a b c d", content="x"))])
    fake.control_answer = {"success": False, "message": "reasoning control not enabled"}
    result, sink = await chat(fake, thinking_cap=2)
    assert len(fake.control_bodies) == 1
    assert result.thinking_capped is False and not sink.of(ThinkingCapped)


async def test_a_failing_control_call_leaves_the_completion_whole():
    fake = FakeServer([Reply.stream(completion(reasoning="a b c d", content="x"))])
    fake.control_status = 500
    fake.control_answer = {"error": {"code": 500, "message": "boom", "type": "server_error"}}
    result, _ = await chat(fake, thinking_cap=2)
    assert result.content == "x" and result.thinking_capped is False


async def test_data_after_done_is_a_bad_stream():
    steps = [*completion(content="x"), sse(delta_chunk("chatcmpl-fake", {"content": "late"}))]
    fake = FakeServer([Reply.stream(steps)])
    with pytest.raises(BadStream, match="after \\[DONE\\]"):
        await chat(fake)


def test_backoff_doubles_per_attempt_and_jitter_scales_it_by_half_to_one_and_a_half():
    assert backoff_delay(1, 1.0, 0.5) == 1.0
    assert backoff_delay(3, 1.0, 0.5) == 4.0
    assert backoff_delay(2, 1.0, 0.0) == 1.0
    assert backoff_delay(2, 1.0, 1.0) == 3.0


def test_the_fake_speaks_json_error_bodies_like_the_server():
    body = json.loads(OVERFLOW)
    assert body["error"]["type"] == "exceed_context_size_error"
    assert httpx.Response(400, content=OVERFLOW).json() == body
