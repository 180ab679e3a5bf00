"""The log replayed into the prompt (docs/design.md, "Replay"): pure, no I/O.

``messages(baseline, records)`` is the message array of a request: the baseline's opening (the
system message, then the summary of the epochs before, if any), then one message per record that
speaks: ``User`` a user message, ``Assistant`` an assistant message with its content, reasoning
and tool calls exactly as the server returned them (save what the server could not read back:
arguments, which go as readback.py's fixed form, and a message with neither content nor calls,
which goes with empty content: docs/decisions/replay-what-the-server-reads.md),
``ToolResult`` a tool message. Every other
record gives nothing. The request for a turn is ``messages(...)`` and the baseline's tool schemas;
so every request of an epoch extends the one before, byte for byte (the append-only rule).

A ``Session`` (store.py) keeps ``messages(baseline, records)`` up to date with ``replay`` as each
record is appended, so building a request never re-reads the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from bxcore.chat import AssistantMessage, FunctionCall, ToolCall, ToolMessage, UserMessage
from bxcore.records import Assistant, CacheLoss, EpochEnd, SessionStart, ToolResult, Usage, User

from .baseline import Baseline, ChatMessage
from .log import Record
from .readback import readable_arguments


def replay(record: Record) -> ChatMessage | None:
    """The message one log record contributes to a request, if any.

    Every variant is named, so a new record type is a type error here, not a silent skip."""
    match record:
        case User():
            return UserMessage(content=record.content)
        case Assistant():
            calls = None if record.tool_calls is None else [_readable(c) for c in record.tool_calls]
            # The server refuses an assistant message with neither content nor calls (HTTP 400):
            # a completion that wrote nothing, or only reasoning, goes with empty content.
            content = "" if record.content is None and not calls else record.content
            return AssistantMessage(content=content, reasoning_content=record.reasoning_content,
                                    tool_calls=calls)
        case ToolResult():
            return ToolMessage(tool_call_id=record.tool_call_id, content=record.content)
        case SessionStart() | Usage() | CacheLoss() | EpochEnd():
            return None
        case _:
            assert_never(record)


def _readable(call: ToolCall) -> ToolCall:
    """The call as the server can read it back: the same object when its arguments are."""
    arguments = readable_arguments(call.function.arguments)
    if arguments is call.function.arguments:
        return call
    return call.model_copy(update={"function": FunctionCall(name=call.function.name,
                                                              arguments=arguments)})


def messages(baseline: Baseline, records: Iterable[Record]) -> list[ChatMessage]:
    """The message array of a request: the baseline's opening, then the log replayed."""
    result = baseline.opening()
    for record in records:
        message = replay(record)
        if message is not None:
            result.append(message)
    return result
