"""What the peers benchmark reads from the requests it recorded (pure: no I/O, no clock).

    extends(previous, current)     does ``current`` strictly extend ``previous``?
    changes(previous, current)     if not, what changed, in short phrases
    session_rereads(requests)      per request, tokens of its session's previous prompt not cached
    host_seconds(cache_n, prompt_n)  the prompt processing projected onto the owner's host
    timings_of(content_type, body)   llama-server's ``timings`` from a recorded answer

A request strictly extends the previous request of its session when everything that shapes the
prompt (``tools``, ``chat_template_kwargs``) is unchanged and its messages are
the previous ones, unchanged, followed by at least one more. Only then can the server's slot
serve the whole previous prompt from its cache. Sampling settings (``max_tokens``,
``temperature``...) shape no prompt token and are not compared, nor is ``tool_choice``: it
constrains the answer's grammar, and a request that changes only it was served from the cache
(bench:cache, whose tool turns send ``required`` then ``none`` and re-read nothing).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cache_bench import rereads

# Fields of a chat completion request that change the prompt the template renders.
PROMPT_FIELDS = ("tools", "chat_template_kwargs")
EXCERPT = 24  # characters shown on each side of a change

# The owner's host (design brief, seed 002): prompt processing at 1,170 tokens/s at depth 0 and
# 669 tokens/s at a depth of 32k tokens. Between, the rate falls linearly with depth; beyond 32k
# it is taken as 669 (the brief gives no lower figure, so a projection there is a lower bound).
HOST_RATE_AT_0 = 1170.0
HOST_RATE_AT_32K = 669.0
HOST_DEPTH_32K = 32768


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return messages if isinstance(messages, list) else []


def extends(previous: dict[str, Any], current: dict[str, Any]) -> bool:
    """True when ``current`` is ``previous``'s prompt plus more messages, nothing else changed."""
    if any(_canonical(previous.get(f)) != _canonical(current.get(f)) for f in PROMPT_FIELDS):
        return False
    before, after = _messages(previous), _messages(current)
    return len(after) > len(before) and all(
        _canonical(a) == _canonical(b) for a, b in zip(before, after, strict=False)
    )


def _tool_names(body: dict[str, Any]) -> dict[str, str]:
    """Each tool's name with its canonical schema."""
    tools = body.get("tools")
    named = {}
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function", {}) if isinstance(tool, dict) else {}
        named[str(function.get("name", "?"))] = _canonical(tool)
    return named


def _text(message: Any) -> str:
    """A message's content as text (a content array as its JSON)."""
    if not isinstance(message, dict):
        return _canonical(message)
    content = message.get("content")
    text = content if isinstance(content, str) else _canonical(content)
    calls = message.get("tool_calls")
    return text + (" " + _canonical(calls) if calls else "")


def first_difference(before: str, after: str) -> str:
    """Where two texts first differ, as ``at char N: 'old' -> 'new'`` (excerpts from there)."""
    at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
              min(len(before), len(after)))
    start = max(0, at - 8)
    return (f"at char {at}: {before[start:at + EXCERPT]!r} -> {after[start:at + EXCERPT]!r}")


def _tools_change(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    if _canonical(previous.get("tools")) == _canonical(current.get("tools")):
        return []
    before, after = _tool_names(previous), _tool_names(current)
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    altered = sorted(n for n in set(before) & set(after) if before[n] != after[n])
    parts = [f"+{n}" for n in added] + [f"-{n}" for n in removed] + [f"~{n}" for n in altered]
    if not parts:
        parts = ["same tools, another order"]
    return [f"tools {len(before)} -> {len(after)} ({', '.join(parts)})"]


def changes(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Why ``current`` does not strictly extend ``previous``, in short phrases; empty if it does."""
    if extends(previous, current):
        return []
    found = _tools_change(previous, current)
    for field in PROMPT_FIELDS[1:]:  # "tools" said above
        if _canonical(previous.get(field)) != _canonical(current.get(field)):
            found.append(f"{field} {_canonical(previous.get(field))} -> "
                         f"{_canonical(current.get(field))}")
    before, after = _messages(previous), _messages(current)
    differing = next((i for i, (a, b) in enumerate(zip(before, after, strict=False))
                      if _canonical(a) != _canonical(b)), None)
    if differing is not None:
        a, b = before[differing], after[differing]
        role = b.get("role", "?") if isinstance(b, dict) else "?"
        later = sum(1 for x, y in zip(before[differing + 1:], after[differing + 1:], strict=False)
                    if _canonical(x) != _canonical(y))
        found.append(f"message {differing} ({role}) changed {first_difference(_text(a), _text(b))}"
                     + (f", and {later} later messages" if later else ""))
    if len(after) <= len(before):
        found.append(f"messages {len(before)} -> {len(after)}")
    return found


@dataclass(frozen=True)
class Request:
    """One recorded completion: its session, body and the server's prompt counts."""

    session: str
    body: dict[str, Any]
    cache_n: int
    prompt_n: int


@dataclass(frozen=True)
class Verdict:
    """One request compared with the previous request of its session (None for the first)."""

    extends: bool | None
    changes: tuple[str, ...]
    reread: int  # tokens of the previous request's prompt the cache did not cover


def verdicts(requests: Sequence[Request]) -> list[Verdict]:
    """Each request against the previous one of the same session, in order."""
    reread = session_rereads(requests)
    previous: dict[str, Request] = {}
    result = []
    for request, tokens in zip(requests, reread, strict=True):
        before = previous.get(request.session)
        if before is None:
            result.append(Verdict(extends=None, changes=(), reread=tokens))
        else:
            result.append(Verdict(extends=extends(before.body, request.body),
                                  changes=tuple(changes(before.body, request.body)),
                                  reread=tokens))
        previous[request.session] = request
    return result


def session_rereads(requests: Iterable[Request]) -> list[int]:
    """Per request: of the previous request of its session, the prompt tokens (cached plus
    processed) that this request's cache did not cover; 0 for a session's first request."""
    listed = list(requests)
    by_session: dict[str, list[int]] = {}
    for index, request in enumerate(listed):
        by_session.setdefault(request.session, []).append(index)
    result = [0] * len(listed)
    for indexes in by_session.values():
        counts = [(listed[i].cache_n, listed[i].prompt_n) for i in indexes]
        for i, tokens in zip(indexes, rereads(counts), strict=True):
            result[i] = tokens
    return result


def host_rate(depth: float) -> float:
    """Tokens per second on the owner's host at a given depth (tokens already in the slot)."""
    share = min(max(depth, 0.0), HOST_DEPTH_32K) / HOST_DEPTH_32K
    return HOST_RATE_AT_0 - share * (HOST_RATE_AT_0 - HOST_RATE_AT_32K)


def host_seconds(cache_n: int, prompt_n: int) -> float:
    """Seconds the owner's host takes to process ``prompt_n`` tokens after ``cache_n`` cached
    ones: at the rate of the middle of that span."""
    return prompt_n / host_rate(cache_n + prompt_n / 2) if prompt_n else 0.0


def timings_of(content_type: str, body: bytes) -> dict[str, Any] | None:
    """The ``timings`` object of llama-server's answer: of the JSON body, or of the last
    ``data:`` event of a stream that has one. None when the answer has none."""
    if "text/event-stream" in content_type:
        found = None
        for line in body.decode("utf-8", "replace").splitlines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("timings"), dict):
                found = event["timings"]
        return found
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    timings = answer.get("timings") if isinstance(answer, dict) else None
    return timings if isinstance(timings, dict) else None
