"""Errors of loopd outside the inference client (whose errors are in ``inference/errors.py``).

    LoopError
    ├── SessionError            a session cannot be opened or created
    │   ├── NoSuchSession       resume of a session that does not exist
    │   ├── SessionExists       a new session with an id that is taken
    │   ├── SessionBusy         another turn of this session is running
    │   ├── AlreadyTaken        a resent turn (its origin is in the log) that ended without an
    │   │                       answer: not run twice (code bad_request)
    │   ├── EpochClosed         an append to an epoch whose log ends with epoch_end (a bug)
    │   └── CorruptSession      a file of the session is unreadable or invalid; names file and line
    │       └── TornLog         the log's last line is incomplete (a write was cut short)
    ├── BaselineError           system.md, an identity file or a baseline file cannot be read;
    │   │                       names the file
    │   ├── BaselineOverBudget  a new baseline is over [inference] baseline_budget; names each
    │   │                       part's size; the session or epoch does not start
    │   └── BudgetUncounted     the model server cannot count a new baseline (code unavailable)
    ├── RegistryError           the tool registry file is unreadable or invalid; names the file
    ├── MemoryUnavailable       memoryd cannot give a new epoch its identity (code unavailable):
    │                           the epoch does not start, the turn is refused, nothing is lost
    ├── TurnEnded               a turn stopped before its answer: carries the wire ErrorCode
    │                           (turn_limit, session_full, inference); the session stays usable
    └── IllegalTransition       a bug: the turn loop asked its state machine for a move the table
                                does not allow (we did it wrong)

Every one is a bxcore Refused: it crosses loop.sock as a WireError whose code is the error's
``code``, with its message (bxcore.daemon.answering; ``internal`` ones are logged as loopd's).
"""

from __future__ import annotations

from bxcore.errors import ErrorCode, Refused


class LoopError(Refused):
    code = ErrorCode.INTERNAL


class SessionError(LoopError):
    pass


class NoSuchSession(SessionError):
    code = ErrorCode.NO_SUCH_SESSION


class SessionExists(SessionError):
    code = ErrorCode.SESSION_EXISTS


class SessionBusy(SessionError):
    code = ErrorCode.SESSION_BUSY


class AlreadyTaken(SessionError):
    code = ErrorCode.BAD_REQUEST


class EpochClosed(SessionError):
    pass


class CorruptSession(SessionError):
    """The files of a session are not what loopd wrote. Nothing is repaired: the owner looks."""


class TornLog(CorruptSession):
    pass


class BaselineError(LoopError):
    pass


class BaselineOverBudget(BaselineError):
    pass


class BudgetUncounted(BaselineError):
    code = ErrorCode.UNAVAILABLE


class RegistryError(LoopError):
    pass


class MemoryUnavailable(LoopError):
    code = ErrorCode.UNAVAILABLE


class TurnEnded(LoopError):
    """A limit or the model server ended the turn. What was appended before stays."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class IllegalTransition(LoopError):
    pass
