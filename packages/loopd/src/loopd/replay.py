"""The log replayed into the prompt (M2b design, section 2, "Replay"): pure, no I/O.

``messages(baseline, records)`` is the message array of a request: the baseline's opening (the
system message, then the summary of the epochs before, if any), then one message per record that
speaks: ``User`` a user message, ``Assistant`` an assistant message with its content, reasoning
and tool calls exactly as the server returned them, ``ToolResult`` a tool message. Every other
record gives nothing. The request for a turn is ``messages(...)`` and the baseline's tool schemas;
so every request of an epoch extends the one before, byte for byte (inference contract 2).

A ``Session`` (store.py) keeps ``messages(baseline, records)`` up to date with ``replay`` as each
record is appended, so building a request never re-reads the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from bxcore.chat import AssistantMessage, ToolMessage, UserMessage
from bxcore.records import Assistant, CacheLoss, EpochEnd, SessionStart, ToolResult, Usage, User

from .baseline import Baseline, ChatMessage
from .log import Record


def replay(record: Record) -> ChatMessage | None:
    """The message one log record contributes to a request, if any.

    Every variant is named, so a new record type is a type error here, not a silent skip."""
    match record:
        case User():
            return UserMessage(content=record.content)
        case Assistant():
            return AssistantMessage(
                content=record.content,
                reasoning_content=record.reasoning_content,
                tool_calls=record.tool_calls,
            )
        case ToolResult():
            return ToolMessage(tool_call_id=record.tool_call_id, content=record.content)
        case SessionStart() | Usage() | CacheLoss() | EpochEnd():
            return None
        case _:
            assert_never(record)


def messages(baseline: Baseline, records: Iterable[Record]) -> list[ChatMessage]:
    """The message array of a request: the baseline's opening, then the log replayed."""
    result = baseline.opening()
    for record in records:
        message = replay(record)
        if message is not None:
            result.append(message)
    return result
