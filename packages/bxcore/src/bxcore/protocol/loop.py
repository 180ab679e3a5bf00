"""``loop.sock``: a channel (bxctl chat, gatewayd, a scheduled job) drives turns in loopd.

One connection per turn: the channel sends one ``turn``, reads frames until one has
``final: true``, and closes (docs/design.md, "The channel protocol").
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .._base import Count, Flag, Model, OptionalKeys, Text
from ..errors import WireError
from ..frames import ERROR as ERROR  # re-exported: each protocol names its error kind
from ..frames import kind_table
from ..ids import Origin, SessionId
from ..tools import DataClass
from .broker import ToolWaiting

TURN = "turn"
TURN_EVENT = "turn_event"
TURN_DONE = "turn_done"


SessionKind = Literal["main", "background"]
ToolChoice = Literal["auto", "required", "none"]


class Turn(OptionalKeys):
    """``resume: false`` requires that the session does not exist; ``true`` that it does.

    ``session_kind`` picks the session's slot: ``main`` for conversations, ``background`` for
    scheduled runs and subagents. It is fixed when the session starts.
    """

    session: SessionId
    content: Text
    resume: Flag
    session_kind: SessionKind = "main"
    thinking: Flag = True  # false: the channel asks the model not to think for this turn
    # tool_choice for the turn's completions in order ("auto", "required", "none"); "auto"
    # after the list. Lets a channel (or a test with a small model) steer tool use; it is a
    # request parameter, not part of the prompt, so requests still extend one another.
    tool_choice: list[ToolChoice] = Field(default_factory=list, max_length=64)
    # The channel's idempotency key (``mattermost:<post_id>``): a turn whose origin the
    # session's log already holds is not run again; loopd answers with that turn's answer
    # (docs/protocol.md). None (bxctl chat, which never resends) runs every turn.
    origin: Origin | None = None

    OMITTED_WHEN_NONE = ("origin",)


class Queued(Model):
    type: Literal["queued"] = "queued"
    ahead: Count


class Waiting(Model):
    type: Literal["waiting"] = "waiting"
    slot_busy: Flag


class Progress(Model):
    type: Literal["progress"] = "progress"
    total: Count
    cache: Count
    processed: Count


class Reasoning(Model):
    type: Literal["reasoning"] = "reasoning"
    text: Text


class Content(Model):
    type: Literal["content"] = "content"
    text: Text


class ToolCallStarted(Model):
    type: Literal["tool_call_started"] = "tool_call_started"
    name: Text


class ToolResultEvent(Model):
    type: Literal["tool_result"] = "tool_result"
    name: Text
    data_class: DataClass = Field(alias="class")
    truncated: Flag


class ThinkingCapped(Model):
    type: Literal["thinking_capped"] = "thinking_capped"
    tokens: Count


class Retrying(Model):
    type: Literal["retrying"] = "retrying"
    attempt: Count
    after_ms: Count
    error: Text


class CacheLossEvent(Model):
    type: Literal["cache_loss"] = "cache_loss"
    expected: Count
    got: Count


class ToolWaitingEvent(ToolWaiting):
    """A tool call has not finished: it waits for the owner's approval, or is still running
    (brokerd's ``tool_waiting``, passed on with the same fields)."""

    type: Literal["tool_waiting"] = "tool_waiting"


TurnEventBody = Annotated[
    Queued | Waiting | Progress | Reasoning | Content | ToolCallStarted | ToolResultEvent
    | ThinkingCapped | Retrying | CacheLossEvent | ToolWaitingEvent,
    Field(discriminator="type"),
]


class TurnEvent(Model):
    event: TurnEventBody


class TurnUsage(Model):
    cache_n: Count
    prompt_n: Count
    predicted_n: Count
    reasoning_tokens: Count
    thinking_capped: Flag


class AnswerTaint(Model):
    """The session's taint as its log holds it when the answer is given: the highest class of
    every tool result in every epoch (None: none yet), and whether any was untrusted."""

    highest: DataClass | None
    untrusted: Flag


class TurnDone(OptionalKeys):
    """``taint`` None: the sender does not say (a loopd from before the field); a channel then
    treats the answer as tainted (gatewayd: docs/decisions/output-channels.md)."""

    content: Text
    usage: TurnUsage
    taint: AnswerTaint | None = None

    OMITTED_WHEN_NONE = ("taint",)


# What each side sends, with each kind's body (bxcore.frames.Kinds).
TO_LOOPD = kind_table({TURN: Turn})
FROM_LOOPD = kind_table({TURN_EVENT: TurnEvent, TURN_DONE: TurnDone, ERROR: WireError})


__all__ = [
    "ERROR", "FROM_LOOPD", "TO_LOOPD", "TURN", "TURN_DONE", "TURN_EVENT",
    "AnswerTaint", "CacheLossEvent", "Content", "Progress", "Queued", "Reasoning", "Retrying",
    "SessionKind",
    "ThinkingCapped", "ToolCallStarted", "ToolChoice", "ToolResultEvent", "ToolWaitingEvent",
    "Turn", "TurnDone", "TurnEvent", "TurnEventBody", "TurnUsage", "Waiting", "WireError",
]
