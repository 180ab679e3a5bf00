"""The peers benchmark's reading of recorded requests (bench/request_diff.py): when a request
strictly extends the previous one of its session, what changed when it does not, how much of the
previous prompt the cache did not cover, and the projection onto the owner's host."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from request_diff import (
    Request,
    changes,
    extends,
    first_difference,
    host_rate,
    host_seconds,
    session_rereads,
    timings_of,
    verdicts,
)

TOOL = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
OTHER = {"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}


def body(*messages, tools=(TOOL,), **extra):
    return {"model": "qwen-tools", "messages": list(messages), "tools": list(tools), **extra}


SYSTEM = {"role": "system", "content": "You are helpful. Now: 2026-12-01 18:00."}
ASK = {"role": "user", "content": "Read garden.md"}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function",
        "function": {"name": "read_file", "arguments": "{\"path\": \"garden.md\"}"}}]}
RESULT = {"role": "tool", "tool_call_id": "1", "content": "# Garden"}


def test_a_request_with_the_previous_messages_and_more_strictly_extends_it():
    assert extends(body(SYSTEM, ASK), body(SYSTEM, ASK, CALL, RESULT))
    assert changes(body(SYSTEM, ASK), body(SYSTEM, ASK, CALL, RESULT)) == []


def test_sampling_settings_shape_no_prompt_token_and_are_not_compared():
    assert extends(body(SYSTEM, ASK, max_tokens=128, temperature=0.0),
                   body(SYSTEM, ASK, CALL, max_tokens=64, temperature=1.0, tool_choice="none"))


def test_the_same_messages_again_do_not_extend_and_the_change_says_so():
    assert not extends(body(SYSTEM, ASK), body(SYSTEM, ASK))
    assert changes(body(SYSTEM, ASK), body(SYSTEM, ASK)) == ["messages 2 -> 2"]


def test_a_changed_timestamp_in_the_system_message_is_named_with_where_it_changed():
    later = {"role": "system", "content": "You are helpful. Now: 2026-12-01 18:05."}
    said = changes(body(SYSTEM, ASK), body(later, ASK, CALL))
    assert said == ["message 0 (system) changed at char 37: "
                    "'-01 18:00.' -> '-01 18:05.'"]


def test_later_changed_messages_are_counted_after_the_first():
    edited = {"role": "user", "content": "Read roof.md"}
    trimmed = {"role": "tool", "tool_call_id": "1", "content": "[trimmed]"}
    said = changes(body(SYSTEM, ASK, CALL, RESULT), body(SYSTEM, edited, CALL, trimmed, ASK))
    assert len(said) == 1
    assert said[0].startswith("message 1 (user) changed at char 5: ")
    assert said[0].endswith(", and 1 later messages")


def test_dropped_messages_are_named():
    assert changes(body(SYSTEM, ASK, CALL, RESULT), body(SYSTEM, ASK)) == ["messages 4 -> 2"]


@pytest.mark.parametrize(("before", "after", "said"), [
    ((TOOL,), (TOOL, OTHER), "tools 1 -> 2 (+terminal)"),
    ((TOOL, OTHER), (TOOL,), "tools 2 -> 1 (-terminal)"),
    ((TOOL, OTHER), (OTHER, TOOL), "tools 2 -> 2 (same tools, another order)"),
    ((TOOL,), ({"type": "function", "function": {"name": "read_file"}},),
     "tools 1 -> 1 (~read_file)"),
])
def test_a_change_of_tools_breaks_the_extension_and_is_named(before, after, said):
    previous, current = body(SYSTEM, ASK, tools=before), body(SYSTEM, ASK, CALL, tools=after)
    assert not extends(previous, current)
    assert changes(previous, current) == [said]


def test_first_difference_of_texts_of_which_one_is_a_prefix():
    assert first_difference("abc", "abcd") == "at char 3: 'abc' -> 'abcd'"


def test_rereads_are_counted_per_session_against_the_previous_request_of_that_session():
    requests = [
        Request("a|1", body(SYSTEM), cache_n=0, prompt_n=1000),
        Request("b|1", body(SYSTEM), cache_n=0, prompt_n=500),  # another session between
        Request("a|1", body(SYSTEM, ASK), cache_n=1000, prompt_n=40),  # extends: nothing re-read
        Request("a|1", body(SYSTEM, ASK), cache_n=10, prompt_n=1100),  # 1,030 of 1,040 re-read
        Request("a|2", body(SYSTEM), cache_n=900, prompt_n=100),  # a new session: its first
    ]
    assert session_rereads(requests) == [0, 0, 0, 1030, 0]
    judged = verdicts(requests)
    assert [v.extends for v in judged] == [None, None, True, False, None]
    assert judged[3].changes == ("messages 2 -> 2",)


def test_the_host_projection_uses_the_seeds_rates_at_depth_0_and_32k():
    assert host_rate(0) == 1170.0
    assert host_rate(32768) == 669.0
    assert host_rate(100_000) == 669.0  # beyond 32k the brief gives no lower figure
    assert host_rate(16384) == pytest.approx((1170 + 669) / 2)
    assert host_seconds(0, 1170 * 2) == pytest.approx(2340 / host_rate(1170))
    assert host_seconds(32768, 669) == pytest.approx(1.0)
    assert host_seconds(5000, 0) == 0.0


TIMINGS = {"cache_n": 12, "prompt_n": 340, "predicted_n": 20}


def test_timings_come_from_the_last_event_of_a_stream_that_has_them():
    events = [{"choices": [{"delta": {"content": "Hi"}}]},
              {"choices": [{"delta": {}}], "timings": TIMINGS}]
    stream = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    assert timings_of("text/event-stream", stream.encode()) == TIMINGS
    assert timings_of("text/event-stream", b"data: {\"choices\": []}\n\ndata: [DONE]\n\n") is None


def test_timings_come_from_a_json_answer_and_a_bad_answer_has_none():
    answer = json.dumps({"choices": [], "timings": TIMINGS}).encode()
    assert timings_of("application/json", answer) == TIMINGS
    assert timings_of("application/json", b"not json") is None
    assert timings_of("application/json", b"[]") is None
