"""The turn loop: record sequences for a plain, a tool and a call_tool turn, one test per limit
row of the design's table, cache loss, and errors that leave no trace."""

from __future__ import annotations

import asyncio
import json

import pytest
from bxcore.errors import ErrorCode
from bxcore.protocol.loop import ThinkingCapped
from bxcore.records import ToolResult, User
from loopd.epochs import EpochSettings, needs_compaction
from loopd.errors import TurnEnded
from loopd.inference.api import ChatRequest
from loopd.inference.errors import ServerRejected, SessionFull, Unavailable, UnreadableOutput
from loopd.store import SessionStore
from loopd.turn import INTERRUPTED, REPEATED, STOPPED, record_completion, run_turn
from support.fake_tools import FakeTools

from .support import (
    FIXED_TIME,
    Events,
    ScriptedInference,
    call,
    make_loop,
    new_session,
    record_types,
    say,
)

pytestmark = pytest.mark.anyio


def results(session) -> list[ToolResult]:
    return [r for r in session.records if isinstance(r, ToolResult)]


async def test_a_plain_turn(tmp_path):
    session = new_session(tmp_path)
    inference = ScriptedInference([say("Hello.")])
    events = Events()
    done = await run_turn(make_loop(inference), session, "hi", events)
    assert done.content == "Hello."
    assert record_types(session) == ["session_start", "user", "assistant", "usage"]
    (request,) = inference.requests
    assert [m.role for m in request.messages] == ["system", "user"]
    assert [t.name for t in request.tools] == ["clock", "find_tool", "call_tool"]
    assert request.slot == 0 and request.session == "s1"
    assert done.usage.prompt_n == 10 and done.usage.predicted_n == 5
    assert events.seen == []


async def test_a_tool_turn(tmp_path):
    session = new_session(tmp_path)
    inference = ScriptedInference([call(("clock", "{}")), say("It is noon.")])
    events = Events()
    done = await run_turn(make_loop(inference), session, "time?", events)
    assert done.content == "It is noon."
    assert record_types(session) == [
        "session_start", "user", "assistant", "usage", "tool_result", "assistant", "usage",
    ]
    (result,) = results(session)
    assert (result.call, result.tool_call_id, result.content) == (1, "call-1", FIXED_TIME)
    assert events.types() == ["tool_call_started", "tool_result"]
    second = inference.requests[1]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]


async def test_a_call_tool_turn_reaches_echo_through_the_port(tmp_path):
    session = new_session(tmp_path)
    tools = FakeTools(now=lambda: FIXED_TIME)
    inference = ScriptedInference([
        call(("find_tool", '{"query": "ECHO"}')),
        call(("call_tool", '{"name": "echo", "arguments": {"text": "ping"}}')),
        say("Echoed."),
    ])
    events = Events()
    await run_turn(make_loop(inference, tools=tools), session, "echo ping", events)
    assert record_types(session) == [
        "session_start", "user",
        "assistant", "usage", "tool_result",
        "assistant", "usage", "tool_result",
        "assistant", "usage",
    ]
    found, echoed = results(session)
    assert json.loads(found.content.splitlines()[0])[0]["name"] == "echo"
    assert found.content.endswith("Call it with call_tool.")
    assert echoed.content == "ping"
    (request,) = tools.requests
    assert (request.tool, request.arguments, request.call) == ("echo", '{"text":"ping"}', 2)
    assert [e.name for e in events.seen if e.type == "tool_call_started"] == ["find_tool", "echo"]


async def test_the_call_counter_runs_across_turns_and_resumes(tmp_path):
    session = new_session(tmp_path)
    clock = ("clock", "{}")
    inference = ScriptedInference([call(clock), say("a"), call(clock), say("b")])
    loop = make_loop(inference)
    await run_turn(loop, session, "one", Events())
    await run_turn(loop, session, "two", Events())
    assert [r.call for r in results(session)] == [1, 2]
    inference.script += [call(("clock", "{}")), say("c")]
    reopened = SessionStore(tmp_path).open("s1")
    await run_turn(loop, reopened, "three", Events())
    assert [r.call for r in results(reopened)] == [1, 2, 3]


# --- the limits table, one row each ---------------------------------------------------------

async def test_limit_tool_iterations_ends_the_turn_keeping_what_was_appended(tmp_path):
    session = new_session(tmp_path)
    script = [call(("clock", json.dumps({"n": i}))) for i in range(3)]
    inference = ScriptedInference([*script, call(("clock", "{}"))])
    with pytest.raises(TurnEnded) as ended:
        await run_turn(make_loop(inference, tool_iterations=3), session, "loop", Events())
    assert ended.value.code is ErrorCode.TURN_LIMIT  # it called even when asked for none
    assert [r.tool_choice for r in inference.requests] == [None, None, None, "none"]
    assert len(results(session)) == 3  # every call of a round has its result
    # The session stays usable.
    inference.script.append(say("ok"))
    assert (await run_turn(make_loop(inference), session, "again", Events())).content == "ok"


async def test_limit_a_repeated_call_is_not_run_and_the_model_gets_one_more_completion(tmp_path):
    session = new_session(tmp_path)
    tools = FakeTools(now=lambda: FIXED_TIME)
    inference = ScriptedInference([
        call(("call_tool", '{"name":"echo","arguments":{"text":"x"}}')),
        call(("call_tool", '{"name":"echo","arguments":{"text":"x"}}')),
        say("done"),
    ])
    done = await run_turn(make_loop(inference, tools=tools), session, "go", Events())
    assert done.content == "done"
    first, second = results(session)
    assert first.content == "x" and second.content == REPEATED
    assert len(tools.requests) == 1  # the repeat never reached the port


async def test_limit_a_second_repeat_ends_the_calls_and_one_answer_without_tools_the_turn(tmp_path):
    session = new_session(tmp_path)
    same = ("clock", "{}")
    inference = ScriptedInference([call(same), call(same), call(same, ("clock", '{"x":1}')),
                                   say("It is noon.")])
    done = await run_turn(make_loop(inference), session, "go", Events())
    # The limit stops the calls; one completion without tools answers the turn (issue 32's
    # attack: a model that repeats a call from the log otherwise never answers again).
    assert done.content == "It is noon." and inference.requests[-1].tool_choice == "none"
    assert [r.content for r in results(session)] == [FIXED_TIME, REPEATED, REPEATED, STOPPED]


async def test_limit_repeat_detection_off_runs_every_call(tmp_path):
    session = new_session(tmp_path)
    same = ("clock", "{}")
    inference = ScriptedInference([call(same), call(same), call(same), say("ok")])
    await run_turn(make_loop(inference, repeat_detection=False), session, "go", Events())
    assert [r.content for r in results(session)] == [FIXED_TIME] * 3


async def test_the_thinking_cap_counts_across_the_tool_rounds_of_a_turn(tmp_path):
    """Each request of a turn carries what the turn's earlier completions reasoned, so the
    client can end reasoning once the turn's cap is spent (docs/design.md, "Runaway control")."""
    session = new_session(tmp_path)
    inference = ScriptedInference([
        call(("clock", "{}"), reasoning="a b c"),
        call(("find_tool", '{"query": "echo"}'), reasoning="d e"),
        say("Done.", reasoning="f"),
    ])
    await run_turn(make_loop(inference), session, "go", Events())
    assert [r.reasoning_spent for r in inference.requests] == [0, 3, 5]
    await run_turn(make_loop(ScriptedInference([say("Again.")], requests=inference.requests)),
                   session, "again", Events())
    assert inference.requests[-1].reasoning_spent == 0  # a new turn has the whole cap


async def test_limit_thinking_cap_is_recorded_in_usage(tmp_path):
    session = new_session(tmp_path)
    capped = ThinkingCapped(tokens=4096)
    inference = ScriptedInference([say("Short.", reasoning="a b c", thinking_capped=True,
                                       events=(capped,))])
    events = Events()
    done = await run_turn(make_loop(inference), session, "think", events)
    usage = session.records[-1]
    assert usage.type == "usage" and usage.thinking_capped and usage.reasoning_tokens == 3
    assert done.usage.thinking_capped
    assert events.seen == [capped]


async def test_limit_context_full_appends_nothing_for_that_request(tmp_path):
    session = new_session(tmp_path)
    inference = ScriptedInference([call(("clock", "{}")), SessionFull("exceeds the context")])
    with pytest.raises(TurnEnded) as ended:
        await run_turn(make_loop(inference), session, "go", Events())
    assert ended.value.code is ErrorCode.SESSION_FULL
    assert record_types(session) == ["session_start", "user", "assistant", "usage", "tool_result"]
    assert SessionStore(tmp_path).open("s1").records == session.records


async def test_a_prompt_the_slot_refused_is_recorded_by_its_tokens_so_compaction_is_due(tmp_path):
    """The server said how long the refused prompt was: its Usage makes the next turn compact,
    also after a restart (the log is the state)."""
    session = new_session(tmp_path)
    full = SessionFull("exceeds the context", prompt_tokens=4538)
    with pytest.raises(TurnEnded):
        await run_turn(make_loop(ScriptedInference([full])), session, "go", Events())
    assert record_types(session) == ["session_start", "user", "usage"]
    reopened = SessionStore(tmp_path).open("s1")
    assert reopened.last_usage is not None and reopened.last_usage.prompt_n == 4538
    assert needs_compaction(reopened.records, EpochSettings(compact_at_tokens=3072))


async def test_limit_tool_result_size_cut_at_a_character_boundary(tmp_path):
    session = new_session(tmp_path)
    text = "é" * 100  # two bytes each: a cut at an odd byte would split one
    inference = ScriptedInference([
        call(("call_tool", json.dumps({"name": "echo", "arguments": {"text": text}}))),
        say("ok"),
    ])
    events = Events()
    await run_turn(make_loop(inference, tool_result_cap=101), session, "go", events)
    (result,) = results(session)
    assert result.truncated
    assert result.content == "é" * 44 + "\n[truncated]"
    assert len(result.content.encode()) <= 101
    assert events.seen[-1].truncated
    # Never trimmed later: the next request carries the same text.
    assert inference.requests[1].messages[-1].content == result.content


@pytest.mark.parametrize(
    ("error", "code"),
    [(ServerRejected("bad", status=500), ErrorCode.INFERENCE),
     (Unavailable("no server"), ErrorCode.UNAVAILABLE)],
)
async def test_a_failed_request_leaves_no_trace(tmp_path, error, code):
    session = new_session(tmp_path)
    with pytest.raises(TurnEnded) as ended:
        await run_turn(make_loop(ScriptedInference([error])), session, "go", Events())
    assert ended.value.code is code
    assert record_types(session) == ["session_start", "user"]


UNREADABLE = UnreadableOutput("the model produced output that does not match the expected "
                              "peg-native format")


@pytest.mark.parametrize("choice", [(), ("required",), ("auto",)])
async def test_output_the_servers_parser_refuses_is_asked_for_again_without_tools(tmp_path,
                                                                                  choice):
    session = new_session(tmp_path)
    inference = ScriptedInference([UNREADABLE, say("Here is the poem.")])
    done = await run_turn(make_loop(inference), session, "go", Events(), choice)
    assert done.content == "Here is the poem."
    assert [r.tool_choice for r in inference.requests] == [choice[0] if choice else None, "none"]
    assert inference.requests[0].messages == inference.requests[1].messages
    assert record_types(session) == ["session_start", "user", "assistant", "usage"]


@pytest.mark.parametrize(("script", "choice"), [
    ([UNREADABLE, UNREADABLE], ()),  # asked again once, not more
    ([UNREADABLE, say("never asked")], ("none",)),  # already without tools
])
async def test_output_refused_again_ends_the_turn_leaving_no_trace(tmp_path, script, choice):
    session = new_session(tmp_path)
    inference = ScriptedInference(script)
    with pytest.raises(TurnEnded) as ended:
        await run_turn(make_loop(inference), session, "go", Events(), choice)
    assert ended.value.code is ErrorCode.INFERENCE
    assert len(inference.requests) == (2 if not choice else 1)
    assert record_types(session) == ["session_start", "user"]


async def test_a_cache_loss_is_recorded_and_reported(tmp_path):
    session = new_session(tmp_path)
    inference = ScriptedInference([say("a", prompt_n=100, predicted_n=20), say("b", cache_n=3)])
    loop = make_loop(inference)
    await run_turn(loop, session, "one", Events())
    events = Events()
    await run_turn(loop, session, "two", events)
    assert record_types(session)[-3:] == ["assistant", "usage", "cache_loss"]
    loss = session.records[-1]
    assert (loss.expected, loss.got) == (120, 3)
    assert events.types() == ["cache_loss"]


async def test_no_cache_loss_when_the_cache_holds(tmp_path):
    session = new_session(tmp_path)
    inference = ScriptedInference([say("a"), call(("clock", "{}")), say("b")])
    loop = make_loop(inference)
    await run_turn(loop, session, "one", Events())
    await run_turn(loop, session, "two", Events())
    assert "cache_loss" not in record_types(session)


async def test_a_cache_loss_is_found_across_a_restart(tmp_path):
    session = new_session(tmp_path)
    inference = ScriptedInference([say("a", prompt_n=100)])
    await run_turn(make_loop(inference), session, "one", Events())
    reopened = SessionStore(tmp_path).open("s1")
    inference.script.append(say("b", cache_n=0))
    await run_turn(make_loop(inference), reopened, "two", Events())
    assert record_types(reopened)[-1] == "cache_loss"


async def test_tool_choice_applies_to_the_turns_completions_in_order(tmp_path):
    session = new_session(tmp_path)
    inference = ScriptedInference([call(("clock", "{}")), call(("clock", '{"a":1}')), say("x")])
    await run_turn(make_loop(inference), session, "go", Events(), ["required", "none"])
    assert [r.tool_choice for r in inference.requests] == ["required", "none", None]


async def test_a_required_completion_answered_with_text_ends_the_turn_and_is_logged(
        tmp_path, caplog):
    session = new_session(tmp_path)
    inference = ScriptedInference([say("I would read it.")])
    with caplog.at_level("WARNING", logger="loopd"):
        done = await run_turn(make_loop(inference), session, "read", Events(), ["required"])
    assert done.content == "I would read it."
    assert ("session s1: a completion asked for a tool call (tool_choice required) came back "
            "as text") in caplog.text


# --- cancellation, and the resume after a crash ---------------------------------------------

class StallingTools(FakeTools):
    """A port whose echo never answers: the turn is cancelled while it waits."""

    def __init__(self) -> None:
        super().__init__(now=lambda: FIXED_TIME)
        self.waiting = asyncio.Event()

    async def call(self, request, events):
        if request.tool == "echo":
            self.waiting.set()
            await asyncio.Event().wait()  # stalls forever
        return await super().call(request, events)


def call_tool_echo(text: str) -> tuple[str, str]:
    return ("call_tool", json.dumps({"name": "echo", "arguments": {"text": text}}))


def assert_every_call_answered_in_order(messages) -> None:
    """Each assistant message's tool calls are followed by exactly their tool messages."""
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            ids = [c.id for c in message.tool_calls]
            following = messages[index + 1 : index + 1 + len(ids)]
            assert [m.role for m in following] == ["tool"] * len(ids)
            assert [m.tool_call_id for m in following] == ids


async def test_a_cancelled_turn_writes_nothing_more_and_the_next_answers_its_open_call(tmp_path):
    session = new_session(tmp_path)
    tools = StallingTools()
    inference = ScriptedInference([call(("clock", "{}"), call_tool_echo("slow"))])
    loop = make_loop(inference, tools=tools)
    turn = asyncio.create_task(run_turn(loop, session, "go", Events()))
    await tools.waiting.wait()
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert record_types(session)[-3:] == ["assistant", "usage", "tool_result"]  # clock only
    reopened = SessionStore(tmp_path).open("s1")
    assert reopened.records == session.records  # the disk holds what the session mirrors
    inference.script.append(say("Sorry, the echo was cut short."))
    events = Events()
    done = await run_turn(loop, reopened, "did it work?", events)
    assert done.content == "Sorry, the echo was cut short."
    interrupted = results(reopened)[-1]
    assert (interrupted.tool_call_id, interrupted.content, interrupted.call) == (
        "call-2", INTERRUPTED, 3)  # call 2 may have reached brokerd: the restored counter skips it
    assert record_types(reopened)[-5:] == ["tool_result", "tool_result", "user", "assistant",
                                           "usage"]
    assert events.types() == ["tool_result"]  # the channel hears of the open call's result
    assert_every_call_answered_in_order(inference.requests[-1].messages)


async def test_resume_after_a_crash_mid_round_answers_the_calls_it_left_open(tmp_path):
    """A crash after the completion was recorded, before its calls' results: the log ends
    with the assistant's calls open. The next turn answers them before the user message."""
    session = new_session(tmp_path)
    inference = ScriptedInference([call(("clock", "{}"), ("clock", '{"tz":"UTC"}'))])
    session.append(User(time=FIXED_TIME, content="time?"))
    completion = await inference.chat(ChatRequest(messages=session.messages, tools=(), slot=0,
                                                  session="s1"), Events())
    await record_completion(make_loop(inference), session, completion, Events())
    reopened = SessionStore(tmp_path).open("s1")  # loopd started again
    inference.script.append(say("Noon."))
    await run_turn(make_loop(inference), reopened, "time?", Events())
    assert [r.content for r in results(reopened)] == [INTERRUPTED, INTERRUPTED]
    # Calls 1 and 2 may have reached brokerd before the crash: their answers take new numbers
    assert [r.call for r in results(reopened)] == [3, 4]
    assert record_types(reopened)[2:] == ["assistant", "usage", "tool_result", "tool_result",
                                          "user", "assistant", "usage"]
    assert_every_call_answered_in_order(inference.requests[-1].messages)
