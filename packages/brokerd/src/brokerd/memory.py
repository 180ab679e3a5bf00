"""Memory tool calls go to memoryd over ``memory.sock``, with the session's taint."""

from __future__ import annotations

from pathlib import Path

from bxcore.errors import BoxmakerError, ErrorCode, WireError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import memory as wire
from bxcore.tools import DataClass, ToolRequest, ToolResponse, plain_response

from .policy import Decision
from .taint import Taint

# memoryd's own failure may name its files, an edit's number or bytes of a journal entry, which
# count or hold other sessions' writes (the attack on issue 31): the model is told only that
# it failed; memoryd's log has the rest. A refusal of the call itself is told as memoryd says it.
MEMORYD_FAILED = "memoryd failed on its side (its log says why)"


def unavailable(why: str) -> ToolResponse:
    return plain_response("failed", f"Memory is unavailable: {why}")


class MemoryClient:
    def __init__(self, socket: Path, timeout: float = 120.0):
        self._socket = socket
        self._timeout = timeout

    async def call(self, decision: Decision, request: ToolRequest, taint: Taint) -> ToolResponse:
        decision.authorize()
        body = wire.MemoryCall.model_validate({
            "request": request, "class": taint.highest or DataClass.PUBLIC,
            "untrusted": taint.untrusted,
        })
        try:
            stream = await FrameStream.connect(self._socket, wire.FROM_MEMORYD,
                                               sends=wire.TO_MEMORYD)
        except BoxmakerError as exc:
            return unavailable(str(exc))
        try:
            await stream.write(Frame.of(wire.MEMORY_CALL, body, final=True))
            frame = await stream.read(self._timeout)
            if frame.kind == wire.TOOL_RESPONSE:
                return frame.parse(ToolResponse)
            if frame.kind == wire.ERROR:
                error = frame.parse(WireError)
                return unavailable(MEMORYD_FAILED if error.code is ErrorCode.INTERNAL
                                   else error.message)
            return unavailable(f"memoryd answered {frame.kind!r}")
        except BoxmakerError as exc:
            return unavailable(str(exc))
        finally:
            await stream.close()
