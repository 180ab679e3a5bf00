"""The dialectic chat stream of Honcho v3, as a pure decoder (bytes in, text out).

``POST /v3/workspaces/{w}/peers/{p}/chat`` with ``stream: true`` answers ``text/event-stream``::

    data: {"delta": {"content": "STUB-LLM: "}, "done": false}

    data: {"done": true}

(``honcho-chat-stream.http``). A real server that fails behind the stream answers 200 with an
empty body, so an end without ``done`` is an error, never an empty answer.
"""

from __future__ import annotations

import json

from bxcore.errors import BadEventStream
from bxcore.sse import NEED_DATA, Message, SSEParser

from ..errors import HonchoBadResponse

MAX_LINE = 1024 * 1024


class ChatStreamDecoder:
    """Honcho's events, read by bxcore's SSE parser, to the dialectic's text."""

    def __init__(self) -> None:
        self._parser = SSEParser(max_line=MAX_LINE)
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
        self._parse(data)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def _parse(self, data: bytes) -> None:
        try:
            self._parser.feed(data)
            while not self._done and (event := self._parser.next_event()) is not NEED_DATA:
                if isinstance(event, Message):
                    self._event(event.data)
        except BadEventStream as exc:
            raise HonchoBadResponse(f"Honcho chat stream: {exc}") from None

    def _event(self, data: str) -> None:
        try:
            value = json.loads(data)
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
            # The real server streams 200 with no body for any failure behind the stream: an
            # unknown workspace or peer (404 without streaming), a model that failed (500).
            raise HonchoBadResponse("Honcho answered the chat with an empty stream (the "
                                    "workspace or peer may not exist there, or its model failed)")
        self._parse(b"\n\n")  # a last event the server did not end with a blank line
        if not self._done:
            raise HonchoBadResponse("Honcho's chat stream ended before 'done'")
