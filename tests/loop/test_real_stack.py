"""On the real server (the design's "on device" list, with the tiny Qwen and the bare-JSON tool
template): three ``bxctl chat --say`` turns against a real ``loopd serve`` + ``inferproxy`` +
llama-server (plain, ``clock``, ``echo`` via ``find_tool``), whose log has one Usage per
completion, no CacheLoss and a ToolResult per tool call; then a loopd restart and a fourth turn
that resumes and hits the cache. loopd runs in its own network namespace and cannot reach the
server's TCP port; its turns work through inferproxy's socket.

The tiny model does not pick tools by itself reliably, so the tool turns pass ``tool_choice``
(required for the tool completions, none for the answer): a request parameter, so the requests
stay strict extensions.
"""

from __future__ import annotations

import json

import pytest
from bxcore.records import Assistant, ToolResult, Usage

from .real_stack import real_stack, tcp_reachable_from

pytestmark = pytest.mark.real_server

SESSION = "real-stack"


def test_three_turns_a_restart_and_a_cache_hit_through_inferproxy_only():
    with real_stack() as stack:
        with stack.loopd() as pid:
            assert tcp_reachable_from(None, stack.port) == "connected"  # the port is there...
            assert tcp_reachable_from(pid, stack.port) != "connected"  # ...but not for loopd
            stack.say(SESSION, "Say hello in one short sentence.", "none")
            stack.say(SESSION, "What time is it? Call the clock tool.", "required", "none")
            stack.say(SESSION, "Use find_tool to look for a tool named echo, then call it with "
                      "call_tool to echo the text ping.", "required", "required", "none")
        before_restart = len(stack.records(SESSION))
        with stack.loopd():
            stack.say(SESSION, "Thank you.", "none")
        records = stack.records(SESSION)

    types = [r.type for r in records]
    dump = "\n".join(r.model_dump_json()[:300] for r in records)
    assert "cache_loss" not in types, dump
    assistants = [r for r in records if isinstance(r, Assistant)]
    usages = [r for r in records if isinstance(r, Usage)]
    assert len(usages) == len(assistants)
    assert all(types[i + 1] == "usage" for i, t in enumerate(types) if t == "assistant")
    calls = [c for a in assistants for c in (a.tool_calls or [])]
    results = {r.tool_call_id: r for r in records if isinstance(r, ToolResult)}
    assert sorted(results) == sorted(c.id for c in calls)
    names = [c.function.name for c in calls]
    assert "clock" in names and "find_tool" in names
    echoed = [c for c in calls if c.function.name == "call_tool"
              and json.loads(c.function.arguments).get("name") == "echo"]
    assert echoed and results[echoed[0].id].content == "ping"

    # The fourth turn, after the restart, resumed the session and hit the cache.
    last_before = [r for r in records[:before_restart] if isinstance(r, Usage)][-1]
    first_after = next(r for r in records[before_restart:] if isinstance(r, Usage))
    previous_total = last_before.cache_n + last_before.prompt_n + last_before.predicted_n
    assert first_after.cache_n >= 0.9 * previous_total, (first_after, previous_total)
