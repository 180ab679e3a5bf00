"""A state table as h11's ``_state.py`` keeps one: (state, event type) → state, and the state it
is in. The turn's core (turn/core.py) and the session's (session/core.py) each hold one; a move
the table does not list raises ``IllegalTransition`` and leaves the machine in its error state for
good. Pure: it sees event types, never payloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Generic, NoReturn, TypeVar

from .errors import IllegalTransition

State = TypeVar("State", bound=Enum)
Table = Mapping[State, Mapping[type, State]]


class Machine(Generic[State]):
    """The table alone: event types in, states out."""

    def __init__(self, table: Table[State], start: State, error: State):
        self._table = table
        self._state = start
        self._error = error

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._state.value}>"

    @property
    def state(self) -> State:
        return self._state

    def process(self, move: type) -> State:
        following = self._table[self._state].get(move)
        if following is None:
            self.fail(f"{move.__name__} is not allowed in state {self._state.value}")
        self._state = following
        return following

    def fail(self, why: str) -> NoReturn:
        self._state = self._error
        raise IllegalTransition(why)

    def can(self, move: type) -> bool:
        return move in self._table[self._state]
