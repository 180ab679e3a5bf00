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
import subprocess

import pytest
from bxcore.records import Assistant, ToolResult, Usage
from loopd.store import SessionStore

from .real_stack import (
    BIN,
    inferproxy,
    isolated_loopd,
    loopd_config,
    remove,
    tcp_llama,
    tcp_reachable_from,
    workdir,
)

pytestmark = pytest.mark.real_server

SESSION = "real-stack"


def say(sock, text: str, *choices: str) -> str:
    args = [str(BIN / "bxctl"), "chat", "--socket", str(sock), "--session", SESSION]
    for choice in choices:
        args += ["--tool-choice", choice]
    result = subprocess.run([*args, "--say", text], capture_output=True, text=True,
                            timeout=1800, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_three_turns_a_restart_and_a_cache_hit_through_inferproxy_only():
    directory = workdir()
    try:
        with tcp_llama(directory) as port, inferproxy(directory, port) as infer_sock:
            config = loopd_config(directory, infer_sock)
            loop_sock = directory / "run" / "loop.sock"
            log = directory / "loopd.log"
            with isolated_loopd(config, loop_sock, log) as pid:
                assert tcp_reachable_from(None, port) == "connected"  # the port is there...
                assert tcp_reachable_from(pid, port) != "connected"  # ...but not for loopd
                say(loop_sock, "Say hello in one short sentence.", "none")
                say(loop_sock, "What time is it? Call the clock tool.", "required", "none")
                say(loop_sock, "Use find_tool to look for a tool named echo, then call it with "
                               "call_tool to echo the text ping.", "required", "required", "none")
            session = SessionStore(directory / "home").open(SESSION)
            records = session.records
            before_restart = len(records)
            with isolated_loopd(config, loop_sock, log):
                say(loop_sock, "Thank you.", "none")
            records = SessionStore(directory / "home").open(SESSION).records
    finally:
        remove(directory)

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
