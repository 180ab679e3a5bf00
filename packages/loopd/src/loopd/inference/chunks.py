"""llama-server's streamed chat-completion chunks, decoded from one SSE ``data`` payload.

The models read only the fields Boxmaker uses and ignore the rest: the server is not ours and
adds fields between releases (docs/decisions/inference-client.md). The fields they read are strict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bxcore._base import Count
from bxcore.frames import describe_validation
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError

from .errors import BadStream

DONE_MARKER = "[DONE]"


class _ServerModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class FunctionDelta(_ServerModel):
    name: StrictStr | None = None
    arguments: StrictStr | None = None


class ToolCallDelta(_ServerModel):
    index: StrictInt
    id: StrictStr | None = None
    type: StrictStr | None = None
    function: FunctionDelta | None = None


class Delta(_ServerModel):
    role: StrictStr | None = None
    content: StrictStr | None = None
    reasoning_content: StrictStr | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(_ServerModel):
    index: StrictInt
    delta: Delta
    finish_reason: StrictStr | None = None


# Counts of tokens: never negative. A chunk that says otherwise is a bad stream here, at the
# edge, not a failed turn where the count reaches a channel event or a log record.
class PromptProgress(_ServerModel):
    total: Count
    cache: Count
    processed: Count


class Timings(_ServerModel):
    cache_n: Count
    prompt_n: Count
    predicted_n: Count


class ServerChunk(_ServerModel):
    """One ``chat.completion.chunk``."""

    id: StrictStr
    choices: list[Choice]
    prompt_progress: PromptProgress | None = None
    timings: Timings | None = None


class ServerErrorBody(_ServerModel):
    message: StrictStr
    type: StrictStr | None = None
    code: StrictInt | None = None
    n_prompt_tokens: StrictInt | None = None  # a prompt over the context: its tokens


class _ErrorEnvelope(_ServerModel):
    error: ServerErrorBody


@dataclass(frozen=True)
class Done:
    """``data: [DONE]``: the server finished the stream."""


ChunkItem = ServerChunk | ServerErrorBody | Done


def parse_chunk(data: str) -> ChunkItem:
    """Decode one SSE ``data`` payload; anything else than the server's shapes is BadStream."""
    if data == DONE_MARKER:
        return Done()
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise BadStream(f"an SSE event is not JSON: {exc}: {data[:200]!r}") from None
    if not isinstance(value, dict):
        raise BadStream(f"an SSE event is not a JSON object: {data[:200]!r}")
    if "\\u" in data and not _is_unicode(value):
        # llama-server writes valid UTF-8 only; a lone surrogate escape could never be logged
        raise BadStream(f"an SSE event holds a lone surrogate escape: {data[:200]!r}")
    try:
        if "error" in value:
            return _ErrorEnvelope.model_validate(value).error
        return ServerChunk.model_validate(value)
    except ValidationError as exc:
        raise BadStream(f"an SSE chunk has the wrong shape: {describe_validation(exc)}") from None


def _is_unicode(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_error_body(body: bytes) -> ServerErrorBody | None:
    """The server's ``{"error": {...}}`` of a non-streamed error response, if it is one."""
    try:
        return _ErrorEnvelope.model_validate_json(body).error
    except ValidationError:
        return None
