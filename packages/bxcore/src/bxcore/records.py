"""Session log records: one JSON object per line of ``sessions/<id>/<epoch>.jsonl``.

Fields are those of docs/design.md, "Log records". ``type`` names the variant. The bytes of
each variant are pinned by golden fixtures: a change here that changes them fails a test.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, TypeAdapter

from ._base import Count, Flag, Model, OptionalKeys, Text
from .chat import ToolCall
from .ids import Origin, SessionId
from .tools import DataClass
from .util import is_rfc3339


def _check_time(value: str) -> str:
    if not is_rfc3339(value):
        raise ValueError(f"not an RFC 3339 time: {value!r}")
    return value


Time = Annotated[Text, AfterValidator(_check_time)]


class SessionStart(OptionalKeys):
    """``marker`` is the whitespace the session's first user message starts with, after the
    baseline (loopd/inference/markers.py), the same in every epoch. A log written before it
    existed has no ``marker`` key, so those lines keep their bytes."""

    type: Literal["session_start"] = "session_start"
    time: Time
    session: SessionId
    epoch: Count
    slot: Count
    baseline: Text  # sha256 of the epoch's baseline file, algorithm-tagged
    marker: Text | None = None

    OMITTED_WHEN_NONE = ("marker",)


class User(OptionalKeys):
    """``origin`` is the channel's idempotency key for the turn this message opened (loop.sock's
    ``Turn.origin``): metadata, never replayed into a prompt. A log written before it existed,
    and a turn without one, has no ``origin`` key at all, so those lines keep their bytes."""

    type: Literal["user"] = "user"
    time: Time
    content: Text
    origin: Origin | None = None

    OMITTED_WHEN_NONE = ("origin",)


class Assistant(Model):
    """The three fields exactly as the server returned them, replayed unchanged."""

    type: Literal["assistant"] = "assistant"
    time: Time
    content: Text | None
    reasoning_content: Text | None
    tool_calls: list[ToolCall] | None


class Usage(Model):
    type: Literal["usage"] = "usage"
    time: Time
    cache_n: Count
    prompt_n: Count
    predicted_n: Count
    reasoning_tokens: Count
    thinking_capped: Flag


class ToolResult(Model):
    type: Literal["tool_result"] = "tool_result"
    time: Time
    call: Count
    tool_call_id: Text
    content: Text
    data_class: DataClass = Field(alias="class")
    untrusted: Flag
    truncated: Flag


class CacheLoss(Model):
    type: Literal["cache_loss"] = "cache_loss"
    time: Time
    expected: Count
    got: Count


class EpochEnd(OptionalKeys):
    """Closes an epoch's log; the session continues in ``next_epoch`` (compaction). The next
    epoch opens with the content of the assistant message before it, or with ``summary`` when
    the model wrote none it could use (a fixed notice, loopd's epochs.py)."""

    OMITTED_WHEN_NONE = ("summary",)

    type: Literal["epoch_end"] = "epoch_end"
    time: Time
    next_epoch: Count
    summary: Text | None = None


AnyRecord = SessionStart | User | Assistant | Usage | ToolResult | CacheLoss | EpochEnd

LogRecord = Annotated[AnyRecord, Field(discriminator="type")]

LOG_RECORD = TypeAdapter(LogRecord)


def parse_record(line: bytes | str) -> AnyRecord:
    """Parse one log line. Raises pydantic.ValidationError on anything that is not a record."""
    return LOG_RECORD.validate_json(line)
