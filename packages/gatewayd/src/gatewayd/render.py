"""What the owner sees while a turn runs: pure functions over loop.sock events.

The placeholder is edited as content streams, at most once per ``interval`` (Mattermost rate
limits edits like any request); tool calls and waiting/progress show as one short status line,
which for a tool call brokerd says is still running counts the time (``still running (2 min 5 s)``).
The final answer replaces the placeholder; an answer over the server's 16,383 runes is split into
several posts, at a paragraph or line break where there is one.
"""

from __future__ import annotations

from bxcore.display import describe_call
from bxcore.protocol.loop import (
    CacheLossEvent,
    Content,
    Progress,
    Queued,
    Reasoning,
    Retrying,
    ThinkingCapped,
    ToolCallStarted,
    ToolResultEvent,
    ToolWaitingEvent,
    TurnEventBody,
    Waiting,
)
from bxcore.util import format_elapsed

from .models import MAX_POST_RUNES

PLACEHOLDER = "…"
NO_ANSWER = "_(no answer)_"
_STATUS_ROOM = 200  # runes kept free for the status line while streaming


class TurnView:
    """The running state of one turn as the placeholder shows it."""

    def __init__(self) -> None:
        self.content = ""
        self.status = ""
        self.tools: list[str] = []

    def apply(self, event: TurnEventBody) -> None:
        if isinstance(event, Content):
            self.content += event.text
            self.status = ""
        elif isinstance(event, Reasoning):
            self.status = "thinking…"
        elif isinstance(event, ToolCallStarted):
            self.tools.append(event.name)
            self.status = f"⚙ running `{event.name}`"
        elif isinstance(event, ToolResultEvent):
            self.status = f"⚙ `{event.name}` done"
        elif isinstance(event, ToolWaitingEvent):
            name = self.tools[-1] if self.tools else "the tool"
            self.status = (f"⚙ `{name}` still running ({format_elapsed(event.elapsed)})"
                           if event.reason == "running" else f"⚙ `{name}` waits for approval")
        elif isinstance(event, Queued):
            self.status = f"queued ({event.ahead} ahead)"
        elif isinstance(event, Waiting):
            self.status = "waiting for the model" + (" (slot busy)" if event.slot_busy else "")
        elif isinstance(event, Progress):
            share = 100 * event.processed // event.total if event.total else 100
            self.status = f"reading the conversation ({share}%)"
        elif isinstance(event, Retrying):
            self.status = f"retrying (attempt {event.attempt})"
        elif isinstance(event, ThinkingCapped):
            self.status = "thinking was cut short"
        elif isinstance(event, CacheLossEvent):
            self.status = "re-reading the conversation"

    def text(self) -> str:
        """The placeholder's text now: the content so far (its tail if long) and the status."""
        room = MAX_POST_RUNES - _STATUS_ROOM
        body = self.content if len(self.content) <= room else "…" + self.content[-(room - 1):]
        tools = " ".join(f"`{name}`" for name in self.tools[-5:])
        lines = [body] if body else []
        if tools:
            lines.append(f"_⚙ {tools}_")
        if self.status:
            lines.append(f"_{self.status}_")
        return "\n\n".join(lines) or PLACEHOLDER


class Throttle:
    """At most one edit per ``interval`` seconds; ``now`` comes from the caller's clock."""

    def __init__(self, interval: float):
        self.interval = interval
        self._last: float | None = None

    def due(self, now: float) -> bool:
        if self._last is not None and now - self._last < self.interval:
            return False
        self._last = now
        return True


def split_message(text: str, limit: int = MAX_POST_RUNES) -> list[str]:
    """Cut ``text`` into posts of at most ``limit`` runes (code points, as the server counts),
    after a paragraph break, else a line break, else a space, in the second half of the window.
    Nothing is dropped: the parts joined are the text (no parts for an empty text)."""
    parts = []
    while len(text) > limit:
        window = text[:limit]
        cut = limit
        for separator in ("\n\n", "\n", " "):
            found = window.rfind(separator, limit // 2)
            if found > 0:
                cut = found + len(separator)
                break
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    return [part for part in parts if part]


def approval_text(
    approval_id: str, tool: str, arguments: str, grant: str, expires: str
) -> str:
    """The approval post: what will run as bxcore.display shows it (the deciding fields first,
    wrapped, hidden characters made visible), in a fence no argument can close, and how to
    answer."""
    shown = describe_call(tool, arguments)
    fence = "```"
    while fence in shown:
        fence += "`"
    return (
        f"**Approval needed** (grant `{grant}`, expires {expires})\n\n"
        f"{fence}text\n{shown}\n{fence}\n\n"
        f"Reply in this thread with `!approve {approval_id}` or `!deny {approval_id}`."
    )
