"""The turn's state machine: every transition in one table (after h11's ``_state.py``).

    IDLE ──UserAppended──▶ AWAITING_COMPLETION ──Answered──▶ DONE
                              ▲       │ ╲
                   ToolsRan   │       │  ╲──Stopped──▶ STOPPED   (a limit, session_full, the
                              │       ▼                          inference error)
                            RUNNING_TOOLS ──Stopped──▶ STOPPED

The table sees event types, never payloads. A move the table does not list raises
``IllegalTransition`` and leaves the machine in ERROR for good. No other module assigns state.
"""

from __future__ import annotations

from enum import Enum

from .errors import IllegalTransition


class TurnState(Enum):
    IDLE = "IDLE"
    AWAITING_COMPLETION = "AWAITING_COMPLETION"
    RUNNING_TOOLS = "RUNNING_TOOLS"
    DONE = "DONE"
    STOPPED = "STOPPED"
    ERROR = "ERROR"


class TurnMove:
    """Base of the events the table knows. They carry nothing: the table reads only the type."""


class UserAppended(TurnMove):
    """The user's message is on disk; the first request can be built."""


class Answered(TurnMove):
    """A final completion without tool calls is on disk: the turn has its answer."""


class CalledTools(TurnMove):
    """A final completion with tool calls is on disk."""


class ToolsRan(TurnMove):
    """Every call of the completion has its ToolResult on disk; the next request can be built."""


class Stopped(TurnMove):
    """A limit or the model server ended the turn before an answer."""


_TABLE: dict[TurnState, dict[type[TurnMove], TurnState]] = {
    TurnState.IDLE: {UserAppended: TurnState.AWAITING_COMPLETION},
    TurnState.AWAITING_COMPLETION: {
        Answered: TurnState.DONE,
        CalledTools: TurnState.RUNNING_TOOLS,
        Stopped: TurnState.STOPPED,
    },
    TurnState.RUNNING_TOOLS: {ToolsRan: TurnState.AWAITING_COMPLETION, Stopped: TurnState.STOPPED},
    TurnState.DONE: {},
    TurnState.STOPPED: {},
    TurnState.ERROR: {},
}


class TurnMachine:
    def __init__(self) -> None:
        self._state = TurnState.IDLE

    def __repr__(self) -> str:
        return f"<TurnMachine {self._state.value}>"

    @property
    def state(self) -> TurnState:
        return self._state

    def process(self, move: type[TurnMove]) -> TurnState:
        following = _TABLE[self._state].get(move)
        if following is None:
            previous, self._state = self._state, TurnState.ERROR
            raise IllegalTransition(f"{move.__name__} is not allowed in state {previous.value}")
        self._state = following
        return following

    def is_idle(self) -> bool:
        return self._state is TurnState.IDLE

    def is_finished(self) -> bool:
        return self._state in (TurnState.DONE, TurnState.STOPPED)

    def can(self, move: type[TurnMove]) -> bool:
        return move in _TABLE[self._state]
