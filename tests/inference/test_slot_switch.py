"""The session marker every request starts with, and the self-test's reading of the router's
command line (pure; the real server's side is test_real_slot_switch.py)."""

from __future__ import annotations

from bxcore.chat import SystemMessage, UserMessage, message_json
from bxcore.config import InferenceSection
from loopd.inference.api import ChatRequest
from loopd.inference.request import request_body, session_marker
from loopd.inference.slot_switch import flags_turned_off

MODEL = "qwen-tools"


def body(session: str, *messages):
    request = ChatRequest(messages=messages, tools=(), slot=0, session=session)
    return request_body(request, InferenceSection())["messages"]


def test_the_system_message_starts_with_the_sessions_marker_and_nothing_else_changes():
    system, user = SystemMessage(content="You are terse."), UserMessage(content="Hi")
    sent = body("thread-1", system, user)
    assert sent[0] == {"role": "system", "content": session_marker("thread-1") + "You are terse."}
    assert sent[1:] == [message_json(user)]
    assert session_marker("thread-1") == session_marker("thread-1")  # every request, every run
    assert session_marker("thread-1") != session_marker("thread-2")
    assert message_json(system) == {"role": "system", "content": "You are terse."}  # not changed


def test_a_request_without_a_system_message_gets_the_marker_as_one():
    user = UserMessage(content="Hi")
    sent = body("thread-3", user)
    assert sent == [{"role": "system", "content": session_marker("thread-3").rstrip()},
                    message_json(user)]


def test_flags_are_read_from_the_routers_command_line_for_the_model():
    models = {"data": [
        {"id": "other", "status": {"args": ["--cache-ram", "0"]}},
        {"id": MODEL, "status": {"value": "loaded", "args": [
            "--ctx-size", "8192", "-sps", "0.0", "--cache-ram", "4096"]}},
    ]}
    named = flags_turned_off(models, MODEL)
    assert len(named) == 1 and named[0].startswith(f"{MODEL} runs with -sps 0.0: slots are not")
    assert flags_turned_off(models, "other")[0].startswith("other runs with --cache-ram 0")
    assert flags_turned_off({"data": [{"id": MODEL, "status": {}}]}, MODEL) == []
    assert flags_turned_off({"object": "list"}, MODEL) == []
