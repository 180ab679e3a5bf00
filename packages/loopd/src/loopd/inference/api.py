"""The seam between the turn loop and the inference client.

The turn loop knows only ``Inference``; the real client (httpx over inferproxy's socket) and the
test fakes implement it. Everything here is plain data and pure functions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bxcore.chat import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from bxcore.protocol.loop import CacheLossEvent, TurnEventBody

ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage
EventSink = Callable[[TurnEventBody], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """One completion to ask for: the whole message array (system message first), the epoch's
    fixed tools array, and the session's pinned slot."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSchema, ...]
    slot: int
    session: str  # for errors, logs and the encoding cache
    # The session's marker, put after the baseline (inference/markers.py); None: a session logged
    # before markers were recorded, whose system message starts with its legacy marker.
    marker: str | None = None
    max_tokens: int | None = None  # overrides [inference].max_tokens for this request
    tool_choice: str | None = None  # "auto" (the server's default), "required" or "none"
    thinking: bool = True  # False: ask the server not to think (a request parameter, not prompt)
    # Reasoning tokens the turn's earlier completions spent: the thinking cap counts per turn
    # (docs/design.md, "Runaway control"), so this completion may reason only for what is left.
    reasoning_spent: int = 0


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A finished completion: the three message fields exactly as the server meant them, and the
    server's timings."""

    content: str | None
    reasoning_content: str | None
    tool_calls: tuple[ToolCall, ...] | None
    cache_n: int
    prompt_n: int
    predicted_n: int
    reasoning_tokens: int
    thinking_capped: bool
    finish_reason: str | None = None  # stop | length | tool_calls, as the server said

    def message(self) -> AssistantMessage:
        """The assistant message to replay in the next request, as the server sent it, with the
        replay's one rule for a message the server would refuse (``readable_content``)."""
        calls = list(self.tool_calls) if self.tool_calls is not None else None
        return AssistantMessage(content=readable_content(self.content, calls),
                                reasoning_content=self.reasoning_content, tool_calls=calls)

    @property
    def slot_tokens(self) -> int:
        """Tokens in the slot after this completion: what the next request can reuse."""
        return self.cache_n + self.prompt_n + self.predicted_n


def readable_content(content: str | None, calls: Sequence[object] | None) -> str | None:
    """The server refuses an assistant message with neither content nor calls (HTTP 400): a
    completion that wrote nothing, or only reasoning, goes with empty content."""
    return "" if content is None and not calls else content


class Inference(Protocol):
    async def chat(self, request: ChatRequest, events: EventSink) -> Completion:
        """Stream one completion, forwarding channel events as they arrive.

        Raises SessionFull when the prompt does not fit the slot, InferenceError for any other
        failure that retries did not cure."""
        ...


def cache_outcome(
    previous: Completion | None, current: Completion, loss_ratio: float
) -> CacheLossEvent | None:
    """A cache loss between two consecutive completions of one session, or None.

    The request after ``previous`` extends it, so the server should reuse about
    ``previous.slot_tokens`` tokens. Far fewer (below ``loss_ratio`` of that) means the slot was
    taken by another client or the model was unloaded: an expected event, never an error.
    """
    if previous is None:
        return None
    expected = previous.slot_tokens
    if current.cache_n >= loss_ratio * expected:
        return None
    return CacheLossEvent(expected=expected, got=current.cache_n)
