"""The M0 measurements made of chat completions, streamed as loopd streams them: tool-call
parsing over many trials, cache reuse over a multi-turn tool conversation, what a request
queued behind another on its slot receives before its first event, and whether the control
endpoint ends a reasoning block.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .measure import Filler
from .router import DeviceError, Router, Stream
from .verdicts import ReasoningProbe

READ_FILE = {"type": "function", "function": {
    "name": "read_file", "description": "Read a text file and return its contents.",
    "parameters": {"type": "object", "required": ["path"],
                   "properties": {"path": {"type": "string", "description": "Path of the file"}}}}}
SYSTEM = "You are a file assistant. Answer with a tool call when a file is needed."
TOPICS = ("garden", "bicycle", "kitchen", "invoices", "backups", "travel", "books", "roof",
          "music", "phone", "garage", "printer", "bees", "boat", "firewood", "camera")


@dataclass(frozen=True, kw_only=True)
class Chat:
    router: Router
    slot: int
    sampling: dict[str, Any]

    def __call__(self, messages: Sequence[dict[str, Any]], *, max_tokens: int,
                 tool_choice: str = "none", **extra: Any) -> Stream:
        stream = Stream()
        for _, line in self.router.stream("/v1/chat/completions", self.body(
                messages, max_tokens=max_tokens, tool_choice=tool_choice, **extra)):
            if line:
                stream.feed(line)
        if stream.error is not None:
            raise DeviceError(f"the completion failed: {stream.error}")
        return stream

    def body(self, messages: Sequence[dict[str, Any]], *, max_tokens: int, tool_choice: str,
             **extra: Any) -> dict[str, Any]:
        return {"messages": list(messages), "tools": [READ_FILE], "tool_choice": tool_choice,
                "stream": True, "return_progress": True, "id_slot": self.slot,
                "cache_prompt": True, "max_tokens": max_tokens,
                "stream_options": {"include_usage": True}, **self.sampling, **extra}


def call_problem(stream: Stream) -> str | None:
    """None if the completion carries a parsed read_file call with a JSON object as arguments."""
    if not stream.calls:
        return f"no tool call parsed (content {stream.content[:80]!r})"
    call = stream.calls[min(stream.calls)]
    if call["name"] != "read_file":
        return f"the call names {call['name']!r}"
    try:
        arguments = json.loads(call["arguments"])
    except ValueError:
        return f"the arguments are not JSON: {call['arguments'][:80]!r}"
    return None if isinstance(arguments, dict) else "the arguments are not a JSON object"


def tool_trials(chat: Chat, trials: int) -> list[str | None]:
    """``trials`` requests that must call read_file, each for another file."""
    problems = []
    for n in range(trials):
        path = f"notes/{TOPICS[n % len(TOPICS)]}-{n + 1}.md"
        asked = [{"role": "system", "content": SYSTEM},
                 {"role": "user", "content": f"Read the file {path}."}]
        problems.append(call_problem(chat(asked, max_tokens=96, tool_choice="required")))
    return problems


def cache_conversation(chat: Chat, turns: int) -> list[tuple[int, int]]:
    """A conversation of ``turns`` tool turns (the call, its result, the answer), each request
    the one before plus what came back; (cache_n, prompt_n) of every request."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"[run {secrets.token_hex(6)}] {SYSTEM}"}]
    seen = []
    for n in range(turns):
        topic = TOPICS[n % len(TOPICS)]
        messages.append({"role": "user", "content": f"Read notes/{topic}.md, then tell me in "
                                                    f"one sentence what it says."})
        for choice in ("required", "none"):
            stream = chat(messages, max_tokens=64 if choice == "required" else 32,
                          tool_choice=choice)
            if stream.timings is None:
                raise DeviceError("a completion of the conversation came without timings")
            seen.append((stream.timings.cache_n, stream.timings.prompt_n))
            message = stream.message()
            messages.append(message)
            for call in message.get("tool_calls", ()):
                lines = [f"- item {j}: the {topic} needs attention {j} times a month"
                         for j in range(1, 9)]
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": f"# {topic}\n" + "\n".join(lines)})
    return seen


@dataclass(frozen=True, kw_only=True)
class Queued:
    head_s: float  # the response's head arrived
    lines_before: list[str]  # what came before the first data event (comments, blank lines)
    first_event_s: float
    first_event: str  # its kind: progress, content, ...
    ahead_done_s: float  # the request ahead of it on the slot ended


def queued(router: Router, chat: Chat, filler: Filler, ahead_tokens: int) -> Queued:
    """A streamed chat request sent while the slot runs another request (``ahead_tokens``
    generated): what its stream carries until its first event."""
    started = threading.Event()
    ended: list[float] = []
    errors: list[Exception] = []
    prompt = filler.tokens(16)

    def ahead() -> None:
        try:
            for _, line in router.stream("/completion", {
                    "prompt": prompt, "n_predict": ahead_tokens, "id_slot": chat.slot,
                    "ignore_eos": True, "stream": True}):
                if line and line.startswith("data: "):
                    started.set()
        except DeviceError as exc:
            errors.append(exc)
        finally:
            ended.append(time.perf_counter())
            started.set()

    runner = threading.Thread(target=ahead, daemon=True)
    runner.start()
    started.wait()
    sent = time.perf_counter()
    head_s, before = 0.0, []
    stream = Stream()
    body = chat.body([{"role": "user", "content": f"Say one word. {secrets.token_hex(4)}"}],
                     max_tokens=4, tool_choice="none")
    for at, line in router.stream("/v1/chat/completions", body):
        if line is None:
            head_s = at
            continue
        kind = stream.feed(line)
        if kind is None:
            before.append(line)
            continue
        first_s, first = at, kind
        break
    else:
        raise DeviceError("the queued request's stream ended without an event")
    runner.join()
    if errors:
        raise errors[0]
    return Queued(head_s=head_s, lines_before=before, first_event_s=first_s, first_event=first,
                  ahead_done_s=ended[0] - sent)


def reasoning(router: Router, chat: Chat, max_tokens: int) -> ReasoningProbe:
    """A streamed request with reasoning control on; at its first reasoning delta, the control
    call ``reasoning_end``; what the stream carries after the call was answered."""
    stream = Stream()
    control: str | None = None
    before = after = content = 0
    body = chat.body([{"role": "user", "content": "Think it through step by step: why is the "
                       "sky blue?"}], max_tokens=max_tokens, tool_choice="none",
                     reasoning_control=True)
    for _, line in router.stream("/v1/chat/completions", body):
        kind = stream.feed(line) if line else None
        if kind == "reasoning" and control is None:
            before += 1
            control = _end_reasoning(router, stream.id)
        elif kind == "reasoning":
            after += 1
        elif kind == "content" and control is not None:
            content += 1
    return ReasoningProbe(reasoning_before=before, control=control, reasoning_after=after,
                          content_after=content)


def _end_reasoning(router: Router, completion: str | None) -> str:
    try:
        answer = router.post("/v1/chat/completions/control",
                             {"id": completion, "action": "reasoning_end"})
    except DeviceError as exc:
        return str(exc)
    if isinstance(answer, dict) and answer.get("success") is True:
        return "success"
    return str(answer)[:200]

