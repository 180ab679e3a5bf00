"""A naive agent harness: what popular harnesses do with the prompt, so it can be measured.

Boxmaker's inference contract forbids three habits that are common in agent harnesses. This
harness has them, each switchable, and is otherwise as kind to the cache as it can be:

- **timestamp**: the system prompt ends with the current time, rebuilt every turn ("so the model
  knows the date");
- **memory refresh**: the system prompt ends with the agent's latest memory notes, refreshed
  every turn (a note per turn, the newest few shown);
- **trim**: a tool result older than ``trim_after`` turns is replaced in place by a short stub
  ("to save context").

Kind to the cache, on purpose: the volatile text goes at the END of the system prompt (after
the fixed instructions, so those stay cached), it is rebuilt once per turn, not per request (the
tool-call round trips inside a turn reuse it), and every request pins its own slot
(``id_slot``), so no other client shares it. It talks to llama-server directly (no proxy, no
streaming: one JSON response per completion) and runs tools through the ``run_tool`` it is given.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

ToolRunner = Callable[[str, str], str]  # (tool name, arguments JSON text) -> result text
TRIMMED = "[tool result trimmed to save context: {size} characters]"
MEMORY_SHOWN = 5  # the newest notes shown in the system prompt


@dataclass(frozen=True, kw_only=True)
class Habits:
    timestamp: bool = True
    memory: bool = True
    trim_after: int | None = 3  # turns; None: never trim

    def describe(self) -> str:
        parts = [name for name, on in (("timestamp", self.timestamp), ("memory refresh",
                                                                          self.memory)) if on]
        if self.trim_after is not None:
            parts.append(f"tool results trimmed after {self.trim_after} turns")
        return ", ".join(parts) or "none (append-only)"


@dataclass(frozen=True, kw_only=True)
class CompletionTimings:
    cache_n: int
    prompt_n: int
    predicted_n: int
    prompt_ms: float
    seconds: float  # wall time of the HTTP request

    @property
    def prompt_total(self) -> int:
        return self.cache_n + self.prompt_n


@dataclass(kw_only=True)
class NaiveTurn:
    completions: list[CompletionTimings] = field(default_factory=list)
    seconds: float = 0.0
    answer: str = ""


class NaiveHarnessError(Exception):
    """The server answered something the harness cannot use; the message quotes it."""


class NaiveHarness:
    def __init__(
        self, http: httpx.Client, *, model: str, system: str, tools: Sequence[dict[str, Any]],
        run_tool: ToolRunner, slot: int, sampling: dict[str, Any], max_tokens: int,
        habits: Habits = Habits(), clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self._http = http
        self._model = model
        self._system = system
        self._tools = list(tools)
        self._run_tool = run_tool
        self._slot = slot
        self._sampling = dict(sampling)
        self._max_tokens = max_tokens
        self.habits = habits
        self._clock = clock
        self.history: list[dict[str, Any]] = []
        self._tool_turn: list[int | None] = []  # per history entry: the turn of a tool result
        self.notes: list[str] = []
        self.turns = 0
        self.resent = 0  # completions sent again after the server dropped them unanswered

    def system_prompt(self) -> str:
        parts = [self._system]
        if self.habits.timestamp:
            parts.append(f"Current time: {self._clock().isoformat(timespec='seconds')}")
        if self.habits.memory:
            shown = self.notes[-MEMORY_SHOWN:] or ["(nothing yet)"]
            parts.append("Memory:\n" + "\n".join(f"- {note}" for note in shown))
        return "\n\n".join(parts)

    def _trim(self) -> None:
        """Replace tool results older than ``trim_after`` turns by a stub, in place."""
        if self.habits.trim_after is None:
            return
        for index, turn in enumerate(self._tool_turn):
            if turn is not None and self.turns - turn > self.habits.trim_after:
                message = self.history[index]
                message["content"] = TRIMMED.format(size=len(message["content"]))
                self._tool_turn[index] = None

    def _append(self, message: dict[str, Any], tool_turn: int | None = None) -> None:
        self.history.append(message)
        self._tool_turn.append(tool_turn)

    def turn(self, content: str, tool_choice: Sequence[str] = ()) -> NaiveTurn:
        """One turn: the user's text, then completions and tool calls until an answer. The
        ``tool_choice`` values apply to the turn's completions in order, as in Boxmaker."""
        start = time.perf_counter()
        self.turns += 1
        self._trim()
        system = {"role": "system", "content": self.system_prompt()}
        self._append({"role": "user", "content": content})
        result = NaiveTurn()
        choices = list(tool_choice)
        while True:
            message, timings = self._complete(system, choices.pop(0) if choices else None)
            result.completions.append(timings)
            self._append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                result.answer = message.get("content") or ""
                break
            for call in calls:
                output = self._run_tool(call["function"]["name"], call["function"]["arguments"])
                self._append(
                    {"role": "tool", "tool_call_id": call["id"], "content": output}, self.turns
                )
            if len(result.completions) >= 8:  # the same cap as Boxmaker's tool_iterations
                break
        self.notes.append(f"Turn {self.turns}: the owner said: {content[:60]}")
        result.seconds = time.perf_counter() - start
        return result

    def _complete(
        self, system: dict[str, Any], tool_choice: str | None
    ) -> tuple[dict[str, Any], CompletionTimings]:
        body: dict[str, Any] = {
            "model": self._model, "messages": [system, *self.history], "tools": self._tools,
            "id_slot": self._slot, "cache_prompt": True, "max_tokens": self._max_tokens,
            **self._sampling,
        }
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        start = time.perf_counter()
        try:
            response = self._http.post("/v1/chat/completions", json=body)
        except httpx.RemoteProtocolError:
            # llama-server's router has dropped a long non-streamed completion without an
            # answer (seen at turn 16 of a 20-turn run); harnesses resend, and so does this one.
            self.resent += 1
            response = self._http.post("/v1/chat/completions", json=body)
        seconds = time.perf_counter() - start
        if response.status_code != 200:
            raise NaiveHarnessError(f"HTTP {response.status_code}: {response.text[:500]}")
        data = response.json()
        try:
            reply = data["choices"][0]["message"]
            timings = data["timings"]
        except (KeyError, IndexError) as exc:
            raise NaiveHarnessError(f"no {exc} in {json.dumps(data)[:500]}") from None
        message = {k: v for k, v in reply.items() if v is not None}
        return message, CompletionTimings(
            cache_n=timings["cache_n"], prompt_n=timings["prompt_n"],
            predicted_n=timings["predicted_n"], prompt_ms=timings["prompt_ms"], seconds=seconds,
        )
