"""Class 11: approvals show the owner the truth.

A call that waits for approval is shown by one function, bxcore.display.describe_call, in
``bxctl approvals`` and in gatewayd's Mattermost post: the deciding fields first, long values
wrapped (never one line of sorted JSON), and every invisible, bidi or look-alike character
written as ``<U+XXXX>`` under a warning. The attack: a command whose displayed text a right-to-left
override reverses, through the real loopd and brokerd, read back with the real bxctl.
"""

from __future__ import annotations

import threading
import time

import pytest
from bxcore.display import describe_call, visible
from bxctl.cli import main as bxctl
from click.testing import CliRunner
from gatewayd.render import approval_posts

from .laundering_support import audited, chain_ok, directive, grant, scripted_rig, via_call_tool

RLO = "\u202e"


def test_hidden_characters_are_shown_and_counted():
    shown = describe_call("shell.run", '{"argv": ["rm", "-rf", "~/exe.\u202etxt"], "z": 1}')
    lines = shown.splitlines()
    assert lines[0].startswith("WARNING: 1 invisible")
    assert lines[1:4] == ["tool: shell.run", "argv:", '    ["rm","-rf","~/exe.⟨U+202E⟩txt"]']
    assert RLO not in shown


@pytest.mark.parametrize("char", ["\u200b", "\u2066", "\u00a0", "\ufeff", "\x1b", "\u3000"])
def test_every_kind_of_hidden_character_is_made_visible(char):
    text, count = visible(f"a{char}b")
    assert count == 1 and text == f"a⟨U+{ord(char):04X}⟩b"


def test_deciding_fields_come_first_and_long_values_are_wrapped_not_cut():
    long = "x" * 200
    shown = describe_call("http.fetch", f'{{"a": "1", "url": "https://h/{long}"}}', width=72)
    lines = shown.splitlines()
    assert lines[:2] == ["tool: http.fetch", "url:"]
    assert max(len(line) for line in lines) <= 72 + 4
    assert "".join(line.strip() for line in lines[2:5]) == f"https://h/{long}"
    assert lines[5:] == ["a:", "    1"]


def test_a_look_alike_host_is_shown_for_what_it_is():
    shown = describe_call("http.fetch", '{"url": "https://p\u0430ypal.com/"}')
    assert "https://p⟨U+0430⟩ypal.com/" in shown and shown.startswith("WARNING")


def test_the_mattermost_post_uses_the_same_rendering():
    arguments = '{"command": "echo hi\u202e"}'
    post = "".join(approval_posts("id1", "shell.run", arguments, "shell.toml",
                                  "2026-12-01T00:00:00Z"))
    assert describe_call("shell.run", arguments) in post and RLO not in post


@pytest.mark.sandbox
def test_bxctl_approvals_shows_a_pending_call_truthfully(short_dir):
    ask = grant(["shell.run"], "ask", "private",
                argument=("cwd", "paths", f"{short_dir}/granted/**"), sandbox="")
    with scripted_rig(short_dir, grants={"ask.toml": ask}, approval_timeout=120) as rig:
        stack, home = rig.stack, rig.stack.home
        argv = ["sh", "-c", f"echo harmless #{RLO}; rm -rf ~"]
        call = via_call_tool("shell.run", {"cwd": str(rig.granted), "argv": argv})
        turn = threading.Thread(target=stack.turn, args=("ask", directive(call)),
                                kwargs={"resume": False})
        turn.start()
        runner = CliRunner()
        listing = ""
        for _ in range(600):
            listing = runner.invoke(bxctl, ["approvals", "--config", str(stack.config)]).output
            if "shell.run" in listing:
                break
            time.sleep(0.1)
        assert "tool: shell.run" in listing, listing
        assert "WARNING: 1 invisible" in listing and "⟨U+202E⟩" in listing
        assert RLO not in listing
        approval_id = listing.split()[0]
        denied = runner.invoke(bxctl, ["deny", approval_id, "--config", str(stack.config)])
        assert "denied" in denied.output, denied.output
        turn.join(120)
        assert audited(home, "shell.run")[-1][0] == "deny"
        assert chain_ok(home)
