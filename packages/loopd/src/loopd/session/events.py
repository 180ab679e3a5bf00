"""The session's vocabulary: the events its core takes and the actions it returns (core.py).

Events are what happened, each the outcome of the action before; actions are what the shell
(sessions.py) does next. Frozen dataclasses with keyword-only fields, as the turn's
(turn/events.py); the table sees event types, never payloads.
"""

from __future__ import annotations

from dataclasses import dataclass

from bxcore.protocol.loop import TurnDone
from bxcore.records import EpochEnd

from ..baseline import ChatMessage
from ..inference.api import Completion
from ..log import Record


@dataclass(frozen=True, kw_only=True)
class EpochLog:
    """What the core reads of a session's current epoch: its records, the messages its
    baseline and records replay to, and how many of those are the baseline's opening."""

    records: tuple[Record, ...]
    messages: tuple[ChatMessage, ...]
    opening: int

    @property
    def closed(self) -> bool:
        """True once the log ends with ``epoch_end``: the session goes on in the next epoch."""
        return isinstance(self.records[-1], EpochEnd)


# --- events: what happened, each the outcome of the action before --------------------------

class SessionEvent:
    """Base of the events the session's table knows."""


@dataclass(frozen=True, kw_only=True)
class NewAsked(SessionEvent):
    """A channel asked for a turn in a new session (``resume`` false)."""

    origin: str | None = None


@dataclass(frozen=True, kw_only=True)
class ResumeAsked(SessionEvent):
    """A channel asked for a turn in a session that exists."""

    origin: str | None = None


@dataclass(frozen=True, kw_only=True)
class LogRead(SessionEvent):
    """The session was created or read: its current epoch as its log says."""

    log: EpochLog


@dataclass(frozen=True, kw_only=True)
class SummaryRoom(SessionEvent):
    """What the summary may cost, in tokens; None when it cannot be counted."""

    cap: int | None


@dataclass(frozen=True, kw_only=True)
class SummaryWritten(SessionEvent):
    """The model answered the request for a summary; nothing was appended yet."""

    completion: Completion


@dataclass(frozen=True, kw_only=True)
class SummaryTooLong(SessionEvent):
    """The slot refused the request for a summary as too long; nothing was appended."""


@dataclass(frozen=True, kw_only=True)
class SummaryFailed(SessionEvent):
    """The model server failed the request for a summary; nothing was appended."""

    message: str


@dataclass(frozen=True, kw_only=True)
class EpochClosed(SessionEvent):
    """The old epoch's log ends with the summary and ``epoch_end``."""

    log: EpochLog


@dataclass(frozen=True, kw_only=True)
class EpochOpened(SessionEvent):
    """The next epoch's baseline and log are on disk."""


@dataclass(frozen=True, kw_only=True)
class TurnFinished(SessionEvent):
    """The turn ran to its answer (a turn a limit or the server stopped raises instead)."""

    answer: TurnDone


@dataclass(frozen=True, kw_only=True)
class Resent(SessionEvent):
    """(The core's own move.) The log holds the turn's origin: it is not run again."""


@dataclass(frozen=True, kw_only=True)
class CompactionDue(SessionEvent):
    """(The core's own move.) The slot is full: the epoch is compacted before the turn."""


@dataclass(frozen=True, kw_only=True)
class FoundClosed(SessionEvent):
    """(The core's own move.) The log ends with ``epoch_end`` (loopd stopped, or memoryd was
    unreachable, after it): the next epoch is opened from its summary."""


@dataclass(frozen=True, kw_only=True)
class Ready(SessionEvent):
    """(The core's own move.) Nothing stands before the turn."""


@dataclass(frozen=True, kw_only=True)
class NothingFits(SessionEvent):
    """(The core's own move.) Not even the baseline alone fits the slot for a summary."""


# --- actions: what the shell does next -----------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CreateSession:
    """Build the epoch-0 baseline, write the session's files, record the serving settings."""


@dataclass(frozen=True, kw_only=True)
class ReadSession:
    """Read the session's current epoch (or take the copy kept of it, if still current)."""


@dataclass(frozen=True, kw_only=True)
class CountSummaryRoom:
    """Count what the summary may cost: what the next epoch's opening has room for."""


@dataclass(frozen=True, kw_only=True)
class RequestSummary:
    """Ask for the summary: ``messages`` (ending with the instruction), without tools or
    reasoning, at most ``max_tokens``; the channel sees its progress, not its text."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int


@dataclass(frozen=True, kw_only=True)
class CloseEpoch:
    """Append the instruction (``User``), the summary's completion and ``epoch_end`` carrying
    ``notice`` (None when the summary is the completion), and report them to memoryd."""

    summary: Completion
    notice: str | None


@dataclass(frozen=True, kw_only=True)
class OpenEpoch:
    """Build the baseline as it is now plus ``summary``, write the next epoch's files, record
    the serving settings."""

    summary: str


@dataclass(frozen=True, kw_only=True)
class RunTurn:
    """Run the turn (turn/) and report what it appended, whatever it ended with.
    ``uncompacted``: why a compaction that was due did not happen (told in the log)."""

    uncompacted: str | None = None


@dataclass(frozen=True, kw_only=True)
class Answer:
    """Final: the turn's answer."""

    answer: TurnDone


@dataclass(frozen=True, kw_only=True)
class AnswerAgain:
    """Final: a resent turn's earlier answer (the shell gives it the session's taint now),
    taken at log line ``line``."""

    answer: TurnDone
    line: int


@dataclass(frozen=True, kw_only=True)
class RefuseAgain:
    """Final: a resent turn taken at log line ``line`` ended without an answer; it is not run
    twice."""

    line: int


Action = (CreateSession | ReadSession | CountSummaryRoom | RequestSummary | CloseEpoch
          | OpenEpoch | RunTurn | Answer | AnswerAgain | RefuseAgain)
