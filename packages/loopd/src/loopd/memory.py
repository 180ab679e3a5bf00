"""loopd's side of memory.sock (docs/memory.md, "What loopd must call").

- ``identity(session, epoch)``: memoryd's identity snapshot for a new epoch's baseline (soul.md,
  memory.md, user.md, each with how full it is, checked again by memoryd's sanitizer), rendered
  as text. memoryd freezes it per (session, epoch); loopd writes it into the epoch's baseline
  file, which replay reads, never memoryd again.
- ``turn_finished``: the records one turn appended, sent after the turn, in the background. A
  lost report loses nothing: memoryd catches up from the session logs (at start, and whenever a
  report's ``first_line`` is not the line after what it has indexed).

``MemoryLink`` speaks to memoryd; ``IdentityFiles`` is ``[loop] memory = "off"``: the
``[baseline] identity`` files, and nobody to tell.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from bxcore.errors import BoxmakerError, FrameError, WireError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.memory_tool import split_entries
from bxcore.protocol import memory as wire
from bxcore.protocol.memory import IDENTITY_ORDER, IdentityFile, IdentitySnapshot, TurnFinished
from bxcore.sanitizer import Refused, check

from .baseline import Identity, IdentityPart, read_identity_files
from .budget import MODEL_WRITTEN
from .errors import MemoryUnavailable
from .log import Record

log = logging.getLogger("loopd")

WITHHELD_REASON_REFUSED = "it failed memoryd's check; memoryd's log says why"
TEXT_REFUSED = "it failed loopd's sanitizer check when the baseline was built"

CONNECT_TIMEOUT = 5.0  # seconds; memoryd is local
ANSWER_TIMEOUT = 30.0  # seconds for one answer; memoryd reads three small files or indexes a turn


class Memory(Protocol):
    async def identity(self, session: str, epoch: int) -> Identity:
        """The identity of the session's new epoch, file by file (none: no text). Raises
        MemoryUnavailable when it cannot be had: the epoch must not start without it."""
        ...

    def turn_finished(self, session: str, epoch: int, first_line: int,
                      records: Sequence[Record]) -> None:
        """Report a finished turn without waiting for it; never raises."""
        ...

    async def aclose(self) -> None:
        """Wait for the reports still in flight (each has its own timeouts)."""
        ...


class MemoryLink:
    def __init__(self, socket: Path, *, connect_timeout: float = CONNECT_TIMEOUT,
                 answer_timeout: float = ANSWER_TIMEOUT):
        self._socket = socket
        self._connect_timeout = connect_timeout
        self._answer_timeout = answer_timeout
        self._reports: set[asyncio.Task[None]] = set()

    async def identity(self, session: str, epoch: int) -> Identity:
        request = wire.IdentityRequest(session=session, epoch=epoch)
        try:
            frame = await self._ask(Frame.of(wire.IDENTITY_REQUEST, request, final=True))
            if frame.kind == wire.ERROR:
                error = frame.parse(WireError)
                raise MemoryUnavailable(f"memoryd refused the identity request: "
                                        f"{error.code}: {error.message}")
            if frame.kind != wire.IDENTITY_SNAPSHOT:
                raise FrameError(f"memoryd answered {frame.kind!r} to identity_request")
            snapshot = frame.parse(IdentitySnapshot)
        except MemoryUnavailable:
            raise
        except BoxmakerError as exc:
            raise MemoryUnavailable(f"memoryd: {exc}") from exc
        if snapshot.session != session or snapshot.epoch != epoch:
            raise MemoryUnavailable(
                f"memoryd answered for session {snapshot.session} epoch {snapshot.epoch}, "
                f"not {session} epoch {epoch}"
            )
        names = tuple(file.name for file in snapshot.files)
        if names != IDENTITY_ORDER:
            raise MemoryUnavailable(f"memoryd's snapshot lists {names}, not {IDENTITY_ORDER}")
        return Identity(tuple(IdentityPart(name=file.name, text=render_identity_file(file),
                                           model_written=file.name in MODEL_WRITTEN,
                                           entries=tuple(split_entries(file.text)))
                              for file in checked(snapshot).files))

    def turn_finished(self, session: str, epoch: int, first_line: int,
                      records: Sequence[Record]) -> None:
        if not records:
            return
        body = TurnFinished(session=session, epoch=epoch, first_line=first_line,
                            records=list(records))
        task = asyncio.get_running_loop().create_task(self._report(body))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _report(self, body: TurnFinished) -> None:
        try:
            frame = await self._ask(Frame.of(wire.TURN_FINISHED, body, final=True))
        except BoxmakerError as exc:
            log.info("memoryd did not take session %s's turn (it catches up from the log): %s",
                     body.session, exc)
            return
        if frame.kind != wire.TURN_RECORDED:
            log.info("memoryd answered %s to session %s's turn: %s", frame.kind, body.session,
                     frame.body)

    async def _ask(self, request: Frame) -> Frame:
        stream = await FrameStream.connect(self._socket, wire.FROM_MEMORYD, sends=wire.TO_MEMORYD,
                                           timeout=self._connect_timeout)
        try:
            await stream.write(request, timeout=self._answer_timeout)
            frame = await stream.read(timeout=self._answer_timeout)
        finally:
            await stream.close()
        if not frame.final:
            raise FrameError(f"memoryd's {frame.kind!r} frame is not final")
        return frame

    async def aclose(self) -> None:
        if self._reports:
            await asyncio.gather(*self._reports, return_exceptions=True)


def render_identity_file(file: IdentityFile) -> str:
    """A file's part of the system prompt: a heading that says how full it is, then its text or
    why it is withheld. An empty or withheld file still gets its heading, so the model knows it
    exists and how much room is left."""
    heading = f"## {file.name} ({file.used:,} of {file.limit:,} characters, {file.percent}% full)"
    body = file.text.strip() if file.withheld is None else f"[withheld: {file.withheld}]"
    return f"{heading}\n{body}" if body else heading


def checked(snapshot: IdentitySnapshot) -> IdentitySnapshot:
    """The snapshot with every text it puts into the prompt checked once more, here where the
    prompt is built: a file text, or memoryd's reason for withholding one (which may quote the
    very markup it refused), that fails the sanitizer is replaced by a fixed notice."""
    files = []
    for file in snapshot.files:
        if file.withheld is not None and isinstance(check(file.withheld), Refused):
            file = file.model_copy(update={"withheld": WITHHELD_REASON_REFUSED})
        elif file.withheld is None and isinstance(check(file.text), Refused):
            file = file.model_copy(update={"text": "", "withheld": TEXT_REFUSED})
        files.append(file)
    return snapshot.model_copy(update={"files": files})


class IdentityFiles:
    """``[loop] memory = "off"``: identity from plain files, read afresh for each epoch."""

    def __init__(self, paths: Sequence[Path]):
        self._paths = tuple(paths)

    async def identity(self, session: str, epoch: int) -> Identity:
        return read_identity_files(self._paths)

    def turn_finished(self, session: str, epoch: int, first_line: int,
                      records: Sequence[Record]) -> None:
        return None

    async def aclose(self) -> None:
        return None
