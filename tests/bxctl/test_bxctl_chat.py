"""bxctl chat against a fake loopd: --say, --json, --session creation, the interactive loop,
and the formatting of every event."""

from __future__ import annotations

import io
import json

import pytest
from bxcore.protocol.loop import (
    CacheLossEvent,
    Content,
    Progress,
    Queued,
    Reasoning,
    Retrying,
    ThinkingCapped,
    ToolCallStarted,
    ToolResultEvent,
    ToolWaitingEvent,
    Waiting,
)
from bxctl.cli import main
from bxctl.render import CLEAR_LINE, DIM, Renderer, progress_bar, status_line
from click.testing import CliRunner
from fake_loopd import FakeLoopd, done, error, event


@pytest.fixture
def sock(tmp_path):
    return tmp_path / "loop.sock"


def run(args, stdin=""):
    return CliRunner().invoke(main, ["chat", *args], input=stdin)


def test_say_prints_only_the_answer_on_stdout(sock):
    frames = [event(Reasoning(text="hmm")), event(Content(text="Hi")),
              event(ToolResultEvent.model_validate({"name": "clock", "class": "public",
                                                    "truncated": False})),
              done("Hi there.")]
    with FakeLoopd(sock, [frames]) as loopd:
        result = run(["--socket", str(sock), "--say", "hello"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hi there.\n"
    assert "hmm" in result.stderr and "tool clock (public)" in result.stderr
    assert "Hi\n" not in result.stderr  # streamed content is not repeated on stderr
    (turn,) = loopd.turns
    assert (turn.content, turn.resume, turn.thinking) == ("hello", False, True)
    assert result.stderr.startswith(f"session {turn.session}\n")


def test_say_reports_an_error_on_stderr_with_status_1(sock):
    with FakeLoopd(sock, [[error("turn_limit", "8 rounds of tool calls")]]):
        result = run(["--socket", str(sock), "--say", "loop"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "turn_limit: 8 rounds of tool calls" in result.stderr


def test_json_prints_every_frame_body_as_a_line(sock):
    frames = [event(Progress(total=10, cache=4, processed=10)), done("ok")]
    with FakeLoopd(sock, [frames]):
        result = run(["--socket", str(sock), "--json", "--say", "x"])
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [
        {"event": {"type": "progress", "total": 10, "cache": 4, "processed": 10}},
        {"content": "ok", "usage": {"cache_n": 5, "prompt_n": 3, "predicted_n": 2,
                                    "reasoning_tokens": 0, "thinking_capped": False}},
    ]


def test_a_new_session_id_is_created_when_loopd_does_not_know_it(sock):
    answers = [[error("no_such_session", "no session mine")], [done("created")], [done("again")]]
    with FakeLoopd(sock, answers) as loopd:
        result = run(["--socket", str(sock), "--session", "mine"], stdin="one\ntwo\n")
    assert result.exit_code == 0, result.output
    assert [(t.session, t.resume) for t in loopd.turns] == [
        ("mine", True), ("mine", False), ("mine", True),
    ]


def test_an_invalid_session_id_is_a_usage_error(sock):
    result = run(["--socket", str(sock), "--session", "../etc"])
    assert result.exit_code == 2


def test_interactive_runs_a_turn_per_line_until_quit(sock):
    with FakeLoopd(sock, [[event(Content(text="A")), done("A")], [done("B")]]) as loopd:
        result = run(["--socket", str(sock)], stdin="first\n\nsecond\n/quit\nnever\n")
    assert result.exit_code == 0
    assert [t.content for t in loopd.turns] == ["first", "second"]
    assert [t.resume for t in loopd.turns] == [False, True]
    assert result.stdout == "A\n"


def test_an_error_in_interactive_mode_does_not_end_the_chat(sock):
    with FakeLoopd(sock, [[error("session_busy", "busy")], [done("ok")]]) as loopd:
        result = run(["--socket", str(sock)], stdin="a\nb\n")
    assert result.exit_code == 0
    assert "error: session_busy: busy" in result.stderr
    assert len(loopd.turns) == 2


def test_no_thinking_is_sent_with_the_turn(sock):
    with FakeLoopd(sock, [[done("ok")]]) as loopd:
        run(["--socket", str(sock), "--no-thinking", "--say", "x"])
    assert loopd.turns[0].thinking is False


def test_loopd_not_running_is_an_error(sock):
    result = run(["--socket", str(sock), "--say", "x"])
    assert result.exit_code == 1
    assert "not running" in result.stderr


# --- formatting ---------------------------------------------------------------------------

def test_the_progress_bar_shows_the_cached_part_distinctly():
    assert progress_bar(Progress(total=100, cache=20, processed=60), width=10) == (
        "[==####....] 60/100 (cached 20)"
    )
    assert progress_bar(Progress(total=0, cache=0, processed=0), width=4) == "[....] 0/0 (cached 0)"


@pytest.mark.parametrize(
    ("body", "line"),
    [(Queued(ahead=2), "queued: 2 ahead"),
     (Waiting(slot_busy=True), "waiting: the slot is busy with another client"),
     (Retrying(attempt=2, after_ms=500, error="503"), "retrying (attempt 2, in 500 ms): 503"),
     (ThinkingCapped(tokens=4096), "thinking capped at 4096 tokens"),
     (CacheLossEvent(expected=900, got=3), "cache lost: 3 of 900 tokens reused; the prompt is "
                                           "read again"),
     (ToolWaitingEvent(approval="ap-1", expires="2026-09-18T13:00:00Z"),
      "waiting for approval ap-1 (expires 2026-09-18T13:00:00Z)"),
     (ToolWaitingEvent(reason="running", elapsed=125), "still running (2 min 5 s)"),
     (ToolResultEvent.model_validate({"name": "echo", "class": "private", "truncated": True}),
      "tool echo (private, truncated)")],
)
def test_each_status_event_is_one_line(body, line):
    assert status_line(body) == line


def render(events, *, tty):
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(text=out, status=err, tty=tty)
    for body in events:
        renderer.event(body)
    renderer.end_turn()
    return out.getvalue(), err.getvalue()


def test_not_a_terminal_gets_plain_lines():
    out, err = render([Progress(total=9, cache=3, processed=9), Reasoning(text="so"),
                       Content(text="Hi"), Content(text="!")], tty=False)
    assert out == "Hi!\n"
    assert err == "prompt: 9/9 tokens (cached 3)\nso\n"
    assert "\x1b" not in out + err


def test_a_terminal_gets_a_live_bar_and_dimmed_reasoning():
    out, err = render([Progress(total=9, cache=3, processed=3), Progress(total=9, cache=3,
                       processed=9), ToolCallStarted(name="clock"), Reasoning(text="so"),
                       Content(text="Hi")], tty=True)
    assert out == "Hi\n"
    assert "\r\x1b[K[" in err and "3/9 (cached 3)" in err and "running clock" in err
    assert f"{DIM}so" in err


def test_a_running_tool_updates_the_live_line_on_a_terminal_and_gets_a_line_otherwise():
    events = [ToolCallStarted(name="consult"), ToolWaitingEvent(reason="running", elapsed=15),
              ToolWaitingEvent(reason="running", elapsed=30), Content(text="Done.")]
    out, err = render(events, tty=True)
    assert out == "Done.\n"
    assert err.count("\n") == 0  # one line, rewritten in place
    assert err.count(CLEAR_LINE + "running consult… 15 s") == 1
    assert err.count(CLEAR_LINE + "running consult… 30 s") == 1
    _, plain = render(events, tty=False)
    assert plain == "consult still running (15 s)\nconsult still running (30 s)\n"


def test_tool_choice_is_sent_in_order(sock):
    with FakeLoopd(sock, [[done("ok")]]) as loopd:
        run(["--socket", str(sock), "--tool-choice", "required", "--tool-choice", "none",
             "--say", "x"])
    assert loopd.turns[0].tool_choice == ["required", "none"]
