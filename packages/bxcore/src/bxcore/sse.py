"""A sans-I/O parser for server-sent events (the WHATWG ``text/event-stream`` format).

Bytes in, events out; it never touches a socket::

    parser = SSEParser()
    parser.feed(chunk)            # bytes as they arrive; feed(b"") means the stream ended
    event = parser.next_event()   # Message, Comment, NEED_DATA or END

llama-server (loopd's inference client) sends ``data: <json>\\n\\n`` per event and ``:\\n\\n`` as a
keep-alive while silent; Honcho's dialectic chat (memoryd) sends ``data: <json>`` events too.
Feeding the same bytes whole, byte by byte or split anywhere gives the same events. A line
longer than ``max_line`` raises BadEventStream; after any error the parser stays broken.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

from .errors import BadEventStream

MAX_LINE = 4 * 1024 * 1024


class _Signal(Enum):
    NEED_DATA = "need_data"
    END = "end"


NEED_DATA = _Signal.NEED_DATA
END = _Signal.END  # the stream ended cleanly at an event boundary


@dataclass(frozen=True, kw_only=True)
class Message:
    """One dispatched event: its ``data`` lines joined with newlines, and its ``event`` type."""

    data: str
    event: str = "message"


@dataclass(frozen=True, kw_only=True)
class Comment:
    """A comment line (``:...``): llama-server's keep-alive."""

    text: str


SSEEvent = Message | Comment


class SSEParser:
    def __init__(self, max_line: int = MAX_LINE):
        self._max_line = max_line
        self._buffer = bytearray()
        self._events: deque[SSEEvent] = deque()
        self._data: list[str] = []
        self._event_type = ""
        self._after_cr = False  # the last byte was \r: a following \n belongs to it
        self._ended = False
        self._broken = False

    def feed(self, data: bytes) -> None:
        if self._broken:
            raise BadEventStream("the SSE parser is broken by an earlier error")
        if self._ended:
            raise BadEventStream("data fed after the end of the stream")
        if not data:
            self._ended = True
            return
        self._buffer += data
        self._split_lines()

    def next_event(self) -> SSEEvent | _Signal:
        if self._events:
            return self._events.popleft()
        if not self._ended:
            return NEED_DATA
        if self._buffer or self._data or self._event_type:
            self._broken = True
            raise BadEventStream("the stream ended in the middle of an event")
        return END

    def _split_lines(self) -> None:
        start = 0
        buffer = self._buffer
        if self._after_cr and buffer[:1] == b"\n":
            start = 1
        self._after_cr = False
        next_cr = buffer.find(b"\r", start)
        while True:
            if 0 <= next_cr < start:
                next_cr = buffer.find(b"\r", start)
            next_lf = buffer.find(b"\n", start)
            ends = [i for i in (next_lf, next_cr) if i >= 0]
            if not ends:
                break
            end = min(ends)
            self._line(bytes(buffer[start:end]))
            if buffer[end : end + 1] == b"\r":
                if end + 1 == len(buffer):
                    self._after_cr = True
                elif buffer[end + 1 : end + 2] == b"\n":
                    end += 1
            start = end + 1
        del buffer[:start]
        if len(buffer) > self._max_line:
            self._broken = True
            raise BadEventStream(f"an SSE line is longer than {self._max_line} bytes")

    def _line(self, raw: bytes) -> None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._broken = True
            raise BadEventStream(f"an SSE line is not UTF-8: {exc}") from None
        if not line:
            self._dispatch()
            return
        if line.startswith(":"):
            self._events.append(Comment(text=line[1:]))
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        # "id", "retry" and unknown fields are ignored, as the SSE standard says.

    def _dispatch(self) -> None:
        if self._data:
            self._events.append(
                Message(data="\n".join(self._data), event=self._event_type or "message")
            )
        self._data = []
        self._event_type = ""
