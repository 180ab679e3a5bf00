"""The tool port: the one way the turn loop reaches a tool.

loopd holds no authority. Every call it does not answer itself (``find_tool``, ``call_tool``'s
lookup) goes through a port: the product's is ``BrokerPort`` over broker.sock; tests hand the
loop a double of their own. The loop knows only this protocol.
"""

from __future__ import annotations

from typing import Protocol

from bxcore.tools import ToolRequest, ToolResponse

from ..inference.api import EventSink


class ToolPort(Protocol):
    async def call(self, request: ToolRequest, events: EventSink) -> ToolResponse:
        """Run one call and answer it. Never raises for the tool's own failure: a tool that
        fails, is denied or cannot be reached still answers, with a status and a text the model
        reads. ``events`` carries channel statuses (e.g. an approval being waited for)."""
        ...

