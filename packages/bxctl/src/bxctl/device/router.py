"""The router ``bxctl verify-device`` measures: reached at the config's ``[inferproxy] upstream``
(the router's own TCP or Unix socket, as inferproxy reaches it), asking for the config's model.

``Stream`` turns a streamed chat completion's SSE lines into what the measurements need (pure:
lines in, fields out); ``Router`` is the thin HTTP shell.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

# The pool drops idle connections before llama-server's 5 s keep-alive does, as loopd's client:
# with equal limits a request can go out on a connection the server is closing.
KEEPALIVE_EXPIRY = 2.0


class DeviceError(Exception):
    """The router did not answer as a measurement needs; the message names the request."""


@dataclass(frozen=True, kw_only=True)
class Timings:
    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float

    @property
    def prompt_per_second(self) -> float:
        return self.prompt_n / self.prompt_ms * 1000 if self.prompt_ms else 0.0

    @property
    def predicted_per_second(self) -> float:
        return self.predicted_n / self.predicted_ms * 1000 if self.predicted_ms else 0.0


def timings_of(answer: Any, what: str) -> Timings:
    timings = answer.get("timings") if isinstance(answer, dict) else None
    try:
        assert isinstance(timings, dict)
        return Timings(cache_n=int(timings["cache_n"]), prompt_n=int(timings["prompt_n"]),
                       prompt_ms=float(timings["prompt_ms"]),
                       predicted_n=int(timings["predicted_n"]),
                       predicted_ms=float(timings["predicted_ms"]))
    except (AssertionError, KeyError, TypeError, ValueError):
        raise DeviceError(f"{what}: the answer has no timings: {str(answer)[:200]}") from None


@dataclass
class Stream:
    """A streamed chat completion, fed one SSE line at a time (pure)."""

    id: str | None = None
    content: str = ""
    reasoning: list[str] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    timings: Timings | None = None
    error: str | None = None

    def feed(self, line: str) -> str | None:
        """One line; returns what it carried: "reasoning", "content", "tool_call", "progress",
        "other", or None for a line that is no data event (a comment, a blank line)."""
        if not line.startswith("data: ") or line == "data: [DONE]":
            return None
        event = json.loads(line[len("data: "):])
        if "error" in event:
            self.error = str(event["error"])[:300]
            return "other"
        self.id = event.get("id", self.id)
        if "timings" in event:
            self.timings = timings_of(event, "the stream")
        if "prompt_progress" in event:
            return "progress"
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                self.reasoning.append(delta["reasoning_content"])
                return "reasoning"
            if delta.get("content"):
                self.contents.append(delta["content"])
                self.content += delta["content"]
                return "content"
            for part in delta.get("tool_calls") or ():
                call = self.calls.setdefault(part.get("index", 0),
                                             {"id": "", "name": "", "arguments": ""})
                call["id"] = part.get("id") or call["id"]
                function = part.get("function") or {}
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
                return "tool_call"
        return "other"

    def message(self) -> dict[str, Any]:
        """The assistant message as the server returned it, to send back unchanged."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())]
        return message


class Router:
    def __init__(self, upstream: str, model: str):
        self.model = model
        limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY)
        if upstream.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=upstream[len("unix:"):], limits=limits)
            base = "http://llama"
        else:
            transport = httpx.HTTPTransport(limits=limits)
            base = "http://" + upstream[len("tcp://"):]
        self.where = upstream
        self._http = httpx.Client(transport=transport, base_url=base, timeout=None)

    def close(self) -> None:
        self._http.close()

    def get(self, path: str) -> Any:
        return self._answer("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._answer("POST", path, {"model": self.model, **body})

    def _answer(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        params = {"model": self.model} if method == "GET" else None
        for attempt in (1, 2):
            try:
                response = self._http.request(method, path, json=body, params=params)
                break
            except httpx.RemoteProtocolError as exc:  # closed before answering: once more
                if attempt == 2:
                    raise DeviceError(f"{method} {path} at {self.where}: {exc}") from None
            except httpx.HTTPError as exc:
                raise DeviceError(f"{method} {path} at {self.where}: {exc}") from None
        if response.status_code != 200:
            raise DeviceError(f"{method} {path}: HTTP {response.status_code}: "
                              f"{response.text[:300]}")
        try:
            return response.json()
        except ValueError:
            raise DeviceError(f"{method} {path}: not JSON: {response.text[:200]}") from None

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[tuple[float, str | None]]:
        """POST a streamed request; yields (seconds since it was sent, line), first
        (seconds, None) when the response's head arrived."""
        for attempt in (1, 2):
            start = time.perf_counter()
            head = False
            try:
                with self._http.stream("POST", path,
                                       json={"model": self.model, **body}) as response:
                    if response.status_code != 200:
                        response.read()
                        raise DeviceError(f"POST {path}: HTTP {response.status_code}: "
                                          f"{response.text[:300]}")
                    head = True
                    yield time.perf_counter() - start, None
                    for line in response.iter_lines():
                        yield time.perf_counter() - start, line
                return
            except httpx.RemoteProtocolError as exc:  # closed before answering: once more
                if head or attempt == 2:
                    raise DeviceError(f"POST {path} at {self.where}: {exc}") from None
            except httpx.HTTPError as exc:
                raise DeviceError(f"POST {path} at {self.where}: {exc}") from None
