"""The request body of one streamed chat completion (pure).

Every request streams with ``return_progress`` (prompt processing then produces events, which the
liveness timer counts), pins its slot with ``id_slot``, asks for ``cache_prompt``, names the router
model, sends the sampling settings (the server's default temperature is 1.0), asks for the usage
chunk, and carries ``reasoning_control`` so the thinking cap can end a reasoning block.

A request that must not think (``bxctl chat --no-thinking``) says so twice, because templates
differ (measured in docs/decisions.md, "Thinking off"): ``chat_template_kwargs.enable_thinking``
false, which Qwen3-family templates such as Ornith's turn into a closed, empty think block; and
``reasoning_budget_tokens`` 0, which makes the server close at once a think block the template
forces open (serving/templates/chatml-think-open.jinja ignores the template switch).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from bxcore.chat import message_json
from bxcore.config import InferenceSection

from .api import ChatMessage, ChatRequest

CHAT_PATH = "/v1/chat/completions"
CONTROL_PATH = "/v1/chat/completions/control"


class _EncodedMessages:
    """Each message's request JSON, remembered while the message object lives on.

    A session hands the same frozen message objects to every request of an epoch; encoding all of
    them again per request made the harness's cost grow with the log (docs/performance.md,
    bench:loop: one pydantic dump per message per request). Entries are keyed by identity and
    hold the message itself, so an id is never mistaken for another object's. The returned
    dicts are shared: nothing may mutate them (the body is only serialised).
    """

    def __init__(self, limit: int = 65_536):
        self._limit = limit
        self._entries: OrderedDict[int, tuple[ChatMessage, dict[str, Any]]] = OrderedDict()

    def encode(self, message: ChatMessage) -> dict[str, Any]:
        key = id(message)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is message:
            self._entries.move_to_end(key)
            return hit[1]
        encoded = message_json(message)
        self._entries[key] = (message, encoded)
        self._entries.move_to_end(key)
        if len(self._entries) > self._limit:
            self._entries.popitem(last=False)
        return encoded


_ENCODED = _EncodedMessages()


def request_body(request: ChatRequest, section: InferenceSection) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": section.model,
        "messages": [_ENCODED.encode(m) for m in request.messages],
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
