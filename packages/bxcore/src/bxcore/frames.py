"""The frame format of every Unix socket between roles, as a pure (sans-I/O) codec.

A frame is a 4-byte big-endian length N, then N bytes of one canonical-JSON object
``{"body": {...}, "final": bool, "kind": "..."}``. See docs/protocol.md.

    decoder = FrameDecoder(kinds={"turn"})
    decoder.feed(data)               # bytes from the socket; feed(b"") means end of stream
    event = decoder.next_event()     # a Frame, NEED_DATA, or END (clean close)

Any byte string yields frames or a FrameError (or IncompleteFrame when the stream ends inside a
frame), never another exception. After an error the decoder stays in its ERROR state.

What the peer sent wrong is a FrameError (a RemoteProtocolError); a frame this side builds or
encodes wrong is a LocalProtocolError, our bug. ``Frame`` raises the local kind, and the decoder
converts it once, where the data was received. Each side of a socket declares the kinds it
sends and receives as a ``Kinds`` table (kind -> the body's model; bxcore.protocol), which
bxcore.frameconn checks every frame sent against.
"""

from __future__ import annotations

import json
import re
import struct
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from .canonical import canonical_json, to_jsonable
from .errors import (
    ErrorCode,
    FrameError,
    FrameTooLarge,
    IncompleteFrame,
    LocalProtocolError,
    WireError,
)

MAX_FRAME = 16 * 1024 * 1024  # bytes of JSON after the length prefix
_PREFIX = struct.Struct(">I")


class _Signal(Enum):
    NEED_DATA = "need_data"
    END = "end"


NEED_DATA = _Signal.NEED_DATA
END = _Signal.END

M = TypeVar("M", bound=BaseModel)

Kinds = Mapping[str, TypeAdapter[Any]]
"""The frame kinds one side of a socket sends or receives, each with its body's validator."""


def kind_table(table: Mapping[str, Any]) -> Kinds:
    """A read-only ``Kinds`` table from kind -> the body's model (a pydantic model, or any type
    pydantic validates, such as a discriminated union; an adapter passes through)."""
    return MappingProxyType({
        kind: model if isinstance(model, TypeAdapter) else TypeAdapter(model)
        for kind, model in table.items()
    })


@dataclass(frozen=True, kw_only=True)
class Frame:
    kind: str
    final: bool
    body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # LocalProtocolError: a frame built here wrong is our bug. The decoder turns it into a
        # FrameError for a frame that arrived.
        if not isinstance(self.kind, str) or not self.kind:
            raise LocalProtocolError("frame 'kind' must be a non-empty string")
        if not isinstance(self.final, bool):
            raise LocalProtocolError(f"frame {self.kind!r}: 'final' must be true or false")
        if not isinstance(self.body, dict):
            raise LocalProtocolError(f"frame {self.kind!r}: 'body' must be an object")

    @classmethod
    def of(cls, kind: str, body: BaseModel | dict[str, Any], *, final: bool) -> Frame:
        return cls(kind=kind, final=final, body=to_jsonable(body))

    def parse(self, model: type[M]) -> M:
        """A received frame's body validated as ``model``; a FrameError (the peer's fault)
        names the frame kind and the field."""
        try:
            return model.model_validate(self.body)
        except ValidationError as exc:
            raise FrameError(f"frame {self.kind!r}: {describe_validation(exc)}") from None


def describe_validation(exc: ValidationError) -> str:
    """One line per problem: ``field.path: message``."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(body)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def encode_frame(frame: Frame, max_size: int = MAX_FRAME) -> bytes:
    """The frame's bytes on the wire. LocalProtocolError when it cannot be sent: its body is not
    JSON (NaN, a lone surrogate, a value JSON has no form for), or it is over ``max_size``."""
    try:
        payload = canonical_json({"kind": frame.kind, "final": frame.final, "body": frame.body})
    except (ValueError, TypeError) as exc:
        raise LocalProtocolError(f"frame {frame.kind!r} is not JSON: {exc}") from exc
    if len(payload) > max_size:
        raise LocalProtocolError(f"frame {frame.kind!r} is {len(payload)} bytes, over the "
                                 f"limit of {max_size}")
    return _PREFIX.pack(len(payload)) + payload


class FrameDecoder:
    """Bytes in, frames out. ``kinds`` is the set this socket accepts (None: any kind)."""

    def __init__(self, kinds: Collection[str] | None = None, max_size: int = MAX_FRAME):
        self._kinds = frozenset(kinds) if kinds is not None else None
        self._max = max_size
        self._buffer = bytearray()
        self._ended = False
        self._error: FrameError | IncompleteFrame | None = None

    def __repr__(self) -> str:
        state = "ERROR" if self._error else ("ENDED" if self._ended else "OPEN")
        return f"<FrameDecoder {state} buffered={len(self._buffer)}>"

    def feed(self, data: bytes) -> None:
        if self._error:
            raise self._error
        if self._ended:
            if not data:
                return  # a second end of stream says nothing new
            raise FrameError("data fed after the end of the stream")
        if data:
            self._buffer += data
        else:
            self._ended = True

    def next_event(self) -> Frame | _Signal:
        if self._error:
            raise self._error
        try:
            return self._next()
        except (FrameError, IncompleteFrame) as exc:
            self._error = exc
            raise

    def _next(self) -> Frame | _Signal:
        if len(self._buffer) < _PREFIX.size:
            return self._short()
        (length,) = _PREFIX.unpack_from(self._buffer)
        if length > self._max:
            raise FrameTooLarge(f"frame length {length} is over the limit of {self._max} bytes")
        if len(self._buffer) < _PREFIX.size + length:
            return self._short()
        payload = bytes(self._buffer[_PREFIX.size : _PREFIX.size + length])
        del self._buffer[: _PREFIX.size + length]
        return self._parse(payload)

    def _short(self) -> _Signal:
        if not self._ended:
            return NEED_DATA
        if self._buffer:
            raise IncompleteFrame(
                f"stream ended inside a frame ({len(self._buffer)} bytes of it arrived)"
            )
        return END

    def _parse(self, payload: bytes) -> Frame:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"frame is not UTF-8 (byte {exc.start})") from None
        try:
            value = json.loads(
                text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicates
            )
        except (ValueError, RecursionError) as exc:
            raise FrameError(f"frame is not JSON: {exc}") from None
        if _LONE_SURROGATE_ESCAPE.search(payload):
            _check_unicode(value)
        if not isinstance(value, dict):
            raise FrameError(f"frame is a JSON {type(value).__name__}, not an object")
        missing = [k for k in ("kind", "final", "body") if k not in value]
        if missing:
            raise FrameError(f"frame is missing {', '.join(repr(k) for k in missing)}")
        extra = sorted(set(value) - {"kind", "final", "body"})
        if extra:
            raise FrameError(f"frame has unknown field(s) {', '.join(map(repr, extra))}")
        try:
            frame = Frame(kind=value["kind"], final=value["final"], body=value["body"])
        except LocalProtocolError as exc:  # built from the peer's bytes: the peer's fault
            raise FrameError(str(exc)) from None
        if self._kinds is not None and frame.kind not in self._kinds:
            raise FrameError(f"unknown frame kind {frame.kind!r} on this socket")
        return frame


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Two parsers that keep different copies of a repeated key read different messages; the
    # canonical encoding never repeats a key, so a frame that does is refused.
    value = dict(pairs)
    if len(value) != len(pairs):
        counts = Counter(key for key, _ in pairs)
        repeated = sorted(key for key, count in counts.items() if count > 1)
        raise ValueError(f"key(s) {', '.join(map(repr, repeated))} repeated in one object")
    return value


# A \uD800-\uDFFF escape can decode to half a surrogate pair, a string UTF-8 cannot carry; such
# a body could never be logged or forwarded. Only payloads holding such an escape are checked.
_LONE_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def _check_unicode(value: Any) -> None:
    try:
        canonical_json(value)
    except ValueError:
        raise FrameError("frame has a string that is not Unicode (a lone surrogate)") from None


ERROR = "error"  # the one refusal kind: every socket's protocol names it so


def error_frame(code: ErrorCode, message: str) -> Frame:
    """The final frame that refuses: the code and a message naming what was wrong."""
    return Frame.of(ERROR, WireError(code=code, message=message), final=True)
