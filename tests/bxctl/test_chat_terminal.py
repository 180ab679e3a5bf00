"""What ``bxctl chat`` prints from the model or a tool carries nothing a terminal acts on.

An answer, a reasoning trace, a tool name, an error or an approval id can hold OSC 8 links,
OSC 52 clipboard writes, CSI sequences, C1 controls, a bare ESC or other controls. Property: for
any such text, in every mode (``--say``, ``--json``, interactive; a terminal or not), the output
holds no ESC, no C1 control, no DEL and no C0 control but newline and tab, besides the few
escapes the renderer writes itself on a terminal; and the text is there, made visible.
"""

from __future__ import annotations

import io
import json
import re
import tempfile
from pathlib import Path

from bxcore.protocol.loop import (
    Content,
    Reasoning,
    Retrying,
    ToolCallStarted,
    ToolResultEvent,
    ToolWaitingEvent,
    TurnEvent,
)
from bxctl.cli import main
from bxctl.render import CLEAR_LINE, DIM, RESET, Renderer, terminal_text
from click.testing import CliRunner
from fake_loopd import FakeLoopd, done, error, event
from hypothesis import given, settings
from hypothesis import strategies as st

ACTS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but \t and \n, DEL, C1 (ESC is C0)
SEQUENCES = [
    "\x1b]8;;https://attacker.example/?d=secret\x1b\\click\x1b]8;;\x1b\\",  # OSC 8 link
    "\x1b]52;c;cm0gLXJmIH4K\x07",  # OSC 52: write "rm -rf ~" to the clipboard
    "\x1b[2J\x1b[H", "\x1b[31m", "\x1b[1A\x1b[2K",  # CSI: clear, colour, move up and erase
    "\x9b31m", "\x9d0;title\x9c", "\x85", "\x1b", "\r", "\x08", "\x07", "\x7f", "\x00",
]
hostile = st.lists(st.one_of(st.sampled_from(SEQUENCES), st.text()), max_size=6).map("".join)


def _frames(text: str):
    return [
        event(Reasoning(text=text)),
        event(Content(text=text)),
        event(ToolCallStarted(name=text)),
        event(ToolWaitingEvent(reason="running", elapsed=3)),
        event(ToolResultEvent.model_validate({"name": text, "class": "public",
                                              "truncated": False})),
        event(ToolWaitingEvent(approval=text, expires=text)),
        event(Retrying(attempt=1, after_ms=5, error=text)),
        done(text),
    ]


def _chat(args: list[str], answers, stdin: str = "") -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="bxc") as directory:
        sock = Path(directory) / "loop.sock"
        with FakeLoopd(sock, answers):
            result = CliRunner().invoke(main, ["chat", "--socket", str(sock), *args],
                                        input=stdin)
    return result.stdout, result.stderr


@settings(max_examples=60)
@given(text=hostile)
def test_bxctl_chat_prints_nothing_a_terminal_acts_on(text):
    shown = terminal_text(text)
    failed = [error("turn_limit", text)]
    runs = ((["--say", "hi"], [_frames(text)], ""), (["--say", "hi"], [failed], ""),
            ([], [_frames(text), failed], "hi\nagain\n"))
    for args, answers, stdin in runs:  # each loopd is asked every answer it holds
        output = "".join(_chat(args, answers, stdin))
        assert not ACTS.search(output), repr(output)
        assert shown in output
    stdout, stderr = _chat(["--say", "hi", "--json"], [_frames(text)])
    assert not ACTS.search(stdout + stderr), repr(stdout + stderr)
    # One JSON object a line, split at "\n" only: splitlines() also splits at U+2028, which
    # JSON may hold raw in a string.
    last = stdout.rstrip("\n").split("\n")[-1]
    assert json.loads(last)["content"] == text  # nothing lost in JSON


@given(text=hostile)
def test_the_terminal_renderer_writes_no_escape_but_its_own(text):
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(text=out, status=err, tty=True)
    for frame in _frames(text)[:-1]:
        renderer.event(frame.parse(TurnEvent).event)
    renderer.end_turn()
    written = out.getvalue() + err.getvalue()
    for own in (CLEAR_LINE, DIM, RESET):
        written = written.replace(own, "")
    assert not ACTS.search(written), repr(written)
    assert terminal_text(text) in out.getvalue()


def test_terminal_text_keeps_lines_and_tabs_and_shows_escapes():
    assert terminal_text("a\tb\nc\x1b[31m\x9b") == "a\tb\nc⟨U+001B⟩[31m⟨U+009B⟩"
