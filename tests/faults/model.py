"""A scripted model behind a real socket: llama-server's HTTP surface, with a prompt cache.

It answers what loopd's start-up self-test asks (``/props``, ``/slots``, ``/apply-template``,
``/tokenize``, a probe tool call and its round trip, with a cache hit), and every other chat
request with whatever its ``brain`` decides. The chunks come from ``tests/loop/caching_server``
(a prefix cache, one token per character), built with the inference tests' chunk helpers, which
``test_hostile_model.py`` checks against the real server's recordings in ``tests/fixtures/sse/``.

The default brain obeys: when the newest message (the owner's, or a tool result: an injection)
holds a line ``DO [[name, {arguments}], ...]`` it makes exactly those tool calls; otherwise it
answers ``ok: <the first 40 characters of what it read>``. That is the hostile model: it does
whatever any text in front of it says.

    model = ScriptedModel()
    with UnixHTTPServer(tmp / "llama.sock", model.handle): ...
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from inference.fake_server import FakeServer, Reply, _Body
from loop.caching_server import CachingServer, Planned, render
from loopd.inference.selftest import PROBE_SYSTEM, PROBE_TOOL
from loopd.inference.slot_switch import PROBE_SYSTEM as SWITCH_SYSTEM

Brain = Callable[[dict[str, Any]], Planned]
SLOT_CONTEXT = 4096
DIRECTIVE = "DO "


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def directives(text: str) -> list[tuple[str, str]]:
    """The tool calls a ``DO [...]`` line asks for, as (name, arguments JSON text)."""
    for line in text.splitlines():
        if line.startswith(DIRECTIVE):
            try:
                calls = json.loads(line[len(DIRECTIVE) :])
            except ValueError:
                return []
            return [(str(name), json.dumps(arguments)) for name, arguments in calls]
    return []


def obedient(body: dict[str, Any]) -> Planned:
    last = body["messages"][-1]
    text = _text(last)
    calls = directives(text)
    if calls and not _answered(body, calls):
        return Planned(tool_calls=tuple(calls))
    # The session's marker leads its first message as whitespace a model reads past
    # (loopd.inference.markers); so does this one.
    return Planned(content=f"ok: {text.lstrip()[:40]}")


def _answered(body: dict[str, Any], calls: list[tuple[str, str]]) -> bool:
    """A directive already obeyed: the model does it once, not in a loop (a tool result that
    repeats the directive it came from would otherwise run forever)."""
    wanted = set(calls)
    for message in reversed(body["messages"][:-1]):
        if message.get("role") == "user":
            return False
        for call in message.get("tool_calls") or ():
            if (call["function"]["name"], call["function"]["arguments"]) in wanted:
                return True
    return False


def self_test_answer(body: dict[str, Any]) -> Planned:
    if body["messages"][-1].get("role") == "user":
        return Planned(tool_calls=((PROBE_TOOL.name, '{"path": "README.md"}'),))
    return Planned(content="It is Boxmaker.")


class ScriptedModel(CachingServer):
    """``faults`` is a queue of fake-server replies (503s, cuts, stalls) served instead of the
    next chat completions, for fault injection; ``chats`` counts chat requests answered."""

    def __init__(self, brain: Brain = obedient) -> None:
        super().__init__()
        self.brain = brain
        self.faults: list[Reply] = []
        self.chats = 0

    async def handle(self, request: httpx.Request) -> httpx.Response:  # type: ignore[override]
        path = request.url.path
        if path == "/v1/chat/completions":
            self.chats += 1
            body = json.loads(request.content)
            system = _text(body["messages"][0]).partition("\n")[2]  # after the session marker
            if self.faults and system not in (PROBE_SYSTEM, SWITCH_SYSTEM):
                reply = self.faults.pop(0)
                return httpx.Response(reply.status, headers={"content-type": reply.content_type},
                                      stream=_Body(reply.steps, FakeServer([])))
            probe = system == PROBE_SYSTEM
            self.script = [(self_test_answer if probe else self.brain)(body)]
            return super().handle(request)
        return self._meta(path, request)

    def _meta(self, path: str, request: httpx.Request) -> httpx.Response:
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/props":
            return httpx.Response(200, json={
                "total_slots": 2, "chat_template": "{{ messages }}",
                "default_generation_settings": {"n_ctx": SLOT_CONTEXT},
            })
        if path == "/slots":
            return httpx.Response(200, json=[
                {"id": slot, "n_ctx": SLOT_CONTEXT, "is_processing": False, "speculative": False}
                for slot in (0, 1)
            ])
        if path == "/apply-template":
            return httpx.Response(200, json={"prompt": render(json.loads(request.content))})
        if path == "/tokenize":
            content = json.loads(request.content).get("content", "")
            return httpx.Response(200, json={"tokens": list(range(len(content) // 8))})
        if path == "/v1/chat/completions/control":
            return httpx.Response(200, json={"success": True})
        return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found",
                                                   "type": "not_found_error"}})

