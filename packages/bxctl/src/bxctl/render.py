"""How ``bxctl chat`` shows a turn: content as it streams, reasoning dimmed, one line per tool
call, one status line per waiting/retrying/thinking_capped/cache_loss/approval, and prompt
processing as a live bar on a terminal (plain lines otherwise). A tool call that is still running
updates the live line on a terminal (``running shell.run… 45 s``) and gets a short line per
notice otherwise.

Everything an event carries (content, reasoning, tool names, errors, approval ids) came from the
model or a tool, and a terminal acts on escape sequences (OSC 8 links, OSC 52 clipboard writes,
CSI cursor moves): it is shown through ``terminal_text``, every control and invisible character
written as ``⟨U+001B⟩`` the way approvals are shown, newlines and tabs kept. The renderer's own
escapes (dim, clear line) are the only ones it writes.

The renderer only writes to the streams it is given, so tests feed it events and read the text.
"""

from __future__ import annotations

from typing import TextIO

from bxcore.display import format_elapsed
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
from bxcore.visible import visible

DIM, RESET, CLEAR_LINE = "\x1b[2m", "\x1b[0m", "\r\x1b[K"
BAR_WIDTH = 30


def terminal_text(text: str) -> str:
    """``text`` with nothing a terminal acts on: every control character but newline and tab,
    and every invisible one, written as ``⟨U+XXXX⟩`` (bxcore.visible)."""
    return visible(text)[0]


def progress_bar(progress: Progress, width: int = BAR_WIDTH) -> str:
    """``[====####......] processed/total (cached N)``: ``=`` is what the cache held, ``#``
    what the server has processed since, ``.`` what is left."""
    total = max(progress.total, 1)
    cached = min(width, progress.cache * width // total)
    done = min(width, max(cached, progress.processed * width // total))
    bar = "=" * cached + "#" * (done - cached) + "." * (width - done)
    return f"[{bar}] {progress.processed}/{progress.total} (cached {progress.cache})"


def status_line(event: TurnEventBody) -> str | None:
    """The one status line an event gets, or None for events shown otherwise."""
    match event:
        case Queued():
            return f"queued: {event.ahead} ahead"
        case Waiting():
            why = "the slot is busy with another client" if event.slot_busy else (
                "the server is busy or loading the model")
            return f"waiting: {why}"
        case Retrying():
            return f"retrying (attempt {event.attempt}, in {event.after_ms} ms): {event.error}"
        case ThinkingCapped():
            return f"thinking capped at {event.tokens} tokens"
        case CacheLossEvent():
            return (f"cache lost: {event.got} of {event.expected} tokens reused; "
                    "the prompt is read again")
        case ToolWaitingEvent(reason="running"):
            return f"still running ({format_elapsed(event.elapsed)})"
        case ToolWaitingEvent():
            return f"waiting for approval {event.approval} (expires {event.expires})"
        case ToolResultEvent():
            notes = [event.data_class.value] + (["truncated"] if event.truncated else [])
            return f"tool {event.name} ({', '.join(notes)})"
        case _:
            return None


class Renderer:
    """Shows one session's turns. ``text`` gets content; ``status`` everything else."""

    def __init__(self, *, text: TextIO, status: TextIO, tty: bool, show_content: bool = True):
        self._text = text
        self._status = status
        self._tty = tty
        self._show_content = show_content
        self._bar_shown = False
        self._mid_line: TextIO | None = None  # a stream whose last write did not end a line
        self._tool = "the tool"  # the call running now (loopd runs one at a time)

    def event(self, event: TurnEventBody) -> None:
        match event:
            case Progress():
                self._progress(event)
            case Content():
                if self._show_content and event.text:
                    self._write(self._text, terminal_text(event.text), partial=True)
            case Reasoning():
                shown = terminal_text(event.text)
                text = f"{DIM}{shown}{RESET}" if self._tty else shown
                self._write(self._status, text, partial=True)
            case ToolCallStarted():
                self._tool = terminal_text(event.name)
                if self._tty:
                    self._bar(f"running {self._tool}…")
            case ToolWaitingEvent(reason="running"):
                if self._tty:
                    self._bar(f"running {self._tool}… {format_elapsed(event.elapsed)}")
                else:
                    self._write(self._status, f"{self._tool} {status_line(event)}\n",
                                partial=False)
            case _:
                line = status_line(event)
                if line is not None:
                    self._write(self._status, terminal_text(line) + "\n", partial=False)

    def end_turn(self) -> None:
        """Close the turn's last line."""
        self._clear_bar()
        if self._mid_line is not None:
            self._mid_line.write("\n")
            self._mid_line.flush()
            self._mid_line = None

    def _progress(self, event: Progress) -> None:
        if self._tty:
            self._bar(progress_bar(event))
        else:
            self._write(self._status, f"prompt: {event.processed}/{event.total} tokens "
                                      f"(cached {event.cache})\n", partial=False)

    def _bar(self, text: str) -> None:
        if self._mid_line is not None:
            self._mid_line.write("\n")
            self._mid_line = None
        self._status.write(CLEAR_LINE + text)
        self._status.flush()
        self._bar_shown = True

    def _clear_bar(self) -> None:
        if self._bar_shown:
            self._status.write(CLEAR_LINE)
            self._status.flush()
            self._bar_shown = False

    def _write(self, stream: TextIO, text: str, *, partial: bool) -> None:
        self._clear_bar()
        if self._mid_line is not None and self._mid_line is not stream:
            self._mid_line.write("\n")
            self._mid_line.flush()
            self._mid_line = None
        if not partial and self._mid_line is stream:
            stream.write("\n")
        stream.write(text)
        stream.flush()
        self._mid_line = stream if partial and not text.endswith("\n") else None
