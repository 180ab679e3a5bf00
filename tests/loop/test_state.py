"""The turn state machine's table, driven by event types alone."""

from __future__ import annotations

import pytest
from loopd.errors import IllegalTransition
from loopd.state import (
    Answered,
    CalledTools,
    Stopped,
    ToolsRan,
    TurnMachine,
    TurnState,
    UserAppended,
)

ALL_MOVES = [UserAppended, Answered, CalledTools, ToolsRan, Stopped]

LEGAL = {
    (TurnState.IDLE, UserAppended): TurnState.AWAITING_COMPLETION,
    (TurnState.AWAITING_COMPLETION, Answered): TurnState.DONE,
    (TurnState.AWAITING_COMPLETION, CalledTools): TurnState.RUNNING_TOOLS,
    (TurnState.AWAITING_COMPLETION, Stopped): TurnState.STOPPED,
    (TurnState.RUNNING_TOOLS, ToolsRan): TurnState.AWAITING_COMPLETION,
    (TurnState.RUNNING_TOOLS, Stopped): TurnState.STOPPED,
}

# A shortest path of moves from IDLE to each state.
PATHS = {
    TurnState.IDLE: [],
    TurnState.AWAITING_COMPLETION: [UserAppended],
    TurnState.RUNNING_TOOLS: [UserAppended, CalledTools],
    TurnState.DONE: [UserAppended, Answered],
    TurnState.STOPPED: [UserAppended, Stopped],
}


def machine_in(state: TurnState) -> TurnMachine:
    machine = TurnMachine()
    for move in PATHS[state]:
        machine.process(move)
    assert machine.state is state
    return machine


@pytest.mark.parametrize("state", list(PATHS))
@pytest.mark.parametrize("move", ALL_MOVES)
def test_every_state_and_move(state, move):
    machine = machine_in(state)
    expected = LEGAL.get((state, move))
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"{move.__name__} is not allowed"):
            machine.process(move)
        assert machine.state is TurnState.ERROR
        assert repr(machine) == "<TurnMachine ERROR>"
    else:
        assert machine.process(move) is expected
        assert repr(machine) == f"<TurnMachine {expected.value}>"


def test_error_is_for_good():
    machine = TurnMachine()
    with pytest.raises(IllegalTransition):
        machine.process(Answered)
    for move in ALL_MOVES:
        with pytest.raises(IllegalTransition):
            machine.process(move)


def test_predicates():
    machine = TurnMachine()
    assert machine.is_idle() and not machine.is_finished()
    assert machine.can(UserAppended) and not machine.can(Answered)
    machine.process(UserAppended)
    assert not machine.is_idle()
    machine.process(Answered)
    assert machine.is_finished()
