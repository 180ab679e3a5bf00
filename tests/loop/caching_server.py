"""A fake llama-server with a prompt cache, as an httpx transport, for the extension property.

A compaction request (its newest message is loopd's compaction instruction) is answered with a
summary numbered in order (so no two epochs open alike), without taking a step of the script.

It renders a request's prompt as the JSON of its tools, then of each message, as sent, and
counts one token per character. Each slot holds the last prompt plus what was generated (the
assistant message the next request should replay); ``cache_n`` is the length of the common
prefix of a new prompt with what the slot holds, exactly as a prefix cache reuses tokens. So if
loopd changes one earlier byte, ``cache_n`` falls and the loop records a CacheLoss. A prompt
that does not extend all that its slot holds moves the held one into a host-RAM cache and takes
the best match from there first, as the real server does with ``--cache-ram`` on and
``--slot-prompt-similarity 1`` (serving/presets.ini; tests/inference/test_real_slot_switch.py).

The chunks are built with the inference tests' chunk helpers, which are checked against the
real server's recordings.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from inference.fake_server import delta_chunk, progress_chunk, sse, usage_chunk
from loopd.epochs import COMPACT_INSTRUCTION


@dataclass(frozen=True)
class Planned:
    """What the model 'says' for one request."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, arguments JSON text)


def render(body: dict[str, Any]) -> str:
    """The prompt as the server would see it: the JSON exactly as sent, keys in the order the
    request has them (a chat template renders a tool's parameters in their given order, so a
    reordered key is a changed prompt)."""
    return json.dumps(body.get("tools", []), ensure_ascii=False) + "".join(
        json.dumps(message, ensure_ascii=False) for message in body["messages"]
    )


def common_prefix(a: str, b: str) -> int:
    """How many leading characters two texts share (character by character, on purpose)."""
    size = min(len(a), len(b))
    return next((i for i in range(size) if a[i] != b[i]), size)


class CachingServer:
    def __init__(self) -> None:
        self.script: list[Planned] = []
        self.bodies: list[dict[str, Any]] = []
        self.slots: dict[int, str] = {}
        self.ram: list[str] = []  # the host-RAM prompt cache
        self._calls = 0
        self.summaries = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        if body["messages"][-1].get("content") == COMPACT_INSTRUCTION:
            self.summaries += 1
            planned = Planned(content=f"Summary {self.summaries}.")
        else:
            planned = self.script.pop(0) if self.script else Planned(content="(end of script)")
        prompt = render(body)
        slot = body["id_slot"]
        cache_n = self._switch(slot, prompt)
        calls = [self._call(name, arguments) for name, arguments in planned.tool_calls]
        assistant: dict[str, Any] = {"role": "assistant"}
        if planned.content:
            assistant["content"] = planned.content
        if planned.reasoning:
            assistant["reasoning_content"] = planned.reasoning
        if calls:
            assistant["tool_calls"] = calls
        generated = json.dumps(assistant, ensure_ascii=False)
        self.slots[slot] = prompt + generated
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"},
            stream=_Chunks(self._stream(prompt, cache_n, planned, calls, len(generated))),
        )

    def _switch(self, slot: int, prompt: str) -> int:
        """What the slot reuses for ``prompt``, after the RAM cache swapped sessions if due."""
        held = self.slots.get(slot, "")
        cache_n = common_prefix(prompt, held)
        if held and cache_n < len(held):
            self.ram.append(held)
            best = max(self.ram, key=lambda kept: common_prefix(prompt, kept))
            if common_prefix(prompt, best) > cache_n:
                self.ram.remove(best)
                self.slots[slot], cache_n = best, common_prefix(prompt, best)
        return cache_n

    def _call(self, name: str, arguments: str) -> dict[str, Any]:
        self._calls += 1
        return {"id": f"call-{self._calls}", "type": "function",
                "function": {"name": name, "arguments": arguments}}

    @staticmethod
    def _stream(prompt: str, cache_n: int, planned: Planned, calls: list[dict[str, Any]],
                predicted_n: int) -> list[bytes]:
        cid = "chatcmpl-caching"
        total = len(prompt)
        chunks = [progress_chunk(cid, total, cache_n, cache_n),
                  progress_chunk(cid, total, cache_n, total)]
        if planned.reasoning:
            chunks.append(delta_chunk(cid, {"reasoning_content": planned.reasoning}))
        if planned.content:
            chunks.append(delta_chunk(cid, {"content": planned.content}))
        for index, tool_call in enumerate(calls):
            chunks.append(delta_chunk(cid, {"tool_calls": [{"index": index, **tool_call}]}))
        chunks.append(delta_chunk(cid, {}, "tool_calls" if calls else "stop"))
        chunks.append(usage_chunk(cid, cache_n, total - cache_n, predicted_n))
        return [sse(chunk) for chunk in chunks] + [sse("[DONE]")]


class _Chunks(httpx.AsyncByteStream):
    """The body as the client reads a real one: chunk by chunk."""

    def __init__(self, chunks: list[bytes]):
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
