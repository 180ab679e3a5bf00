"""``BrokerPort``: the tool port over brokerd's ``broker.sock``, one connection per call.

loopd sends ``tool_call`` (the ToolRequest) and reads until a final frame: ``tool_waiting``
frames (an approval is pending, or the call is still running) go to the channel as
``tool_waiting`` events with the same fields; ``tool_response``
is the answer; an ``error`` frame, a broker that cannot be reached, or a connection that breaks
becomes a ``failed`` answer whose text says why. So the turn goes on and the log stays whole:
every tool call has its ToolResult, and the model learns that the tool did not run.

A ``delegate_run`` frame (brokerd allowed a ``delegate`` call) starts the child session through
``children`` while the frames go on being read; the child's answer goes back as
``delegate_done``. Whatever ends this call (its answer, a broken connection, the parent's turn
being cancelled) cancels a child that is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Protocol

from bxcore.errors import BoxmakerError, FrameError, WireError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import broker
from bxcore.protocol.delegate import DELEGATE_DONE, DELEGATE_RUN, DelegateDone, DelegateRun
from bxcore.protocol.loop import ToolWaitingEvent
from bxcore.tools import ToolRequest, ToolResponse, plain_response

from ..inference.api import EventSink

CONNECT_TIMEOUT = 10.0  # seconds; brokerd is local
# No read timeout: a call may wait for the owner's approval, which brokerd expires itself, or run
# as long as its grant's timeout_s allows.


class Children(Protocol):
    async def run(self, order: DelegateRun) -> DelegateDone:
        """Run the child session's one turn; its answer, or why it has none."""
        ...


class BrokerPort:
    def __init__(self, socket: Path, *, connect_timeout: float = CONNECT_TIMEOUT,
                 children: Children | None = None):
        self._socket = socket
        self._connect_timeout = connect_timeout
        self._children = children

    async def call(self, request: ToolRequest, events: EventSink) -> ToolResponse:
        try:
            return await self._call(request, events)
        except BoxmakerError as exc:
            return plain_response("failed", f"The tool did not run: brokerd failed: {exc}")

    async def _call(self, request: ToolRequest, events: EventSink) -> ToolResponse:
        stream = await FrameStream.connect(
            self._socket, broker.FROM_BROKERD, timeout=self._connect_timeout,
            sends=broker.TO_BROKERD,
        )
        child: asyncio.Task[None] | None = None
        try:
            await stream.write(Frame.of(broker.TOOL_CALL, request, final=False))
            while True:
                frame = await stream.read()
                if frame.kind == DELEGATE_RUN and not frame.final and child is None:
                    order = frame.parse(DelegateRun)
                    child = asyncio.create_task(self._run_child(stream, order))
                    continue
                answer = await _handle(frame, events)
                if answer is not None:
                    return answer
        finally:
            if child is not None and not child.done():
                child.cancel()
            if child is not None:
                with contextlib.suppress(asyncio.CancelledError, BoxmakerError, TimeoutError):
                    await child
            await stream.close()

    async def _run_child(self, stream: FrameStream, order: DelegateRun) -> None:
        if self._children is None:
            done = DelegateDone(status="failed", content="This loopd runs no subagents.")
        else:
            done = await self._children.run(order)
        await stream.write(Frame.of(DELEGATE_DONE, done, final=True))


async def _handle(frame: Frame, events: EventSink) -> ToolResponse | None:
    if frame.kind == broker.TOOL_WAITING and not frame.final:
        waiting = frame.parse(broker.ToolWaiting)
        await events(ToolWaitingEvent.model_validate(waiting.model_dump()))
        return None
    if frame.kind == broker.TOOL_RESPONSE and frame.final:
        return frame.parse(ToolResponse)
    if frame.kind == broker.ERROR and frame.final:
        error = frame.parse(WireError)
        reason = f"{error.code}: {error.message}"
        return plain_response("failed", f"The tool did not run: brokerd: {reason}")
    raise FrameError(f"frame {frame.kind!r} with final={frame.final} is out of place")
