"""Every audit record has a known maximum size, whatever a model put in it. Pure.

A model reaches the text of a record through a call's tool name, the reasons that quote its
arguments (a 70,000-character host in a URL), and whatever a refused frame named. Each string
of a record is kept whole when its JSON (quotes and escapes included) takes at most
FIELD_BYTES; a longer one is cut at a character boundary and ends with a marker naming the
whole it was cut from::

    <prefix>…[cut: <bytes> bytes, sha256:<64 hex>]

``<bytes>`` and the hash are of the whole string's UTF-8 (a lone surrogate as its surrogate
bytes, as ``bxcore.util.text_sha256`` hashes it), so the owner can check a copy of the original
against the record. A string that ends like a marker, or holds a lone surrogate (which no JSON
line can carry; it becomes U+FFFD), is marked too however short, so a marker in a record is
always one this module wrote and every record can be written.

A record's line is then at most RECORD_BYTES: every record kind has a handful of strings and
two numbers at most, and an append whose line is still longer is refused (AuditError), never
written.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from bxcore._base import Model
from bxcore.canonical import canonical_json
from bxcore.util import text_sha256

FIELD_BYTES = 4096  # the canonical JSON of one string of a record, marker included
RECORD_BYTES = 64 * 1024  # one record's line, newline included

_MARKER = re.compile(r"…\[cut: [0-9]+ bytes, sha256:[0-9a-f]{64}\]\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")
_MARKER_START = "…[cut: ".encode()

M = TypeVar("M", bound=Model)


def marker(text: str) -> str:
    whole = text.encode("utf-8", "surrogatepass")
    return f"…[cut: {len(whole)} bytes, {text_sha256(text)}]"


def _json_size(text: str) -> int:
    return len(canonical_json(text))


def bound_text(text: str, limit: int = FIELD_BYTES) -> str:
    """``text`` when its JSON fits in ``limit`` bytes and it does not end like a marker;
    otherwise the longest prefix that fits with the marker of the whole after it."""
    # Each character takes at least one byte of JSON, so more than ``limit`` never fit.
    if len(text) <= limit and not _has_surrogate(text) and _MARKER.search(text) is None \
            and _json_size(text) <= limit:
        return text
    tail = marker(text)
    head = text[:limit]
    fits, low, high = 0, 0, len(head)
    while low <= high:  # the longest prefix whose JSON, marker included, fits
        middle = (low + high) // 2
        if _json_size(_printable(head[:middle]) + tail) <= limit:
            fits, low = middle, middle + 1
        else:
            high = middle - 1
    return _printable(head[:fits]) + tail


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _printable(text: str) -> str:
    """``text`` with each lone surrogate (which no JSON line can carry) as U+FFFD; the marker's
    hash still names the original."""
    return _SURROGATE.sub("\ufffd", text)


def _bound_value(value: Any) -> Any:
    if isinstance(value, str):
        return bound_text(value)
    if isinstance(value, dict):
        return {key: _bound_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_bound_value(item) for item in value]
    return value


def needs_bounding(line: bytes) -> bool:
    """Whether a record's line may hold a string to cut: a line within FIELD_BYTES that holds
    nothing like a marker has none, so the common record is encoded once."""
    return len(line) > FIELD_BYTES or _MARKER_START in line


def bounded(entry: M) -> M:
    """``entry`` with every string bounded."""
    body = _bound_value(entry.model_dump(mode="json", by_alias=True))
    return type(entry).model_validate(body)
