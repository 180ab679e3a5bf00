"""A session's life around its turns as a sans-I/O core, as the turn's is (turn/core.py).

Inside the session's lock, before and after one turn: a new session is created or an existing
one read; a resent turn (its ``origin`` in the log, origins.py) is answered again and not run; a
full slot is compacted into a new epoch, and a closed epoch is followed by the next
(epochs.py); then the turn runs. The core reads no disk, asks no model server and reads no
clock: the shell (sessions.py) does each action and answers with the event that says what
happened. Vocabulary in events.py.

    action = core.send(NewAsked(origin=...) | ResumeAsked(origin=...))
    while action is not final: event = <do action>; action = core.send(event)

    action                              answered by
    CreateSession() | ReadSession()     LogRead(log)
    CountSummaryRoom()                  SummaryRoom(cap)
    RequestSummary(messages, max_tokens)  SummaryWritten(completion) | SummaryTooLong()
                                        | SummaryFailed(message)
    CloseEpoch(summary, notice)         EpochClosed(log)
    OpenEpoch(summary)                  EpochOpened()
    RunTurn(uncompacted)                TurnFinished(answer)
    Answer(answer) | AnswerAgain(answer, line) | RefuseAgain(line)   final

The table sees event types, never payloads. ``Resent``, ``CompactionDue``, ``FoundClosed``,
``Ready`` and ``NothingFits`` are the core's own moves, read off the log (the log is the state:
a core that reads the log a crash left takes the step the crashed one had before it):

    IDLE ──NewAsked | ResumeAsked──▶ OPENING ──LogRead──▶ OPEN
    OPEN ──Resent──▶ RESENT                  (first: before compaction moves the turn away)
         ──CompactionDue──▶ COUNTING ──SummaryRoom──▶ SUMMARISING
         ──FoundClosed──▶ STARTING_EPOCH
         ──Ready──▶ RUNNING
    SUMMARISING ⟲SummaryTooLong (fewer messages) ──NothingFits──▶ RUNNING
                ──SummaryFailed──▶ RUNNING   (the turn runs in the old epoch)
                ──SummaryWritten──▶ CLOSING ──EpochClosed──▶ STARTING_EPOCH
    STARTING_EPOCH ──EpochOpened──▶ RUNNING ──TurnFinished──▶ DONE

Each state awaits one kind of action, so the table alone refuses an event that answers none:
``IllegalTransition``, and ERROR for good. An action that fails otherwise (a disk, memoryd, a
turn a limit ended) raises in the shell; the core is then dropped with the session's copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

from bxcore.chat import UserMessage

from ..baseline import ChatMessage
from ..epochs import (
    COMPACT_INSTRUCTION,
    EpochSettings,
    needs_compaction,
    no_summary_notice,
    shows_anything,
    summary_of,
)
from ..machine import Machine
from ..origins import taken
from ..replay import fitting_views
from .events import (
    Action,
    Answer,
    AnswerAgain,
    CloseEpoch,
    CompactionDue,
    CountSummaryRoom,
    CreateSession,
    EpochClosed,
    EpochLog,
    EpochOpened,
    FoundClosed,
    LogRead,
    NewAsked,
    NothingFits,
    OpenEpoch,
    ReadSession,
    Ready,
    RefuseAgain,
    RequestSummary,
    Resent,
    ResumeAsked,
    RunTurn,
    SessionEvent,
    SummaryFailed,
    SummaryRoom,
    SummaryTooLong,
    SummaryWritten,
    TurnFinished,
)


class SessionState(Enum):
    IDLE = "IDLE"
    OPENING = "OPENING"  # the session is being created or read
    OPEN = "OPEN"  # its log is read: the core decides what comes before the turn
    COUNTING = "COUNTING"  # the summary's room is counted
    SUMMARISING = "SUMMARISING"
    CLOSING = "CLOSING"  # the summary is appended with epoch_end
    STARTING_EPOCH = "STARTING_EPOCH"
    RUNNING = "RUNNING"
    DONE = "DONE"
    RESENT = "RESENT"
    ERROR = "ERROR"


S = SessionState
_TABLE: dict[SessionState, dict[type, SessionState]] = {
    S.IDLE: {NewAsked: S.OPENING, ResumeAsked: S.OPENING},
    S.OPENING: {LogRead: S.OPEN},
    S.OPEN: {Resent: S.RESENT, CompactionDue: S.COUNTING, FoundClosed: S.STARTING_EPOCH,
             Ready: S.RUNNING},
    S.COUNTING: {SummaryRoom: S.SUMMARISING},
    S.SUMMARISING: {SummaryTooLong: S.SUMMARISING, NothingFits: S.RUNNING,
                    SummaryFailed: S.RUNNING, SummaryWritten: S.CLOSING},
    S.CLOSING: {EpochClosed: S.STARTING_EPOCH},
    S.STARTING_EPOCH: {EpochOpened: S.RUNNING},
    S.RUNNING: {TurnFinished: S.DONE},
    S.DONE: {},
    S.RESENT: {},
    S.ERROR: {},
}
_OWN_MOVES = (Resent, CompactionDue, FoundClosed, Ready, NothingFits)


class SessionMachine(Machine[SessionState]):
    """The session's table alone: event types in, states out."""

    def __init__(self) -> None:
        super().__init__(_TABLE, SessionState.IDLE, SessionState.ERROR)


class SessionCore:
    """One turn's way through its session: ``send`` an event, get the next action."""

    def __init__(self, settings: EpochSettings):
        self._machine = SessionMachine()
        self._settings = settings
        self._origin: str | None = None
        self._log: EpochLog | None = None
        self._views: Iterator[list[ChatMessage]] = iter(())
        self._max_tokens = settings.summary_tokens

    def __repr__(self) -> str:
        return f"<SessionCore {self.state.value}>"

    @property
    def state(self) -> SessionState:
        return self._machine.state

    def is_finished(self) -> bool:
        return self.state in (SessionState.DONE, SessionState.RESENT)

    def send(self, event: SessionEvent) -> Action:
        if isinstance(event, _OWN_MOVES):
            self._machine.fail(f"{type(event).__name__} is the core's own move, not the shell's")
        state = self._machine.process(type(event))
        match event:
            case NewAsked() | ResumeAsked():
                self._origin = event.origin
                return CreateSession() if isinstance(event, NewAsked) else ReadSession()
            case LogRead():
                self._log = event.log
                return self._before_the_turn(event.log)
            case SummaryRoom():
                assert self._log is not None
                self._max_tokens = self._settings.summary_tokens if event.cap is None \
                    else event.cap
                self._views = fitting_views(self._log.messages, self._log.opening)
                return self._next_summary_request()
            case SummaryTooLong():
                return self._next_summary_request()
            case SummaryFailed():
                return RunTurn(uncompacted=f"compaction failed: {event.message}")
            case SummaryWritten():
                return CloseEpoch(summary=event.completion, notice=self._notice(event))
            case EpochClosed():
                return OpenEpoch(summary=summary_of(event.log.records))
            case EpochOpened():
                return RunTurn()
            case TurnFinished():
                return Answer(answer=event.answer)
        raise AssertionError(f"the table lets {type(event).__name__} into {state.value}")

    def _before_the_turn(self, log: EpochLog) -> Action:
        """The core's own move from OPEN, read off the log."""
        records = log.records
        earlier = taken(records, self._origin) if self._origin is not None else None
        if earlier is not None:
            self._machine.process(Resent)
            if earlier.answer is None:
                return RefuseAgain(line=earlier.line)
            return AnswerAgain(answer=earlier.answer, line=earlier.line)
        if needs_compaction(records, self._settings):
            self._machine.process(CompactionDue)
            return CountSummaryRoom()
        if log.closed:
            self._machine.process(FoundClosed)
            return OpenEpoch(summary=summary_of(records))
        self._machine.process(Ready)
        return RunTurn()

    def _next_summary_request(self) -> Action:
        view = next(self._views, None)
        if view is None:
            self._machine.process(NothingFits)
            return RunTurn(uncompacted="not even the baseline fits the slot for a summary")
        return RequestSummary(messages=(*view, UserMessage(content=COMPACT_INSTRUCTION)),
                              max_tokens=self._max_tokens)

    def _notice(self, event: SummaryWritten) -> str | None:
        """None if the completion shows a summary; else the notice the epoch ends with."""
        content = event.completion.content or ""
        if shows_anything(content):
            return None
        wrote = ("a tool call" if event.completion.tool_calls else
                 "only invisible characters" if content.strip() else "nothing")
        assert self._log is not None
        return no_summary_notice(self._log.records, wrote)
