"""The turn's vocabulary: the events the core takes and the actions it returns (core.py).

Events are what happened, each the outcome of the action before; actions are what the shell does
next. Both are frozen dataclasses with keyword-only fields; an event that cannot be valid cannot
be built. The table in core.py sees event types, never payloads.
"""

from __future__ import annotations

from dataclasses import dataclass

from bxcore.chat import ToolCall
from bxcore.errors import ErrorCode

from ..inference.api import Completion
from ..inference.errors import InferenceError
from ..readback import ReadBack

# --- events: what happened, each the outcome of the action before --------------------------

class CoreEvent:
    """Base of the events the table knows."""


@dataclass(frozen=True, kw_only=True)
class TurnStarted(CoreEvent):
    """A channel asked for a turn. ``open_calls``: calls the log's last completion left without
    results (a crash or a cancellation cut its round short)."""

    content: str
    open_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, kw_only=True)
class UserRecorded(CoreEvent):
    """The user's message is on disk."""


@dataclass(frozen=True, kw_only=True)
class Answered(CoreEvent):
    """A final completion without tool calls is on disk: the turn has its answer."""

    answer: Completion


@dataclass(frozen=True, kw_only=True)
class CalledTools(CoreEvent):
    """A final completion with tool calls is on disk."""

    calls: tuple[ToolCall, ...]
    reasoning_tokens: int = 0
    cut: bool = False  # the token limit ended the completion inside its last call

    def __post_init__(self) -> None:
        if not self.calls:
            raise ValueError("CalledTools needs at least one call; a completion without calls "
                             "is Answered")
        if self.reasoning_tokens < 0:
            raise ValueError(f"reasoning_tokens is {self.reasoning_tokens}, below 0")


@dataclass(frozen=True, kw_only=True)
class CompletionFailed(CoreEvent):
    """The model server did not complete the request; nothing was appended for it."""

    code: ErrorCode
    message: str
    failure: InferenceError | None = None  # what the server said, for the traceback


@dataclass(frozen=True, kw_only=True)
class ToolRecorded(CoreEvent):
    """A call's ToolResult is on disk."""

    call_id: str


@dataclass(frozen=True, kw_only=True)
class Cancelled(CoreEvent):
    """The shell was cancelled while doing the action under way."""


@dataclass(frozen=True, kw_only=True)
class RoundDone(CoreEvent):
    """(The core's own move.) Every call of the round has its result; no limit was hit."""


@dataclass(frozen=True, kw_only=True)
class LimitHit(CoreEvent):
    """(The core's own move.) A limit ends the turn at the end of this round."""


def completed(completion: Completion) -> Answered | CalledTools:
    """The event for a final completion: ``Answered`` without tool calls, else ``CalledTools``
    (``cut`` when the server says finish_reason "length": the limit fell inside the last)."""
    if not completion.tool_calls:
        return Answered(answer=completion)
    return CalledTools(calls=tuple(completion.tool_calls),
                       reasoning_tokens=completion.reasoning_tokens,
                       cut=completion.finish_reason == "length")


# --- actions: what the shell does next -----------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RecordUser:
    content: str


@dataclass(frozen=True, kw_only=True)
class RecordNotRun:
    """Append the call's ToolResult with ``text`` instead of running it. ``read``: as in
    ``RunTool``."""

    call: ToolCall
    read: ReadBack
    text: str


@dataclass(frozen=True, kw_only=True)
class RunTool:
    """Run the call, cap its result and append its ToolResult. ``read``: its arguments as the
    model server reads them back, the turn's one parse (``readback.read_back``: the object the
    call runs on, or why it cannot be read). ``cut``: the token limit ended the completion
    inside this call, so its arguments may be cut short."""

    call: ToolCall
    read: ReadBack
    cut: bool = False


@dataclass(frozen=True, kw_only=True)
class RequestCompletion:
    """Ask for a completion of the whole log; record it (Assistant, Usage, CacheLoss)."""

    tool_choice: str | None  # None: the server's default
    thinking: bool
    reasoning_spent: int  # what the turn's earlier completions reasoned (the cap is per turn)


@dataclass(frozen=True, kw_only=True)
class Finish:
    """The turn is done: ``answer`` (the last completion) is its answer."""

    answer: Completion


@dataclass(frozen=True, kw_only=True)
class Stop:
    """A limit or the model server ended the turn; what was appended stays."""

    code: ErrorCode
    reason: str
    failure: InferenceError | None = None  # the model server's, if it ended the turn


@dataclass(frozen=True, kw_only=True)
class Abandon:
    """The turn was cancelled: write nothing more."""


Action = RecordUser | RecordNotRun | RunTool | RequestCompletion | Finish | Stop | Abandon
