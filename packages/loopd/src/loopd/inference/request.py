"""The request body of one streamed chat completion (pure).

Every request streams with ``return_progress`` (prompt processing then produces events, which the
liveness timer counts), pins its slot with ``id_slot``, asks for ``cache_prompt``, names the router
model, sends the sampling settings (the server's default temperature is 1.0), asks for the usage
chunk, and carries ``reasoning_control`` so the thinking cap can end a reasoning block.

A request that must not think (``bxctl chat --no-thinking``) says so twice, because templates
differ (measured in docs/decisions/thinking.md): ``chat_template_kwargs.enable_thinking``
false, which Qwen3-family templates such as Ornith's turn into a closed, empty think block; and
``reasoning_budget_tokens`` 0, which makes the server close at once a think block the template
forces open (serving/templates/chatml-think-open.jinja ignores the template switch).

Every session's first user message starts with its marker (inference/markers.py), after the
baseline (the system message and the tools, which the template renders before it), so all
sessions' prompts share exactly the baseline: a new thread finds it in the slot and processes only
its own tokens. A session keeps its place through the server's host-RAM prompt cache, which saves
the held session and loads the incoming one on every switch when slots are never matched by
similarity (``--slot-prompt-similarity 1``; at the default 0.10 a held session sharing most of its
prompt with the incoming one, as a short thread does through the baseline, is reused in place and
lost). On a model that cannot rewind partially (hybrid or sliding-window attention), the server
checkpoints the slot at the start of the first user message, the baseline's end, so a new thread
rewinds to it (docs/decisions/new-thread-on-the-baseline.md). A session logged before markers were
recorded keeps its legacy marker at the start of the system message.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from bxcore.chat import message_json
from bxcore.config import InferenceSection

from .api import ChatMessage, ChatRequest
from .markers import legacy_marker

CHAT_PATH = "/v1/chat/completions"
CONTROL_PATH = "/v1/chat/completions/control"


class _EncodedMessages:
    """The request JSON of each session's last message array, so a request encodes only what is new.

    A session hands every request of an epoch the same frozen message objects, each request the
    one before plus new messages (the append-only rule); encoding all of them again per request
    made the harness's cost grow with the log (docs/performance.md, bench:loop). So the messages
    of a session's last request are kept beside their encodings: when the next request starts
    with them, only the messages after them are encoded. The check compares the two tuples, which
    CPython does by identity first, in C (about 60 µs for 6,667 messages, where a Python-level
    lookup per message took 3 ms). A message equal to the kept one but another object counts as
    the same (``message_json`` depends on the value only). Anything else (a new epoch, a session
    opened again) is encoded whole. The encoded dicts are shared between requests: nothing may
    mutate them (the body is only serialised); the list is the caller's own. At most ``sessions``
    sessions are kept, the least recently used is dropped (loopd keeps as many open).
    """

    def __init__(self, sessions: int = 64):
        self._sessions = sessions
        self._last: OrderedDict[str, tuple[tuple[ChatMessage, ...], list[dict[str, Any]]]] = (
            OrderedDict()
        )

    def encode(self, session: str, messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
        current = tuple(messages)
        kept, encoded = self._last.pop(session, ((), []))
        if current[: len(kept)] != kept:
            kept, encoded = (), []
        encoded = encoded + [message_json(m) for m in current[len(kept) :]]
        self._last[session] = (current, encoded)
        if len(self._last) > self._sessions:
            self._last.popitem(last=False)
        return list(encoded)


_ENCODED = _EncodedMessages()


def marked(marker: str | None, session: str, messages: list[dict[str, Any]]
           ) -> list[dict[str, Any]]:
    """``messages`` with the session's marker put at the start of the first user message after
    the leading system message, so everything before it (the baseline) is the same in every
    session; with no such message, at the start of the system message, or as a system message of
    its own. ``marker`` None: the session's legacy marker, at the start of the system message.
    The encoded dicts are shared between requests, so the changed one is copied, never changed."""
    first = 1 if messages and messages[0].get("role") == "system" else 0
    if marker is None:
        marker = legacy_marker(session)
    elif (len(messages) > first and messages[first].get("role") == "user"
            and isinstance(messages[first].get("content"), str)):
        opened = {**messages[first], "content": marker + messages[first]["content"]}
        return [*messages[:first], opened, *messages[first + 1:]]
    if first and isinstance(messages[0].get("content"), str):
        return [{**messages[0], "content": marker + messages[0]["content"]}, *messages[1:]]
    return [{"role": "system", "content": marker.rstrip() or marker}, *messages]


def request_body(request: ChatRequest, section: InferenceSection) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": section.model,
        "messages": marked(request.marker, request.session,
                           _ENCODED.encode(request.session, request.messages)),
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_progress": True,
        "id_slot": request.slot,
        "cache_prompt": True,
        "reasoning_control": True,
        "temperature": section.sampling.temperature,
        "top_p": section.sampling.top_p,
        "top_k": section.sampling.top_k,
    }
    if request.tools:
        body["tools"] = [tool.as_openai_tool() for tool in request.tools]
    if request.tool_choice is not None:
        body["tool_choice"] = request.tool_choice
    if not request.thinking:
        body["chat_template_kwargs"] = {"enable_thinking": False}
        body["reasoning_budget_tokens"] = 0
    max_tokens = request.max_tokens or section.max_tokens
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def reasoning_end_body(completion_id: str, section: InferenceSection) -> dict[str, Any]:
    """Ends the reasoning block of a running completion; the router needs the model to route it."""
    return {"id": completion_id, "action": "reasoning_end", "model": section.model}
