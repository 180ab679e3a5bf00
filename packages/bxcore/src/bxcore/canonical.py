"""The one canonical JSON encoding for everything Boxmaker writes to disk or hashes.

Keys sorted, no spaces, UTF-8 (not ASCII escapes), no NaN or Infinity. Changing any of these
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


def canonical_json(value: Any) -> bytes:
    """Encode a JSON value (or a pydantic model) canonically. Raises ValueError on NaN/Infinity."""
    return json.dumps(
        to_jsonable(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")


def canonical_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")
