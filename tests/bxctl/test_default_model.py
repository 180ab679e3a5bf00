"""The first chat shows what Boxmaker is for: `scripts/up`'s default model, asked in plain words
about a note in the granted notes directory, finds the file tool with ``find_tool``, reads the
note through ``call_tool`` and answers with what the note says.

The stack is the one `scripts/up` starts (`bxctl up` with the example grants and no ``--model``,
so the router preset is bxctl's ``DEFAULT_MODEL``, whatever it names), sampling greedily as the
local stack's config says, so a turn depends only on its prompt. No ``tool_choice`` is passed:
the model decides to use the tools itself. The default 1.5B first searches for the words it
wants ("code word"); the miss names the tools there are, it searches again for ``fs.read`` and
reads the note (docs/decisions/tool-discovery.md).
"""

from __future__ import annotations

import json

import pytest
from bxcore.records import Assistant, ToolResult
from loopd.store import SessionStore
from support.bxctl import bxctl
from support.llama import llama_paths, require_llama

CODE_WORD = "PERIWINKLE-4471"
SESSION = "first-chat"
READS = {"fs.read", "fs.search"}  # the granted tools that return a file's text


@pytest.mark.real_server
def test_the_default_model_reads_a_granted_note_when_asked_in_plain_words(tmp_path, monkeypatch):
    require_llama()
    binary, models = llama_paths()
    home = tmp_path / "home"  # the stack's ~, where the example notes grant points
    note = home / "notes" / "plan.md"
    note.parent.mkdir(parents=True)
    note.write_text(f"# Plan\nBuy bread on Friday.\nThe code word is {CODE_WORD}.\n")
    monkeypatch.setenv("HOME", str(home))
    state = tmp_path / "stack"
    up = bxctl("up", "--no-chat", "--state", str(state), "--llama-server", str(binary),
               "--models", str(models), timeout=3600)
    try:
        assert up.returncode == 0, up.stderr
        chat = bxctl("chat", "--socket", str(state / "run" / "loop.sock"), "--session",
                     SESSION, "--say", f"What is the code word in my note {note}?",
                     timeout=3600)
        assert chat.returncode == 0, chat.stderr
    finally:
        down = bxctl("down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    records = SessionStore(state / "home").open(SESSION).records

    assistants = [r for r in records if isinstance(r, Assistant)]
    calls = [c for a in assistants for c in (a.tool_calls or [])]
    results = {r.tool_call_id: r.content for r in records if isinstance(r, ToolResult)}
    trace = "\n".join(f"{c.function.name} {c.function.arguments} -> {results.get(c.id)!r:.200}"
                      for c in calls) + f"\nanswer: {chat.stdout!r}"
    assert calls and calls[0].function.name == "find_tool", trace
    reads = [c for c in calls if c.function.name == "call_tool"
             and json.loads(c.function.arguments).get("name") in READS]
    assert reads, trace
    read = json.loads(reads[0].function.arguments)
    assert read["arguments"]["path"] == str(note), trace
    assert CODE_WORD in results[reads[0].id], trace  # the note's text came back to the model
    assert CODE_WORD in (assistants[-1].content or ""), trace  # and it answered with it
    assert CODE_WORD in chat.stdout, trace
