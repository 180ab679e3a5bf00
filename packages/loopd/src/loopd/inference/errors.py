"""Errors of the inference path.

    InferenceError        the model server failed the request (after retries, where allowed)
    └── SessionFull       the prompt does not fit the slot's context (HTTP 400
                          exceed_context_size_error); never retried
"""

from __future__ import annotations

from bxcore.errors import BoxmakerError


class InferenceError(BoxmakerError):
    pass


class SessionFull(InferenceError):
    pass
