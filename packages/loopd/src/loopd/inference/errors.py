"""Errors of the inference path.

    InferenceError            the model server failed the request (after retries, where allowed)
    ├── SessionFull           the prompt does not fit the slot's context (HTTP 400
    │                         exceed_context_size_error); never retried
    ├── Unavailable           the server could not be reached or was loading: connect failure,
    │   │                     HTTP 503, the connection closed before a response; retried
    │   └── StreamCut         the stream ended before the completion was whole; retried
    ├── Stalled               no byte within the first-byte limit, or none for the liveness
    │                         timeout after it; not retried (a retry would queue again)
    ├── ServerRejected        any other HTTP error status, with the server's message; not retried
    ├── ServerStreamError     an error event in the middle of the stream, with the server's
    │                         message; not retried
    ├── UnreadableOutput      the server's tool-call parser refused what the model wrote ("does
    │                         not match the expected ... format"), as an HTTP error or mid-stream;
    │                         the turn asks once more without tools (turn/shell.py)
    ├── BadStream             the server sent something that is not its SSE format (the peer did
    │                         it wrong): malformed lines, JSON or chunk shapes; not retried
    └── OverBudget            the baseline has more tokens than ``[inference].baseline_budget``

Only Unavailable (and its StreamCut) is retried by ``chat_with_retry``.
"""

from __future__ import annotations

from bxcore.errors import BoxmakerError


class InferenceError(BoxmakerError):
    pass


class SessionFull(InferenceError):
    def __init__(self, message: str, *, prompt_tokens: int | None = None):
        super().__init__(message)
        self.prompt_tokens = prompt_tokens  # the refused prompt's, when the server says


class Unavailable(InferenceError):
    pass


class StreamCut(Unavailable):
    pass


class Stalled(InferenceError):
    pass


class ServerRejected(InferenceError):
    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status


class ServerStreamError(InferenceError):
    pass


class UnreadableOutput(InferenceError):
    pass


# What llama-server says when its tool-call parser cannot read the model's output
# (common/chat.cpp: "The model produced output that does not match the expected <f> format").
UNREADABLE_OUTPUT = "output that does not match the expected"


class BadStream(InferenceError):
    pass


class OverBudget(InferenceError):
    pass
