"""A fake loopd for bxctl's tests: serves loop.sock with bxcore's frame codec and the body models
of bxcore.protocol.loop (the spec), answering each connection's turn with scripted frames."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn


class FakeLoopd:
    def __init__(self, path: Path, answers: list[list[Frame]]):
        self.path = path
        self.answers = list(answers)
        self.turns: list[Turn] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakeLoopd:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while self.answers:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with SyncFrameSocket(connection, wire.TO_LOOPD) as channel:
                self.turns.append(channel.read(timeout=5).parse(Turn))
                for frame in self.answers.pop(0):
                    channel.write(frame)


def event(body) -> Frame:
    return Frame.of(wire.TURN_EVENT, wire.TurnEvent(event=body), final=False)


def done(content: str) -> Frame:
    usage = wire.TurnUsage(cache_n=5, prompt_n=3, predicted_n=2, reasoning_tokens=0,
                           thinking_capped=False)
    return Frame.of(wire.TURN_DONE, wire.TurnDone(content=content, usage=usage), final=True)


def error(code: str, message: str) -> Frame:
    return Frame.of(wire.ERROR, wire.WireError.model_validate({"code": code, "message": message}),
                    final=True)
