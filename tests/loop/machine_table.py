"""The table test the turn's and the session's state machines share (loopd/machine.py): a
machine brought to a state by a path of moves either makes the move the table lists or refuses
it, and a refused move leaves it in ERROR for good."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import pytest
from loopd.errors import IllegalTransition


def brought_to(machine: Any, state: Enum, paths: Mapping[Enum, Sequence[type]]) -> Any:
    """``machine`` (fresh) after the moves of ``paths[state]``, which end in ``state``."""
    for move in paths[state]:
        machine.process(move)
    assert machine.state is state
    return machine


def check_move(machine: Any, move: type, expected: Enum | None, error: Enum) -> None:
    """``move`` takes ``machine`` to ``expected``, or (None) is refused, naming the move."""
    name = type(machine).__name__
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"{move.__name__} is not allowed"):
            machine.process(move)
        assert machine.state is error
        assert repr(machine) == f"<{name} ERROR>"
    else:
        assert machine.process(move) is expected
        assert repr(machine) == f"<{name} {expected.value}>"


def check_error_is_for_good(machine: Any, illegal: type, moves: Sequence[type]) -> None:
    """After ``illegal`` (a move the fresh ``machine`` refuses) every move is refused."""
    with pytest.raises(IllegalTransition):
        machine.process(illegal)
    for move in moves:
        with pytest.raises(IllegalTransition):
            machine.process(move)
