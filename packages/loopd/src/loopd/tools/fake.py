"""``FakeTools``: the design's in-process port, two tools: ``clock`` (core), ``echo`` (not core).

A test double: it reads nothing and reaches nothing (threat model note: the port is where
brokerd takes over). Only an explicit ``[loop] tools = "fake"`` chooses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from bxcore.chat import ToolSchema
from bxcore.tools import CLOCK, ToolRequest, ToolResponse, plain_response
from bxcore.util import now_rfc3339

from ..inference.api import EventSink

ECHO = ToolSchema(
    name="echo",
    description="Echo: returns its text argument unchanged.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to return."}},
        "required": ["text"],
    },
)


class FakeTools:
    schemas = (CLOCK, ECHO)

    def __init__(self, now: Callable[[], str] = now_rfc3339):
        self._now = now
        self.requests: list[ToolRequest] = []  # every request the port saw, for tests

    async def call(self, request: ToolRequest, events: EventSink) -> ToolResponse:
        self.requests.append(request)
        if request.tool == CLOCK.name:
            return plain_response("ok", self._now())
        if request.tool == ECHO.name:
            try:
                arguments = json.loads(request.arguments)
            except ValueError:
                arguments = None
            if isinstance(arguments, dict) and isinstance(arguments.get("text"), str):
                return plain_response("ok", arguments["text"])
            return plain_response("failed", 'echo needs {"text": "<string>"}')
        return plain_response("failed", f"no tool {request.tool!r} here")

