"""The dialectic chat stream of Honcho v3, as a pure decoder (bytes in, text out).

``POST /v3/workspaces/{w}/peers/{p}/chat`` with ``stream: true`` answers ``text/event-stream``::

    data: {"delta": {"content": "STUB-LLM: "}, "done": false}

    data: {"done": true}

(``honcho-chat-stream.http``). A real server that fails behind the stream answers 200 with an
empty body, so an end without ``done`` is an error, never an empty answer.
"""

from __future__ import annotations

import json

from ..errors import HonchoBadResponse

MAX_BUFFER = 1024 * 1024


class ChatStreamDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._parts: list[str] = []
        self._done = False
        self._seen_bytes = False

    def feed(self, data: bytes) -> None:
        """Feed bytes; ``feed(b"")`` is the end of the stream. Raises HonchoBadResponse."""
        if self._done:
            return
        if not data:
            self._finish()
            return
        self._seen_bytes = True
        self._buffer += data
        if len(self._buffer) > MAX_BUFFER:
            raise HonchoBadResponse("Honcho chat stream: an event is over 1 MiB")
        while b"\n\n" in self._buffer and not self._done:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            self._event(event)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def _event(self, raw: bytes) -> None:
        data_lines = [
            line[5:].lstrip() for line in raw.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:")
        ]
        if not data_lines:
            return  # a comment or an event without data
        try:
            value = json.loads(b"\n".join(data_lines))
        except ValueError:
            raise HonchoBadResponse("Honcho chat stream: an event's data is not JSON") from None
        if not isinstance(value, dict) or not isinstance(value.get("done"), bool):
            raise HonchoBadResponse("Honcho chat stream: an event without a boolean 'done'")
        delta = value.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            self._parts.append(delta["content"])
        elif delta is not None:
            raise HonchoBadResponse("Honcho chat stream: 'delta' is not {content: string}")
        self._done = value["done"]

    def _finish(self) -> None:
        if not self._seen_bytes:
            raise HonchoBadResponse("Honcho answered the chat with an empty stream")
        if self._buffer.strip():
            self._event(self._buffer)
        if not self._done:
            raise HonchoBadResponse("Honcho's chat stream ended before 'done'")
