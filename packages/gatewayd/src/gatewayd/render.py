"""What the owner sees while a turn runs: pure functions over loop.sock events.

The placeholder is edited as content streams, at most once per ``interval`` (Mattermost rate
limits edits like any request); tool calls and waiting/progress show as one short status line,
which for a tool call brokerd says is still running counts the time (``still running (2 min 5 s)``).
The final answer replaces the placeholder; an answer over the server's 16,383 runes is split into
several posts, at a paragraph or line break where there is one.

Model text is made inert (inert.py: no link, image, autolink or HTML) in every post that carries
it, unless it is a final answer whose session's taint loopd says is public and trusted and the
owner has not asked for all answers to be inert (``[gateway] inert_output``): the streamed
placeholder always (loopd says the taint only with the answer), an approval's arguments always
(fenced in every part), errors always.
"""

from __future__ import annotations

import re

from bxcore.display import describe_call, format_elapsed
from bxcore.protocol.loop import (
    AnswerTaint,
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
from bxcore.tools import DataClass

from .inert import code_blocks, inert_posts, split_message
from .models import MAX_POST_RUNES

PLACEHOLDER = "…"
CUT_MARK = "…\n\n"  # before the placeholder's content when its start is not shown
NO_ANSWER = "_(no answer)_"
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.:\-]")


def answer_is_inert(taint: AnswerTaint | None, *, floor: DataClass, always: bool) -> bool:
    """Whether an answer is shown inert: always when the owner says so or loopd did not say the
    session's taint; else when that taint, or ``floor`` (``[memory] identity_ceiling``, which
    every session's prompt carries), is above public, or anything it saw was untrusted."""
    if always or taint is None:
        return True
    highest = max(floor, taint.highest) if taint.highest is not None else floor
    return taint.untrusted or highest > DataClass.PUBLIC


def answer_posts(content: str, *, inert: bool) -> list[str]:
    """The answer's posts: inert, or its Markdown as written, each within the server's limit."""
    parts = inert_posts(content) if inert else split_message(content)
    return parts or [NO_ANSWER]


def tool_label(name: str) -> str:
    """A tool name as an inline code span nothing in it can end: only name characters."""
    return f"`{_NOT_IN_A_NAME.sub('?', name[:64])}`"


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
            self.status = f"⚙ running {tool_label(event.name)}"
        elif isinstance(event, ToolResultEvent):
            self.status = f"⚙ {tool_label(event.name)} done"
        elif isinstance(event, ToolWaitingEvent):
            name = tool_label(self.tools[-1]) if self.tools else "the tool"
            self.status = (f"⚙ {name} still running ({format_elapsed(event.elapsed)})"
                           if event.reason == "running" else f"⚙ {name} waits for approval")
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
        """The placeholder's text now: the content so far, inert (its last post's worth if long:
        the tail is cut from the model's text, then made inert, so no fence is cut open), and
        the status."""
        tools = " ".join(tool_label(name) for name in self.tools[-5:])
        lines = [f"_⚙ {tools}_"] if tools else []
        if self.status:
            lines.append(f"_{self.status}_")
        room = MAX_POST_RUNES - sum(len(line) + 2 for line in lines) - len(CUT_MARK)
        parts = inert_posts(self.content[-room:], room)
        if parts:
            # The mark is a paragraph of its own: prefixed to a fence line it would unmake the
            # fence and set the code free as Markdown (the fourth attack on issue 31).
            cut = len(parts) > 1 or len(self.content) > room
            lines.insert(0, (CUT_MARK if cut else "") + parts[-1])
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


def approval_posts(
    approval_id: str, tool: str, arguments: str, grant: str, expires: str,
    limit: int = MAX_POST_RUNES,
) -> list[str]:
    """The approval's posts: what will run as bxcore.display shows it (the deciding fields
    first, wrapped, hidden characters made visible), in code blocks no argument can close, one
    or more to a post, every part fenced; the header first, how to answer last."""
    header = f"**Approval needed** (grant {tool_label(grant)}, expires {expires})"
    footer = f"Reply in this thread with `!approve {approval_id}` or `!deny {approval_id}`."
    room = limit - len(header) - len(footer) - 4
    blocks = code_blocks(describe_call(tool, arguments).split("\n"), "text", room)
    posts = [f"{header}\n\n{block}" if number == 0 else block
             for number, block in enumerate(blocks)]
    posts[-1] += f"\n\n{footer}"
    return posts
