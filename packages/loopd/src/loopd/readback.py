"""What the model server can read back: a pure check, and the one form sent in its place.

llama-server renders a request's past assistant turns through its chat template, and before it
does, it parses every tool call's ``arguments`` text with nlohmann::json (common/chat.cpp,
``workaround::func_args_not_string``, for every template that renders arguments as an object, as
all of Boxmaker's do). That parser is strict RFC 8259: a lone surrogate escape, a raw control
character in a string, NaN, a number too large for a double (an integer of 310 digits too:
past 64 bits it is read as a double), or text after the value fails the
whole request with HTTP 500, and so does every later request that replays the same message.
A number it reads, it may write back as another: an integer from 2^63 to 2^64 - 1 as a
negative one, any other number past int64 or with a fraction to 6 significant digits
(``1234567.89`` as ``1.23457e+06``); the model would see a value the tool did not run on.

So the log keeps exactly what the model emitted, and the replay (replay.py) sends, in place of
arguments the server could not read back, ``readable_arguments``: a JSON object that says what
was dropped. It depends on the text alone, so every request carries the same bytes for the
same record and the prompt cache diverges at that message once, never again; arguments that
are a plain JSON object pass through unchanged, byte for byte
(docs/decisions/replay-what-the-server-reads.md).

``read_back`` is the single test, and loopd's one parse of a call's arguments: dispatch.py runs
a call on the object it gives, and answers a call it names a problem for "Not run", with the
reason, so the model never sees a tool run on arguments its own context does not show.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from bxcore.util import sha256

# Deeper than this is refused. The server's parser has no depth limit, but the template engine
# and Python's parser recurse per level (Python's json raises RecursionError near 1,000);
# real tool arguments nest a few levels.
MAX_DEPTH = 64
SIGNED_64 = 2**63  # the template engine's integers are int64
DROPPED_KEY = "unreadable_arguments"  # the one key of the form sent in place of the arguments
# An escape of a high surrogate with no low one after it, or of a low one with no high before.
_LONE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


# What ``read_back`` gives: the arguments' one JSON object, or why the server cannot read them.
ReadBack = dict[str, Any] | str


class _Unreadable(ValueError):
    """The reason the server's strict parser would refuse the text."""


def read_back(text: str) -> ReadBack:
    """``text`` as the server would read it back as a tool call's arguments: the one JSON object
    it holds, or (a str) why it cannot be read as it is, naming what was wrong and where."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate character at offset {exc.start}, which UTF-8 cannot carry"
    if raw.startswith(b"\xef\xbb\xbf"):
        return "a byte-order mark before the JSON"
    try:
        value = json.loads(text, parse_constant=_no_constant)
        _check(value, text, 1)
    except _Unreadable as exc:
        return str(exc)
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc.msg.removesuffix(' at')} at offset {exc.pos}"
    except RecursionError:
        return f"nested deeper than {MAX_DEPTH} levels"
    except ValueError:  # an integer past int()'s 4,300 digits: as a double, it overflows
        return "not valid JSON: a number too large for a double"
    if not isinstance(value, dict):
        return f"a JSON {_kind(value)}, not an object"
    return value


def arguments_problem(text: str) -> str | None:
    """Why the server could not read ``text`` back as a tool call's arguments, or None if it
    is one JSON object it reads as it is."""
    read = read_back(text)
    return read if isinstance(read, str) else None


def readable_arguments(text: str) -> str:
    """``text`` if the server reads it back; else one JSON object in its place, the same for the
    same text, that says what was dropped and why."""
    problem = arguments_problem(text)
    if problem is None:
        return text
    dropped = {"reason": problem, "characters": len(text),
               "sha256": sha256(text.encode("utf-8", "surrogatepass"))}
    return json.dumps({DROPPED_KEY: dropped}, ensure_ascii=True, sort_keys=True)


def _no_constant(name: str) -> Any:
    raise _Unreadable(f"not valid JSON: {name} is not a JSON number")


def _check(value: Any, text: str, depth: int) -> None:
    """Walk the parsed value for what Python's parser accepts and the server's refuses."""
    if isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            raise RecursionError
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str):
                _check_string(key, text)
            _check(item, text, depth + 1)
    elif isinstance(value, str):
        _check_string(value, text)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _Unreadable("not valid JSON: a number too large for a double")
        _check_shown(value, _as_shown(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        _check_shown(value, _int_as_shown(value))


def _as_shown(value: float) -> float:
    """A double as the template engine writes it back: 6 significant digits (C's ``%g``)."""
    return float(f"{value:.6g}")


def _int_as_shown(value: int) -> int | float:
    """An integer as the server writes it back: within int64 as it is; up to 2^64 as nlohmann's
    unsigned, which the template engine takes as int64 (wrapped negative); beyond, read with
    strtod (refused when that gives infinity, where Python's ``float`` overflows too), a
    double."""
    if -SIGNED_64 <= value < SIGNED_64:
        return value
    if SIGNED_64 <= value < 2 * SIGNED_64:
        return value - 2 * SIGNED_64
    try:
        return _as_shown(float(value))
    except OverflowError:
        raise _Unreadable("not valid JSON: a number too large for a double") from None


def _check_shown(value: int | float, shown: int | float) -> None:
    """The model must see the value the tool runs on (docs/decisions/
    replay-what-the-server-reads.md): a number the server writes back as another is refused."""
    if shown != value:
        digits = repr(value)
        digits = digits if len(digits) <= 40 else f"{digits[:30]}… ({len(digits):,} characters)"
        written = str(shown) if isinstance(shown, int) else f"{shown:.6g}"
        raise _Unreadable(f"the number {digits} would be shown back to you as {written}: the "
                          "model server keeps integers within 64 bits and other numbers to 6 "
                          "significant digits; send it with fewer digits, or as a string")


def _check_string(value: str, text: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        escape = _LONE_ESCAPE.search(text)
        where = f" ({escape.group()} at offset {escape.start()})" if escape else ""
        raise _Unreadable(f"a lone surrogate escape{where}, which no Unicode text can hold") \
            from None


def _kind(value: Any) -> str:
    match value:
        case list():
            return "array"
        case str():
            return "string"
        case bool() | None:
            return "literal"
        case _:
            return "number"
