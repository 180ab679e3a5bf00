"""The sessions loopd serves: one turn at a time each (docs/design.md, "The channel protocol").
``Sessions.run`` returns the turn's ``TurnDone`` or raises: a LoopError (a bxcore Refused) with
the wire code the channel is answered with, or any other exception, a failure answered
``internal``; sockets.py reads the channel's ``turn`` and bxcore.daemon.answering writes the
answer either way. A subagent's turn (subagents.py) comes here too, with no socket.

A registry of per-session locks refuses a second turn on a busy session (SessionBusy,
``session_busy``) at once; the lock is released before the answer or the error leaves ``run``,
so a channel that sends its next turn on reading the final frame is never refused.

Open sessions are kept (their records mirror the log) so a turn does not re-read its log. Before
a kept session is used its log's size is checked; a log that changed under it is read again.

Inside the lock, what comes before and after the turn is the session's core's to decide
(session/core.py): a new session gets its epoch-0 baseline (identity from memoryd); a turn whose
``origin`` the log already holds (a channel's resend, origins.py) is answered again with the
earlier ``turn_done``, or refused (AlreadyTaken, ``bad_request``) if it ended without an answer;
a session due for compaction is compacted and a closed one gets its next epoch (epochs.py). This
file does each action's I/O. After the turn and after a compaction, whatever they ended with,
the records they appended are reported to memoryd in the background, so the final frame never
waits for memoryd.

A new session, and each new epoch, records the serving settings it begins under (``serving``,
read from the server; docs/design.md) beside its logs, so the self-test and ``bxctl
doctor`` can name what changed since. A server that cannot say leaves no record; the turn runs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from bxcore.config.inference import SlotSection
from bxcore.logs import fields
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn
from bxcore.records import EpochEnd, User

from .epochs import COMPACT_INSTRUCTION, Baselines, BaselineSource, EpochSettings, progress_only
from .errors import AlreadyTaken, SessionBusy, SessionExists
from .inference.api import ChatRequest, EventSink
from .inference.errors import InferenceError, SessionFull
from .inference.markers import MarkerBook
from .inference.serving import ServingSettings
from .memory import IdentityFiles, Memory
from .session import SessionCore
from .session.events import (
    Action,
    Answer,
    AnswerAgain,
    CloseEpoch,
    CountSummaryRoom,
    CreateSession,
    EpochClosed,
    EpochLog,
    EpochOpened,
    LogRead,
    NewAsked,
    OpenEpoch,
    ReadSession,
    RefuseAgain,
    RequestSummary,
    ResumeAsked,
    RunTurn,
    SessionEvent,
    SummaryFailed,
    SummaryRoom,
    SummaryTooLong,
    SummaryWritten,
    TurnFinished,
)
from .store import Session, SessionStore
from .turn import Loop, record_completion, run_turn
from .turn.shell import answer_taint

log = logging.getLogger("loopd")

KEPT_SESSIONS = 64  # open sessions kept in memory; the least recently used is dropped


class Sessions:
    def __init__(
        self, *, store: SessionStore, loop: Loop, new_baseline: BaselineSource,
        slots: SlotSection, memory: Memory | None = None,
        epochs: EpochSettings | None = None, kept_sessions: int = KEPT_SESSIONS,
        serving: Callable[[], Awaitable[ServingSettings]] | None = None,
        markers: MarkerBook | None = None,
    ):
        self.store = store
        self.epochs = epochs or EpochSettings()
        # tool results capped to the slot's room above compaction (epochs.py)
        self.loop = dataclasses.replace(loop, settings=self.epochs.capped(loop.settings))
        self.new_baseline = new_baseline
        self._slots = slots
        self.memory = memory or IdentityFiles(())
        self._busy: set[str] = set()
        self._kept: OrderedDict[str, Session] = OrderedDict()
        self._kept_max = kept_sessions
        self._serving = serving
        self._markers = markers

    async def run(self, turn: Turn, events: EventSink, *, rounds: int | None = None
                  ) -> wire.TurnDone:
        """One turn's answer (or its error, module docstring). The session's lock is held only
        inside. ``rounds`` lowers the turn's limit of tool rounds (a subagent's task may ask
        for fewer)."""
        if turn.session in self._busy:
            raise SessionBusy(f"session {turn.session} is running a turn")
        self._busy.add(turn.session)
        try:
            return await self._run_locked(turn, _Shell(self, turn, events, self._loop_with(rounds)))
        finally:
            self._busy.discard(turn.session)

    def _loop_with(self, rounds: int | None) -> Loop:
        limit = self.loop.settings.tool_iterations
        if rounds is None or rounds >= limit:
            return self.loop
        return dataclasses.replace(
            self.loop, settings=dataclasses.replace(self.loop.settings, tool_iterations=rounds))

    async def _run_locked(self, turn: Turn, shell: _Shell) -> wire.TurnDone:
        core = SessionCore(self.epochs)
        asked = ResumeAsked if turn.resume else NewAsked
        action = core.send(asked(origin=turn.origin))
        try:
            while True:
                match action:
                    case Answer():
                        return shell.answered(action.answer)
                    case AnswerAgain() | RefuseAgain():
                        return shell.answered_again(action)
                    case _:
                        action = core.send(await shell.do(action))
        except (SessionBusy, SessionExists, AlreadyTaken):
            raise
        except Exception as exc:  # what was kept of the session may no longer be its files
            self._kept.pop(turn.session, None)
            exc.add_note(f"session {turn.session}")  # for the traceback a failure is logged with
            raise

    def slot_for(self, kind: wire.SessionKind) -> int:
        """A session's kind picks its slot; the slot is then fixed in its session_start."""
        return self._slots.main if kind == "main" else self._slots.background

    def kept(self, session_id: str) -> Session | None:
        """The copy kept of the session, if its log is still exactly what it mirrors."""
        kept = self._kept.get(session_id)
        return kept if kept is not None and kept.is_current() else None

    def keep(self, session: Session) -> None:
        self._kept[session.id] = session
        self._kept.move_to_end(session.id)
        while len(self._kept) > self._kept_max:
            self._kept.popitem(last=False)

    def used(self, session: Session) -> None:
        """``session`` takes a turn: its marker is the most recently used (inference/markers.py)."""
        if self._markers is not None:
            self._markers.used(session.id, session.marker, session.opening)

    async def new_marker(self, session: str, opening: str) -> str | None:
        """A new session's marker, its first token apart from the recent sessions'
        (inference/markers.py); None (the legacy form, which shares nothing with other sessions)
        without a book, when the recent sessions hold every key, or when the server cannot
        tokenize."""
        if self._markers is None:
            return None
        try:
            return await self._markers.new(session, opening)
        except InferenceError as exc:
            log.warning("session %s: no marker (the server did not tokenize: %s); its prompt "
                        "starts with a legacy one and shares no baseline", session, exc)
            return None

    def drop(self, session_id: str) -> None:
        self._kept.pop(session_id, None)

    async def record_serving(self, session: Session) -> None:
        if self._serving is None:
            return
        try:
            self.store.record_serving(session, await self._serving())
        except InferenceError as exc:
            log.warning("session %s: the serving settings were not recorded: %s", session.id, exc,
                        extra=fields(session=session.id, epoch=session.epoch))


class _Shell:
    """The I/O of one turn's way through its session: each action the core returns, done."""

    def __init__(self, sessions: Sessions, turn: Turn, events: EventSink, loop: Loop):
        self._sessions = sessions
        self._turn = turn
        self._events = events
        self._loop = loop
        self._open: Session | None = None

    @property
    def _session(self) -> Session:
        assert self._open is not None, "the core reads the session before anything else"
        return self._open

    async def do(self, action: Action) -> SessionEvent:
        match action:
            case CreateSession():
                return await self._create()
            case ReadSession():
                return self._read()
            case CountSummaryRoom():
                return SummaryRoom(cap=await self._summary_cap())
            case RequestSummary():
                return await self._summary(action)
            case CloseEpoch():
                return await self._close(action)
            case OpenEpoch():
                return await self._open_epoch(action.summary)
            case RunTurn():
                return await self._run(action.uncompacted)
        raise AssertionError(f"{action!r} is final: the session's run ends on it")

    async def _create(self) -> LogRead:
        sessions, turn = self._sessions, self._turn
        if sessions.store.exists(turn.session):
            raise SessionExists(f"session {turn.session} exists already")
        baseline = await sessions.new_baseline(turn.session, 0, None)
        session = sessions.store.create(
            turn.session, baseline, slot=sessions.slot_for(turn.session_kind),
            time=self._loop.now(), marker=await sessions.new_marker(turn.session, turn.content))
        await sessions.record_serving(session)
        return self._opened(session)

    def _read(self) -> LogRead:
        session = self._sessions.kept(self._turn.session)
        return self._opened(session or self._sessions.store.open(self._turn.session))

    def _opened(self, session: Session) -> LogRead:
        self._open = session
        self._sessions.keep(session)
        self._sessions.used(session)
        return LogRead(log=_epoch_log(session))

    async def _summary_cap(self) -> int | None:
        """What the summary may cost (``Baselines.summary_cap``); None (``summary_tokens``)
        from a baseline source that cannot count, or a server that cannot say now."""
        source, session = self._sessions.new_baseline, self._session
        if not isinstance(source, Baselines):
            return None
        try:
            return await source.summary_cap(session.baseline, self._sessions.epochs.summary_tokens)
        except InferenceError as exc:
            log.warning("session %s: the summary's room cannot be counted: %s", session.id, exc)
            return None

    async def _summary(self, action: RequestSummary) -> SessionEvent:
        session = self._session
        request = ChatRequest(
            messages=action.messages, tools=tuple(session.baseline.tools), slot=session.slot,
            session=session.id, marker=session.marker, max_tokens=action.max_tokens,
            tool_choice="none", thinking=False,
        )
        try:
            return SummaryWritten(completion=await self._loop.inference.chat(
                request, progress_only(self._events)))
        except SessionFull as exc:
            log.warning("session %s: the compaction request of %d messages does not fit the "
                        "slot; asking with less of epoch %d: %s", session.id,
                        len(action.messages) - 1, session.epoch, exc)
            return SummaryTooLong()
        except InferenceError as exc:
            return SummaryFailed(message=str(exc))

    async def _close(self, action: CloseEpoch) -> EpochClosed:
        session, loop = self._session, self._loop
        if action.notice is not None:
            log.warning("session %s: epoch %d closes with a notice in place of a summary: %s",
                        session.id, session.epoch, action.notice.splitlines()[0])
        start = len(session.records)
        session.append(User(time=loop.now(), content=COMPACT_INSTRUCTION))
        await record_completion(loop, session, action.summary, progress_only(self._events))
        session.append(EpochEnd(time=loop.now(), next_epoch=session.epoch + 1,
                                summary=action.notice))
        self._report(start)
        return EpochClosed(log=_epoch_log(session))

    async def _open_epoch(self, summary: str) -> EpochOpened:
        sessions, closed = self._sessions, self._session
        sessions.drop(closed.id)
        baseline = await sessions.new_baseline(closed.id, closed.epoch + 1, summary)
        session = sessions.store.start_epoch(closed, baseline, time=self._loop.now())
        log.info("session %s: epoch %d started", session.id, session.epoch,
                 extra=fields(session=session.id, epoch=session.epoch))
        await sessions.record_serving(session)
        self._open = session
        sessions.keep(session)
        return EpochOpened()

    async def _run(self, uncompacted: str | None) -> TurnFinished:
        """Run the turn; whatever it ends with, report what it appended to memoryd."""
        session, turn = self._session, self._turn
        if uncompacted is not None:
            log.warning("session %s: %s; the turn runs in epoch %d", session.id, uncompacted,
                        session.epoch)
        start = len(session.records)
        try:
            return TurnFinished(answer=await run_turn(
                self._loop, session, turn.content, self._events, turn.tool_choice,
                thinking=turn.thinking, origin=turn.origin,
            ))
        finally:
            self._report(start)

    def _report(self, start: int) -> None:
        session = self._session
        self._sessions.memory.turn_finished(session.id, session.epoch, start + 1,
                                            session.records[start:])

    def answered(self, done: wire.TurnDone) -> wire.TurnDone:
        session = self._session
        log.info("session %s: turn done in epoch %d: %d prompt tokens, %d of them from the "
                 "cache, %d generated", session.id, session.epoch, done.usage.prompt_n,
                 done.usage.cache_n, done.usage.predicted_n,
                 extra=fields(session=session.id, epoch=session.epoch))
        return done

    def answered_again(self, action: AnswerAgain | RefuseAgain) -> wire.TurnDone:
        """A resent turn is not run again: its earlier answer (with the session's taint now,
        never less than then), or AlreadyTaken saying it has none."""
        turn = self._turn
        log.info("session %s: origin %s was taken at line %d; not run again",
                 turn.session, turn.origin, action.line, extra=fields(session=turn.session))
        if isinstance(action, RefuseAgain):
            raise AlreadyTaken(
                f"session {turn.session}: the turn from {turn.origin} was already taken (log "
                f"line {action.line}) and ended without an answer; it is not run twice")
        return action.answer.model_copy(update={"taint": answer_taint(self._session)})


def _epoch_log(session: Session) -> EpochLog:
    return EpochLog(records=session.records, messages=session.messages,
                    opening=len(session.baseline.opening()))
