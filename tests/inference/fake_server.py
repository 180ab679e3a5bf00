"""A scriptable fake llama-server for fault injection, as an httpx transport (no socket).

Each chat request takes the next ``Reply`` from the script; a reply is a status, a body and a
list of steps (bytes, ``STALL`` forever, ``CUT`` the connection). The chunks it sends are built
like the real server's (``tests/fixtures/sse/`` holds recordings; test_fake_server.py checks that
every chunk kind here has exactly the keys of its recorded counterpart).

    fake = FakeServer([Reply.stream(completion(content="Hi"))])
    client = InferenceClient(section, transport=fake.transport())
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

STALL = object()  # a step that never ends: the server goes silent
CUT = object()  # a step that drops the connection


@dataclass(frozen=True)
class Pause:
    """A step: silence for this many seconds."""

    seconds: float


@dataclass(frozen=True)
class WaitFor:
    """A step: silence until the test sets the event."""

    event: asyncio.Event


def _chunk(chunk_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return {
        **body,
        "created": 1796022200,
        "id": chunk_id,
        "model": "qwen-tools",
        "system_fingerprint": "b0-unknown",
        "object": "chat.completion.chunk",
    }


def delta_chunk(chunk_id: str, delta: dict[str, Any], finish: str | None = None) -> dict:
    return _chunk(chunk_id, {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}]})


def progress_chunk(chunk_id: str, total: int, cache: int, processed: int) -> dict:
    chunk = delta_chunk(chunk_id, {"role": "assistant", "content": None})
    chunk["prompt_progress"] = {
        "total": total,
        "cache": cache,
        "processed": processed,
        "time_ms": 0,
    }
    return chunk


def usage_chunk(chunk_id: str, cache_n: int, prompt_n: int, predicted_n: int) -> dict:
    timings = {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": 1.0,
        "prompt_per_token_ms": 1.0,
        "prompt_per_second": 1.0,
        "predicted_n": predicted_n,
        "predicted_ms": 1.0,
        "predicted_per_token_ms": 1.0,
        "predicted_per_second": 1.0,
    }
    usage = {
        "completion_tokens": predicted_n,
        "prompt_tokens": cache_n + prompt_n,
        "total_tokens": cache_n + prompt_n + predicted_n,
        "prompt_tokens_details": {"cached_tokens": cache_n},
    }
    return _chunk(chunk_id, {"choices": [], "usage": usage, "timings": timings})


def sse(value: dict[str, Any] | str) -> bytes:
    data = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def completion(
    *,
    content: str = "",
    reasoning: str = "",
    tool_calls: tuple[tuple[str, str, str], ...] = (),
    cache_n: int = 3,
    prompt_n: int = 10,
    chunk_id: str = "chatcmpl-fake",
) -> list[Any]:
    """The steps of a whole streamed completion, in the real server's order: two progress
    chunks, a role-only chunk, one chunk per word (or per 7 argument characters), the finish
    chunk, the usage chunk and [DONE]."""
    total = cache_n + prompt_n
    steps: list[Any] = [
        sse(progress_chunk(chunk_id, total, cache_n, cache_n)),
        sse(progress_chunk(chunk_id, total, cache_n, total)),
        sse(delta_chunk(chunk_id, {"role": "assistant", "content": None})),
    ]
    predicted = 0
    for word in _pieces(reasoning):
        steps.append(sse(delta_chunk(chunk_id, {"reasoning_content": word})))
        predicted += 1
    for word in _pieces(content):
        steps.append(sse(delta_chunk(chunk_id, {"content": word})))
        predicted += 1
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        fragments = [arguments[i : i + 7] for i in range(0, len(arguments), 7)] or [""]
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": fragments[0]},
        }
        steps.append(sse(delta_chunk(chunk_id, {"tool_calls": [first]})))
        for fragment in fragments[1:]:
            more = {"index": index, "function": {"arguments": fragment}}
            steps.append(sse(delta_chunk(chunk_id, {"tool_calls": [more]})))
        predicted += len(fragments)
    finish = "tool_calls" if tool_calls else "stop"
    steps.append(sse(delta_chunk(chunk_id, {}, finish)))
    steps.append(sse(usage_chunk(chunk_id, cache_n, prompt_n, predicted)))
    steps.append(sse("[DONE]"))
    return steps


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)] if text else []


def error_body(message: str, error_type: str, code: int = 400, **extra: Any) -> bytes:
    return json.dumps(
        {"error": {"code": code, "message": message, "type": error_type, **extra}}
    ).encode()


@dataclass
class Reply:
    status: int = 200
    steps: list[Any] = field(default_factory=list)
    stall_before_head: bool = False
    content_type: str = "text/event-stream"

    @classmethod
    def stream(cls, steps: list[Any]) -> Reply:
        return cls(steps=steps)

    @classmethod
    def error(cls, status: int, body: bytes) -> Reply:
        return cls(status=status, steps=[body], content_type="application/json")


class FakeServer:
    def __init__(
        self, replies: list[Reply], *, slots: list[dict] | None = None, props: dict | None = None
    ):
        self.replies = list(replies)
        self.chat_bodies: list[dict[str, Any]] = []
        self.control_bodies: list[dict[str, Any]] = []
        self.slots = slots if slots is not None else [{"id": 0, "is_processing": False}]
        self.props = props or {}
        self.control_answer: dict[str, Any] = {"success": True}
        self.control_status = 200
        self.routes: dict[str, Any] = {}  # more JSON endpoints: path -> answer
        self.route_bodies: list[tuple[str, Any]] = []
        self.in_flight = 0  # chat responses not yet closed by the client
        self.most_in_flight = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/chat/completions/control":
            self.control_bodies.append(json.loads(request.content))
            return httpx.Response(self.control_status, json=self.control_answer)
        if path == "/slots":
            return httpx.Response(200, json=self.slots)
        if path == "/props":
            return httpx.Response(200, json=self.props)
        if path in self.routes:
            self.route_bodies.append((path, json.loads(request.content or b"null")))
            return httpx.Response(200, json=self.routes[path])
        if path != "/v1/chat/completions":
            return httpx.Response(404, content=error_body("File Not Found", "not_found_error", 404))
        self.chat_bodies.append(json.loads(request.content))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if not self.replies:
            raise AssertionError("the fake server got more chat requests than its script has")
        reply = self.replies.pop(0)
        if reply.stall_before_head:
            await asyncio.Event().wait()
        return httpx.Response(
            reply.status,
            headers={"content-type": reply.content_type},
            stream=_Body(reply.steps, self),
        )


class _Body(httpx.AsyncByteStream):
    def __init__(self, steps: list[Any], server: FakeServer):
        self._steps = steps
        self._server = server

    async def aclose(self) -> None:
        self._server.in_flight -= 1

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for step in self._steps:
            if step is STALL:
                await asyncio.Event().wait()
            elif isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, WaitFor):
                await step.event.wait()
            elif step is CUT:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            else:
                yield step
