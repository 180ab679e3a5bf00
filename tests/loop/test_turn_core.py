"""The turn's sans-I/O core, driven by events alone: no disk, no model server, no tools.

First the table, with event types alone (h11's state tests); then the turn of docs/design.md
and its limits table, row by row, as the actions the core asks for: the order of a
plain, a tool and a stopped turn, the repeat and round limits, tool choice, the per-turn
thinking budget, a failed completion, cancellation, and the resume after a crash.
"""

from __future__ import annotations

import pytest
from bxcore.chat import FunctionCall, ToolCall
from bxcore.errors import ErrorCode
from bxcore.records import Assistant, CacheLoss, SessionStart, ToolResult, Usage, User
from hypothesis import given
from hypothesis import strategies as st
from loopd.errors import IllegalTransition
from loopd.inference.api import Completion
from loopd.inference.errors import InferenceError
from loopd.readback import read_back
from loopd.turn.core import INTERRUPTED, TurnCore, TurnMachine, TurnState, open_calls
from loopd.turn.events import (
    Abandon,
    Answered,
    CalledTools,
    Cancelled,
    CompletionFailed,
    Finish,
    LimitHit,
    RecordNotRun,
    RecordUser,
    RequestCompletion,
    RoundDone,
    RunTool,
    Stop,
    ToolRecorded,
    TurnStarted,
    UserRecorded,
    completed,
)
from loopd.turn.limits import REPEATED, STOPPED, TurnSettings

from .machine_table import brought_to, check_error_is_for_good, check_move

S = TurnState
ALL_MOVES = [TurnStarted, UserRecorded, Answered, CalledTools, CompletionFailed, ToolRecorded,
             RoundDone, LimitHit, Cancelled]

LEGAL = {
    (S.IDLE, TurnStarted): S.OPENING,
    (S.OPENING, ToolRecorded): S.OPENING,
    (S.OPENING, UserRecorded): S.AWAITING_COMPLETION,
    (S.OPENING, Cancelled): S.CANCELLED,
    (S.AWAITING_COMPLETION, Answered): S.DONE,
    (S.AWAITING_COMPLETION, CalledTools): S.RUNNING_TOOLS,
    (S.AWAITING_COMPLETION, CompletionFailed): S.STOPPED,
    (S.AWAITING_COMPLETION, Cancelled): S.CANCELLED,
    (S.RUNNING_TOOLS, ToolRecorded): S.RUNNING_TOOLS,
    (S.RUNNING_TOOLS, RoundDone): S.AWAITING_COMPLETION,
    (S.RUNNING_TOOLS, LimitHit): S.CLOSING,
    (S.RUNNING_TOOLS, Cancelled): S.CANCELLED,
    (S.CLOSING, Answered): S.DONE,
    (S.CLOSING, CalledTools): S.STOPPED,
    (S.CLOSING, CompletionFailed): S.STOPPED,
    (S.CLOSING, Cancelled): S.CANCELLED,
}

# A shortest path of moves from IDLE to each state.
PATHS = {
    S.IDLE: [],
    S.OPENING: [TurnStarted],
    S.AWAITING_COMPLETION: [TurnStarted, UserRecorded],
    S.RUNNING_TOOLS: [TurnStarted, UserRecorded, CalledTools],
    S.CLOSING: [TurnStarted, UserRecorded, CalledTools, LimitHit],
    S.DONE: [TurnStarted, UserRecorded, Answered],
    S.STOPPED: [TurnStarted, UserRecorded, CompletionFailed],
    S.CANCELLED: [TurnStarted, Cancelled],
}


def machine_in(state: TurnState) -> TurnMachine:
    return brought_to(TurnMachine(), state, PATHS)


# --- the table, by event types alone -----------------------------------------------------

@pytest.mark.parametrize("state", list(PATHS))
@pytest.mark.parametrize("move", ALL_MOVES)
def test_every_state_and_move(state, move):
    check_move(machine_in(state), move, LEGAL.get((state, move)), S.ERROR)


def test_error_is_for_good():
    check_error_is_for_good(TurnMachine(), Answered, ALL_MOVES)


# --- the turn, as events and actions -------------------------------------------------------

def tool_call(name: str = "clock", arguments: str = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, function=FunctionCall(name=name, arguments=arguments))


def calls(*pairs: tuple[str, str], first: int = 1) -> CalledTools:
    return CalledTools(calls=tuple(tool_call(n, a, f"c{i}") for i, (n, a) in
                                   enumerate(pairs, first)))


def answer(content: str | None = "ok", **fields) -> Completion:
    return Completion(**{"content": content, "reasoning_content": None, "tool_calls": None,
                         "cache_n": 0, "prompt_n": 1, "predicted_n": 1, "reasoning_tokens": 0,
                         "thinking_capped": False, **fields})


ANSWER = answer()


def start(core: TurnCore, content: str = "hi", **kw) -> RequestCompletion:
    """TurnStarted and UserRecorded: the first completion is asked for."""
    assert core.send(TurnStarted(content=content, **kw)) == RecordUser(content=content)
    action = core.send(UserRecorded())
    assert isinstance(action, RequestCompletion)
    return action


def run_round(core: TurnCore, event: CalledTools) -> tuple[list, object]:
    """Answer every call action of a round with its ToolRecorded: (the call actions, then what
    the core asks after the round)."""
    seen = []
    action = core.send(event)
    while isinstance(action, RunTool | RecordNotRun):
        seen.append(action)
        action = core.send(ToolRecorded(call_id=action.call.id))
    return seen, action


def test_a_plain_turn_records_the_user_asks_once_and_finishes():
    core = TurnCore(TurnSettings())
    assert core.is_idle() and repr(core) == "<TurnCore IDLE rounds=0>"
    first = start(core)
    assert first == RequestCompletion(tool_choice=None, thinking=True, reasoning_spent=0)
    assert core.send(Answered(answer=ANSWER)) == Finish(answer=ANSWER)
    assert core.state is S.DONE and core.is_finished()


def test_a_tool_turn_runs_each_call_in_order_then_asks_again():
    core = TurnCore(TurnSettings())
    start(core)
    ran, after = run_round(core, calls(("clock", "{}"), ("find_tool", '{"query":"x"}')))
    assert [(type(a), a.call.id) for a in ran] == [(RunTool, "c1"), (RunTool, "c2")]
    assert isinstance(after, RequestCompletion)
    assert repr(core) == "<TurnCore AWAITING_COMPLETION rounds=1>"
    assert core.send(Answered(answer=ANSWER)) == Finish(answer=ANSWER)


def test_a_completion_without_calls_is_answered_with_calls_called_tools():
    assert completed(ANSWER) == Answered(answer=ANSWER)
    assert completed(answer(tool_calls=())) == Answered(answer=answer(tool_calls=()))
    assert completed(answer(tool_calls=(tool_call(),), reasoning_tokens=7)) == CalledTools(
        calls=(tool_call(),), reasoning_tokens=7)


@pytest.mark.parametrize("finish_reason", ["length", "stop", None])
def test_only_the_last_call_of_a_completion_the_token_limit_cut_is_run_as_cut(finish_reason):
    """The token limit ends a completion inside its last call at most: that call is run
    knowing its arguments may be short, the others as they are."""
    core = TurnCore(TurnSettings())
    start(core)
    completion = answer(tool_calls=(tool_call(id="c1"), tool_call("echo", id="c2")),
                        finish_reason=finish_reason)
    ran, _ = run_round(core, completed(completion))
    assert [a.cut for a in ran] == [False, finish_reason == "length"]


def test_limit_tool_iterations_ends_the_turn_after_the_last_round_is_recorded():
    core = TurnCore(TurnSettings(tool_iterations=3))
    start(core)
    for n in range(2):
        _, after = run_round(core, calls(("clock", f'{{"n":{n}}}')))
        assert isinstance(after, RequestCompletion)
    ran, after = run_round(core, calls(("clock", '{"n":2}')))
    assert [type(a) for a in ran] == [RunTool]  # the round's calls get results first
    # One more completion, without tools: the turn ends with an answer if the model gives one.
    assert after == RequestCompletion(tool_choice="none", thinking=True, reasoning_spent=0)
    assert core.state is S.CLOSING
    assert core.send(Answered(answer=ANSWER)) == Finish(answer=ANSWER)


def test_limit_tools_called_even_without_tools_stop_the_turn_on_the_limit():
    core = TurnCore(TurnSettings(tool_iterations=1))
    start(core)
    _, after = run_round(core, calls(("clock", "{}")))
    assert after.tool_choice == "none"
    assert core.send(calls(("clock", "{}"), first=9)) == Stop(
        code=ErrorCode.TURN_LIMIT, reason="1 rounds of tool calls, the limit of one turn")
    assert core.state is S.STOPPED


@pytest.mark.parametrize("code", [ErrorCode.INFERENCE, ErrorCode.SESSION_FULL,
                                  ErrorCode.UNAVAILABLE])
def test_limit_a_closing_completion_that_fails_stops_with_its_own_code(code):
    """The server down or the slot full is told as such, not as the limit (the attack on
    issue 32 found every failure of the closing completion told as ``turn_limit``)."""
    core = TurnCore(TurnSettings(tool_iterations=1))
    start(core)
    run_round(core, calls(("clock", "{}")))
    assert core.send(CompletionFailed(code=code, message="x")) == Stop(
        code=code, reason="x (asked once more without tools after 1 rounds of tool calls, "
                          "the limit of one turn)")


def test_limit_a_repeated_call_is_not_run_and_the_model_gets_one_more_completion():
    core = TurnCore(TurnSettings())
    start(core)
    run_round(core, calls(("echo", '{"text":"x"}')))
    ran, after = run_round(core, calls(("echo", '{"text":"x"}'), first=2))
    assert ran == [RecordNotRun(call=tool_call("echo", '{"text":"x"}', "c2"), read={"text": "x"},
                                text=REPEATED)]
    assert isinstance(after, RequestCompletion)


def test_limit_the_same_arguments_in_other_whitespace_or_key_order_are_a_repeat():
    core = TurnCore(TurnSettings())
    start(core)
    run_round(core, calls(("find_tool", '{"query": "read", "n": 1}')))
    ran, _ = run_round(core, calls(("find_tool", '{"n":1,"query":"read"}'), first=2))
    assert [a.text for a in ran] == [REPEATED]


@pytest.mark.parametrize(("first", "again", "repeated"), [
    ('{"n": 1}', '{"n": 1.0}', True),  # the server shows both as 1
    ('{"n": 1.0}', '{"n": 10e-1}', True),
    ('{"n": [2, {"m": 3}]}', '{"n": [2.0, {"m": 3e0}]}', True),
    ('{"n": 1000000}', '{"n": 1e6}', False),  # shown as 1000000 and 1e+06
    ('{"n": 0}', '{"n": -0.0}', False),  # shown as 0 and -0
    ('{"n": 1}', '{"n": 1.5}', False),
])
def test_limit_numbers_are_compared_as_the_model_is_shown_them(first, again, repeated):
    core = TurnCore(TurnSettings())
    start(core)
    run_round(core, calls(("echo", first)))
    ran, _ = run_round(core, calls(("echo", again), first=2))
    assert [type(a) for a in ran] == [RecordNotRun if repeated else RunTool]


def test_limit_arguments_that_are_not_json_are_compared_as_text():
    core = TurnCore(TurnSettings())
    start(core)
    run_round(core, calls(("echo", "{broken")))
    ran, _ = run_round(core, calls(("echo", "{broken"), ("echo", "{broken "), first=2))
    assert [type(a) for a in ran] == [RecordNotRun, RunTool]


def test_limit_arguments_nested_past_the_parsers_depth_are_compared_as_text():
    deep = "[" * 100_000  # json.loads raises RecursionError, not ValueError
    core = TurnCore(TurnSettings())
    start(core)
    run_round(core, calls(("echo", deep)))
    ran, _ = run_round(core, calls(("echo", deep), first=2))
    assert [a.text for a in ran] == [REPEATED]


def test_limit_the_same_name_with_other_arguments_is_no_repeat():
    core = TurnCore(TurnSettings())
    start(core)
    ran, _ = run_round(core, calls(("clock", "{}"), ("clock", '{"x":1}')))
    assert [type(a) for a in ran] == [RunTool, RunTool]


def test_limit_a_second_repeat_stops_the_rest_of_the_round_and_ends_the_turn():
    core = TurnCore(TurnSettings())
    start(core)
    run_round(core, calls(("clock", "{}")))
    run_round(core, calls(("clock", "{}"), first=2))
    ran, after = run_round(core, calls(("clock", "{}"), ("clock", '{"x":1}'), first=3))
    assert [a.text for a in ran] == [REPEATED, STOPPED]
    assert after.tool_choice == "none"  # asked once more, without tools
    repeated = "the model repeated an identical clock call a second time"
    assert core.send(calls(("clock", "{}"), first=4)) == Stop(code=ErrorCode.TURN_LIMIT,
                                                             reason=repeated)


def test_limit_repeat_detection_off_runs_every_call():
    core = TurnCore(TurnSettings(repeat_detection=False))
    start(core)
    ran, _ = run_round(core, calls(("clock", "{}"), ("clock", "{}"), ("clock", "{}")))
    assert [type(a) for a in ran] == [RunTool] * 3


def test_tool_choice_applies_to_the_completions_in_order_then_the_servers_default():
    core = TurnCore(TurnSettings(), tool_choice=["required", "none"], thinking=False)
    first = start(core)
    _, second = run_round(core, calls(("clock", "{}")))
    _, third = run_round(core, calls(("clock", '{"a":1}'), first=2))
    assert [a.tool_choice for a in (first, second, third)] == ["required", "none", None]
    assert not any(a.thinking for a in (first, second, third))


def test_the_thinking_budget_is_spent_across_the_rounds_of_one_turn():
    core = TurnCore(TurnSettings())
    first = start(core)
    _, second = run_round(core, CalledTools(calls=(tool_call(),), reasoning_tokens=3))
    _, third = run_round(core, CalledTools(calls=(tool_call(id="c2", arguments='{"a":1}'),),
                                           reasoning_tokens=2))
    assert [a.reasoning_spent for a in (first, second, third)] == [0, 3, 5]
    assert start(TurnCore(TurnSettings())).reasoning_spent == 0  # a new turn has the whole cap


@pytest.mark.parametrize("code", [ErrorCode.SESSION_FULL, ErrorCode.INFERENCE,
                                  ErrorCode.UNAVAILABLE])
def test_a_failed_completion_stops_the_turn_with_its_code(code):
    core = TurnCore(TurnSettings())
    start(core)
    run_round(core, calls(("clock", "{}")))
    failure = InferenceError("why")
    stop = core.send(CompletionFailed(code=code, message="why", failure=failure))
    assert stop == Stop(code=code, reason="why", failure=failure)  # the shell chains it
    assert core.is_finished()


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
def test_cancellation_abandons_the_turn_wherever_it_stands(steps):
    """Cancelled while recording the user, awaiting a completion, or running a tool: the
    turn writes nothing more, and takes no event after."""
    core = TurnCore(TurnSettings())
    events = [UserRecorded(), calls(("clock", "{}"), ("echo", "{}")), ToolRecorded(call_id="c1")]
    core.send(TurnStarted(content="hi"))
    for event in events[:steps]:
        core.send(event)
    assert core.send(Cancelled()) == Abandon()
    assert core.state is S.CANCELLED and core.is_finished()
    with pytest.raises(IllegalTransition):
        core.send(ToolRecorded(call_id="c2"))


def test_resume_after_a_crash_answers_the_open_calls_before_the_user_message():
    core = TurnCore(TurnSettings())
    left = (tool_call(id="a"), tool_call("echo", id="b"))
    assert core.send(TurnStarted(content="next", open_calls=left)) == RecordNotRun(
        call=left[0], read=read_back(left[0].function.arguments), text=INTERRUPTED)
    assert core.send(ToolRecorded(call_id="a")) == RecordNotRun(
        call=left[1], read=read_back(left[1].function.arguments), text=INTERRUPTED)
    assert core.send(ToolRecorded(call_id="b")) == RecordUser(content="next")
    assert isinstance(core.send(UserRecorded()), RequestCompletion)


T = "2026-09-18T12:00:00.000000Z"


def assistant(*ids: str) -> Assistant:
    return Assistant(time=T, content=None, reasoning_content=None,
                     tool_calls=[tool_call(id=i) for i in ids] or None)


def result(call_id: str, call: int = 1) -> ToolResult:
    return ToolResult.model_validate({"time": T, "call": call, "tool_call_id": call_id,
                                      "content": "x", "class": "public", "untrusted": False,
                                      "truncated": False})


USAGE = Usage(time=T, cache_n=0, prompt_n=1, predicted_n=1, reasoning_tokens=0,
              thinking_capped=False)
START = SessionStart(time=T, session="s1", epoch=0, slot=0, baseline="sha256:" + "0" * 64)


@pytest.mark.parametrize(("tail", "left"), [
    ([], []),
    ([User(time=T, content="hi")], []),  # killed before the completion: nothing open
    ([User(time=T, content="hi"), assistant("a", "b"), USAGE], ["a", "b"]),
    ([User(time=T, content="hi"), assistant("a", "b"), USAGE,
      CacheLoss(time=T, expected=9, got=0), result("a")], ["b"]),
    ([User(time=T, content="hi"), assistant("a"), USAGE, result("a")], []),
    ([User(time=T, content="hi"), assistant(), USAGE], []),  # an answer, no calls
    # One id given to two calls (the model's choice): one result answers the first only.
    ([User(time=T, content="hi"), assistant("d", "", "d"), USAGE, result("d")], ["", "d"]),
    ([User(time=T, content="hi"), assistant("d", "d"), USAGE, result("d"), result("d")], []),
    # Calls left open long ago, with a user message after: the log is replayed as it is.
    ([User(time=T, content="hi"), assistant("a"), USAGE, User(time=T, content="again")], []),
])
def test_open_calls_are_those_the_last_completion_left_without_results(tail, left):
    assert [c.id for c in open_calls([START, *tail])] == left


@given(ids=st.lists(st.sampled_from(["a", "b", ""]), min_size=1, max_size=6),
       data=st.data())
def test_the_calls_left_open_are_those_after_the_results_written_in_order(ids, data):
    """Results are written in the calls' order, whatever ids the model gave (repeated, empty):
    after any number of them, the rest are open, in order."""
    recorded = data.draw(st.integers(0, len(ids)))
    tail = [User(time=T, content="hi"), assistant(*ids), USAGE,
            *(result(i) for i in ids[:recorded])]
    assert [c.id for c in open_calls([START, *tail])] == ids[recorded:]


def test_an_event_that_answers_no_action_under_way_is_refused_for_good():
    core = TurnCore(TurnSettings())
    core.send(TurnStarted(content="hi"))  # the core asked for RecordUser
    with pytest.raises(IllegalTransition, match="ToolRecorded does not answer"):
        core.send(ToolRecorded(call_id="c1"))
    assert core.state is S.ERROR
    with pytest.raises(IllegalTransition):
        core.send(UserRecorded())


def test_a_result_for_another_call_than_the_one_under_way_is_refused():
    core = TurnCore(TurnSettings())
    start(core)
    core.send(calls(("clock", "{}"), ("echo", "{}")))
    with pytest.raises(IllegalTransition, match="call under way is 'c1'"):
        core.send(ToolRecorded(call_id="c2"))


def test_the_cores_own_moves_cannot_be_sent():
    core = TurnCore(TurnSettings())
    start(core)
    core.send(calls(("clock", "{}")))
    with pytest.raises(IllegalTransition, match="the core's own move"):
        core.send(RoundDone())


def test_a_bad_event_cannot_exist():
    with pytest.raises(ValueError, match="at least one call"):
        CalledTools(calls=())
    with pytest.raises(ValueError, match="below 0"):
        CalledTools(calls=(tool_call(),), reasoning_tokens=-1)
