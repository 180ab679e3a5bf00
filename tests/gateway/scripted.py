"""Scripted peers on the real sockets: a loopd on loop.sock and a brokerd on gateway.sock.

They speak the real frames (bxcore.protocol.loop and .approval) with the real codec; only their
behaviour is scripted: answers, session_busy, and the session rules of docs/design.md
(``resume: false`` needs a new session, ``true`` an existing one).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from bxcore.errors import ErrorCode, StreamEnded, WireError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import approval, loop
from bxcore.protocol.loop import Content, Progress, ToolCallStarted, Turn, TurnDone, TurnEvent


class ScriptedLoop:
    def __init__(self, path: Path):
        self.path = path
        self.turns: list[Turn] = []
        self.sessions: set[str] = set()
        self.busy_next = 0  # answer session_busy to this many turns
        self.answer = lambda turn: f"echo: {turn.content}"
        self.taint: dict[str, object] | None = None  # the session's taint turn_done says
        self.steps: asyncio.Queue[None] | None = None  # set: one event per put (a slow turn)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(self._handle, str(self.path))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer, kinds=loop.TO_LOOPD)
        try:
            turn = (await stream.read(timeout=5)).parse(Turn)
            if self.busy_next:
                self.busy_next -= 1
                await _error(stream, ErrorCode.SESSION_BUSY, "another turn is running")
                return
            if turn.resume and turn.session not in self.sessions:
                await _error(stream, ErrorCode.NO_SUCH_SESSION, turn.session)
                return
            if not turn.resume and turn.session in self.sessions:
                await _error(stream, ErrorCode.SESSION_EXISTS, turn.session)
                return
            self.sessions.add(turn.session)
            self.turns.append(turn)
            answer = self.answer(turn)
            for event in (Progress(total=100, cache=50, processed=100),
                          ToolCallStarted(name="clock"), Content(text=answer[:5])):
                if self.steps is not None:
                    await self.steps.get()
                await stream.write(Frame.of(loop.TURN_EVENT, TurnEvent(event=event), final=False))
            usage = {"cache_n": 50, "prompt_n": 100, "predicted_n": 10, "reasoning_tokens": 0,
                     "thinking_capped": False}
            done = {"content": answer, "usage": usage, "taint": self.taint}
            await stream.write(Frame.of(loop.TURN_DONE, TurnDone.model_validate(done),
                                        final=True))
        except StreamEnded:
            pass
        finally:
            await stream.close()


async def _error(stream: FrameStream, code: ErrorCode, message: str) -> None:
    await stream.write(Frame.of(loop.ERROR, WireError(code=code, message=message), final=True))


async def ask_approval(socket: Path, request: approval.ApprovalRequest) -> Frame:
    """brokerd's side: one connection per approval; returns the final frame."""
    stream = await FrameStream.connect(socket, kinds=approval.FROM_GATEWAYD)
    try:
        await stream.write(Frame.of(approval.APPROVAL_REQUEST, request, final=False))
        return await stream.read(timeout=30)
    finally:
        await stream.close()
