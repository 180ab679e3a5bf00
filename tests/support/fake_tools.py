"""``FakeTools``: the design's in-process tool port, two tools: ``clock`` (core) and ``echo``
(not core). A test double, kept out of the product (issue 36): it reads nothing and reaches
nothing.

A test that builds a loop in process hands ``FakeTools`` to ``ToolRunner`` as its port. A test
that goes through loopd's wiring or runs ``loopd serve`` configures the product's broker port
(``loop_section``: a registry of these two tools, memory off) and answers its broker.sock with
``FakeBroker``: the real ``BrokerPort`` then carries every call, and loopd knows no double.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from bxcore.chat import ToolSchema
from bxcore.errors import BoxmakerError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import broker
from bxcore.tools import CLOCK, ToolRequest, ToolResponse, plain_response
from bxcore.util import now_rfc3339
from loopd.inference.api import EventSink

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


def registry_file(directory: Path) -> Path:
    """``clock`` and ``echo`` as ``bx-tool schemas`` writes a registry."""
    path = directory / "fake-registry.json"
    path.write_text(json.dumps([s.model_dump(mode="json") for s in FakeTools.schemas]) + "\n")
    return path


def loop_keys(directory: Path) -> str:
    """``[loop]``'s keys for a loopd whose tool calls ``FakeBroker`` answers: the two tools'
    registry (written under ``directory``) and no memoryd; the port is the product's, brokerd's."""
    return f'registry = "{registry_file(directory)}"\nmemory = "off"\n'


def loop_section(directory: Path) -> str:
    return "[loop]\n" + loop_keys(directory)


async def _answer(tools: FakeTools, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    stream = FrameStream(reader, writer, broker.TO_BROKERD, sends=broker.FROM_BROKERD)
    try:
        request = (await stream.read(30)).parse(ToolRequest)

        async def ignore(event: object) -> None:
            return None

        answer = await tools.call(request, ignore)
        await stream.write(Frame.of(broker.TOOL_RESPONSE, answer, final=True))
    except BoxmakerError:
        pass  # the caller hung up or sent garbage: its own test says what it wanted
    finally:
        await stream.close()


class FakeBroker:
    """``FakeTools`` on a broker.sock, one call per connection as brokerd serves them."""

    def __init__(self, socket: Path, tools: FakeTools | None = None):
        self.socket = socket
        self.tools = tools or FakeTools()

    async def start(self) -> asyncio.AbstractServer:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        return await asyncio.start_unix_server(
            lambda r, w: _answer(self.tools, r, w), path=str(self.socket))

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[FakeTools]:
        server = await self.start()
        try:
            yield self.tools
        finally:
            server.close()
            await server.wait_closed()

    @contextlib.contextmanager
    def in_thread(self) -> Iterator[FakeTools]:
        """Served from a thread with its own event loop: for a ``loopd serve`` process."""
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(self.start())
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            yield self.tools
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            server.close()
            loop.run_until_complete(server.wait_closed())
            loop.close()
