"""The one canonical JSON encoding for everything Boxmaker writes to disk or hashes.

Keys sorted, no spaces, UTF-8 (not ASCII escapes), no NaN or Infinity. Numbers are written as
Python writes them (floats in their shortest round-trip form); log records hold integers only.
Changing any of these
changes the bytes of every log record and every audit hash: the golden fixtures under
tests/fixtures/ exist to make such a change fail loudly.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


def to_jsonable(value: Any) -> Any:
    """A pydantic model becomes its JSON-mode dump (by alias); anything else passes through."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return value


def _nested_model(value: Any) -> Any:
    # json.dumps calls this for what it cannot encode: a model inside a dict or list.
    if isinstance(value, BaseModel):
        return to_jsonable(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """Encode a JSON value (or a pydantic model, at any depth) canonically.

    Raises ValueError on NaN or Infinity and on a string that is not valid Unicode (a lone
    surrogate, which UTF-8 cannot carry); TypeError on a value JSON has no form for.
    """
    return json.dumps(
        to_jsonable(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_nested_model,
    ).encode("utf-8")


def canonical_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")
