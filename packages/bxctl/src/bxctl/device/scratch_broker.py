"""The scratch loopd's broker.sock for the on-device conversation: ``clock`` answered with the
time and ``echo`` with its text, one call per connection, as brokerd serves them. It stands in
for brokerd only in ``bxctl verify-device``'s scratch directory, where no grant, sandbox or
owner's state exists: section 10's conversation checks the loop's records and the cache, and a
model that gets an answer moves on (answered "brokerd failed", a small model repeats the call
until the turn limit ends the turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

from bxcore.errors import BoxmakerError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import broker
from bxcore.tools import CLOCK, ToolRequest, ToolResponse, plain_response
from bxcore.util import now_rfc3339

ECHO_NAME = "echo"


def answer(request: ToolRequest) -> ToolResponse:
    """The answer to one call (pure but for the clock's time)."""
    if request.tool == CLOCK.name:
        return plain_response("ok", now_rfc3339())
    if request.tool == ECHO_NAME:
        try:
            text = json.loads(request.arguments).get("text")
        except (ValueError, AttributeError):
            text = None
        if isinstance(text, str):
            return plain_response("ok", text)
        return plain_response("failed", 'echo needs {"text": "<string>"}')
    return plain_response("failed", f"no tool {request.tool!r} in verify-device's scratch setup")


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    stream = FrameStream(reader, writer, broker.TO_BROKERD, sends=broker.FROM_BROKERD)
    try:
        request = (await stream.read(30)).parse(ToolRequest)
        await stream.write(Frame.of(broker.TOOL_RESPONSE, answer(request), final=True))
    except BoxmakerError:
        pass  # loopd hung up; its own log says why
    finally:
        await stream.close()


@contextlib.contextmanager
def scratch_broker(socket: Path) -> Iterator[None]:
    """broker.sock at ``socket``, served from a thread with its own event loop."""
    socket.parent.mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_unix_server(_serve_one, path=str(socket)))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()
