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

``fitting_views`` is for a request the slot refused as too long (compaction's, epochs.py): the
same messages with long texts left out, then fewer of them, down to the opening alone.

A ``Session`` (store.py) keeps ``messages(baseline, records)`` up to date with ``replay`` as each
record is appended, so building a request never re-reads the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import assert_never

from bxcore.chat import AssistantMessage, FunctionCall, ToolCall, ToolMessage, UserMessage
from bxcore.records import Assistant, CacheLoss, EpochEnd, SessionStart, ToolResult, Usage, User

from .baseline import Baseline, ChatMessage
from .inference.api import readable_content
from .log import Record
from .readback import readable_arguments

LONG = 1000  # characters: a longer text is left out of a view that must fit (fitting_views)
SHOWN = 200  # characters of a left-out text shown in its place
LONG_NAME = 80  # characters of a tool name kept in such a view
LEFT_OUT_KEY = "left_out_arguments"
SUMMARY_LEFT_OUT = ("[the summary of the earlier epochs was left out of this request, which did "
                    "not fit the context]")


def replay(record: Record) -> ChatMessage | None:
    """The message one log record contributes to a request, if any.

    Every variant is named, so a new record type is a type error here, not a silent skip."""
    match record:
        case User():
            return UserMessage(content=record.content)
        case Assistant():
            calls = None if record.tool_calls is None else [_readable(c) for c in record.tool_calls]
            return AssistantMessage(content=readable_content(record.content, calls),
                                    reasoning_content=record.reasoning_content, tool_calls=calls)
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


def fitting_views(messages: Sequence[ChatMessage], opening: int) -> Iterator[list[ChatMessage]]:
    """Message arrays to try in turn when the slot may not hold ``messages``: all of them;
    then every text over ``LONG`` characters (a tool result, a user message, an answer, a call's
    arguments, and any reasoning) left out with its start shown; then only the newest half of
    those, a quarter, and so on, each starting at a message that is not a tool result; last the
    ``opening`` (the baseline's first messages) alone, which the baseline budget keeps small;
    and then its summary, if any, left out (an epoch started before the summary was bounded)."""
    head, rest = list(messages[:opening]), list(messages[opening:])
    yield [*head, *rest]
    short = [_shortened(m) for m in rest]
    kept = len(short)
    while kept > 0:
        tail = short[len(short) - kept:]
        while tail and isinstance(tail[0], ToolMessage):
            tail = tail[1:]
        yield [*head, *tail]
        kept //= 2
    yield head
    if len(head) > 1:
        yield [head[0], *(UserMessage(content=SUMMARY_LEFT_OUT) for _ in head[1:])]


def _shortened(message: ChatMessage) -> ChatMessage:
    match message:
        case UserMessage() | ToolMessage():
            return message.model_copy(update={"content": _left_out(message.content)})
        case AssistantMessage():
            calls = None if message.tool_calls is None else [
                _short_call(c) for c in message.tool_calls]
            content = None if message.content is None else _left_out(message.content)
            return message.model_copy(update={"content": content, "reasoning_content": None,
                                              "tool_calls": calls})
    return message


def _short_call(call: ToolCall) -> ToolCall:
    arguments = call.function.arguments
    if len(arguments) > LONG:
        arguments = json.dumps({LEFT_OUT_KEY: {"characters": len(arguments)}})
    return call.model_copy(update={"function": FunctionCall(
        name=call.function.name[:LONG_NAME], arguments=arguments)})


def _left_out(text: str) -> str:
    if len(text) <= LONG:
        return text
    return (f"[left out of this request, which did not fit the context: {len(text):,} "
            f"characters, starting {json.dumps(text[:SHOWN])}]")
