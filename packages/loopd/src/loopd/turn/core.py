"""The turn as a sans-I/O core (docs/design.md, "One turn" and "Turn limits"), after h11.

The core reads no disk, asks no model server, runs no tool and reads no clock. The shell
(shell.py) does each action the core returns and answers it with the event that says what
happened; the core's table then gives the next state, and the state gives the next action.
The events and actions are in events.py, the limits in limits.py.

    action = core.send(TurnStarted(content=..., open_calls=open_calls(session.records)))
    while action is not final: event = <do action>; action = core.send(event)

    action                               answered by
    RecordNotRun(call, text)             ToolRecorded(call_id)    a ToolResult saying why not
    RecordUser(content)                  UserRecorded()
    RequestCompletion(tool_choice, ...)  Answered(answer) | CalledTools(calls, ...) |
                                         CompletionFailed(code, message, failure)
    RunTool(call, cut)                   ToolRecorded(call_id)
    Finish(answer) | Stop(code, reason, failure) | Abandon()      final: the turn is over

The final actions carry what the shell answers with (the answer, or the failure to chain), so
the shell keeps nothing of one action for another.

``Cancelled`` may be sent while any action is under way: the turn is abandoned where it stands,
writing nothing more. Like a crash, a cancellation can leave the last completion's calls without
results; the next turn's ``TurnStarted`` names them (``open_calls``) and they are answered
``INTERRUPTED`` before its user message, so every call in the log has its result.

The table (h11's ``_state.py``) sees event types, never payloads; ``RoundDone`` and ``LimitHit``
are the core's own moves at the end of a round of tool calls, from its limits:

    IDLE ──TurnStarted──▶ OPENING ⟲ToolRecorded ──UserRecorded──▶ AWAITING_COMPLETION
    AWAITING_COMPLETION ──Answered──▶ DONE
                        ──CalledTools──▶ RUNNING_TOOLS ⟲ToolRecorded
                        ──CompletionFailed──▶ STOPPED
    RUNNING_TOOLS ──RoundDone──▶ AWAITING_COMPLETION
                  ──LimitHit──▶ CLOSING
    CLOSING ──Answered──▶ DONE
            ──CalledTools | CompletionFailed──▶ STOPPED
    OPENING, AWAITING_COMPLETION, RUNNING_TOOLS, CLOSING ──Cancelled──▶ CANCELLED

A turn that hits a limit (rounds, a repeated call) is asked once more with ``tool_choice``
"none" (CLOSING), so it ends with an answer, not only with ``turn_limit``: a model that repeats a
call would otherwise repeat it from the log on every later turn, and no turn would ever be
answered again (the attack on issue 32). If the model calls tools even then, the turn stops on
the limit; if the completion fails, with the failure's own code (the server down or the slot
full is not a turn limit).

A move the table does not list, or an event that does not answer the action under way, raises
``IllegalTransition`` and leaves the core in ERROR for good. No other module assigns state.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from enum import Enum

from bxcore.chat import ToolCall
from bxcore.errors import ErrorCode
from bxcore.records import Assistant, CacheLoss, ToolResult, Usage

from ..log import Record
from ..machine import Machine
from ..readback import read_back
from .events import (
    Abandon,
    Action,
    Answered,
    CalledTools,
    Cancelled,
    CompletionFailed,
    CoreEvent,
    Finish,
    LimitHit,
    RecordNotRun,
    RecordUser,
    RequestCompletion,
    RoundDone,
    RunTool,
    Stop,
    ToolRecorded,
    TurnStarted,
    UserRecorded,
)
from .limits import Limits, TurnSettings

INTERRUPTED = (
    "No result: the turn was interrupted (loopd stopped or the turn was cancelled) before this "
    "call's result was recorded. It may or may not have run; check before calling it again."
)


class TurnState(Enum):
    IDLE = "IDLE"
    OPENING = "OPENING"
    AWAITING_COMPLETION = "AWAITING_COMPLETION"
    RUNNING_TOOLS = "RUNNING_TOOLS"
    CLOSING = "CLOSING"  # a limit was hit: one completion without tools ends the turn
    DONE = "DONE"
    STOPPED = "STOPPED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"


# Which events answer each action that is not final.
_ANSWERS: dict[type, tuple[type[CoreEvent], ...]] = {
    RecordNotRun: (ToolRecorded,), RunTool: (ToolRecorded,), RecordUser: (UserRecorded,),
    RequestCompletion: (Answered, CalledTools, CompletionFailed),
}

S = TurnState
_TABLE: dict[TurnState, dict[type[CoreEvent], TurnState]] = {
    S.IDLE: {TurnStarted: S.OPENING},
    S.OPENING: {ToolRecorded: S.OPENING, UserRecorded: S.AWAITING_COMPLETION,
                Cancelled: S.CANCELLED},
    S.AWAITING_COMPLETION: {Answered: S.DONE, CalledTools: S.RUNNING_TOOLS,
                            CompletionFailed: S.STOPPED, Cancelled: S.CANCELLED},
    S.RUNNING_TOOLS: {ToolRecorded: S.RUNNING_TOOLS, RoundDone: S.AWAITING_COMPLETION,
                      LimitHit: S.CLOSING, Cancelled: S.CANCELLED},
    S.CLOSING: {Answered: S.DONE, CalledTools: S.STOPPED, CompletionFailed: S.STOPPED,
                Cancelled: S.CANCELLED},
    S.DONE: {},
    S.STOPPED: {},
    S.CANCELLED: {},
    S.ERROR: {},
}


class TurnMachine(Machine[TurnState]):
    """The turn's table alone: event types in, states out."""

    def __init__(self) -> None:
        super().__init__(_TABLE, TurnState.IDLE, TurnState.ERROR)


class TurnCore:
    """One turn: ``send`` an event, get the next action."""

    def __init__(self, settings: TurnSettings, *, tool_choice: Sequence[str] = (),
                 thinking: bool = True):
        self._machine = TurnMachine()
        self._limits = Limits(settings)
        self._choices = tuple(tool_choice)  # for the turn's completions in order
        self._thinking = thinking
        self._completions = 0
        self._reasoning = 0
        self._queue: list[RecordUser | RecordNotRun | RunTool] = []
        self._awaiting: Action | None = None
        self._limit: str | None = None  # the limit the turn hit, once it did

    def __repr__(self) -> str:
        return f"<TurnCore {self.state.value} rounds={self._limits.rounds}>"

    @property
    def state(self) -> TurnState:
        return self._machine.state

    def is_idle(self) -> bool:
        return self.state is TurnState.IDLE

    def is_finished(self) -> bool:
        return self.state in (TurnState.DONE, TurnState.STOPPED, TurnState.CANCELLED)

    def send(self, event: CoreEvent) -> Action:
        if isinstance(event, RoundDone | LimitHit):
            self._machine.fail(f"{type(event).__name__} is the core's own move, not the shell's")
        self._check_answers(event)
        state = self._machine.process(type(event))
        match event:
            case TurnStarted():
                self._queue = [RecordNotRun(call=c, read=read_back(c.function.arguments),
                                            text=INTERRUPTED) for c in event.open_calls]
                self._queue.append(RecordUser(content=event.content))
            case CalledTools():
                self._reasoning += event.reasoning_tokens
                self._queue = [self._limits.answer(call) for call in event.calls]
                last = self._queue[-1]
                if event.cut and isinstance(last, RunTool):
                    self._queue[-1] = dataclasses.replace(last, cut=True)
        action = self._action_in(state, event)
        self._awaiting = action
        return action

    def _action_in(self, state: TurnState, event: CoreEvent) -> Action:
        match state:
            case TurnState.OPENING:
                return self._queue.pop(0)
            case TurnState.AWAITING_COMPLETION:
                return self._request()
            case TurnState.RUNNING_TOOLS:
                return self._queue.pop(0) if self._queue else self._end_of_round()
            case TurnState.DONE:
                assert isinstance(event, Answered)
                return Finish(answer=event.answer)
            case TurnState.STOPPED:
                if isinstance(event, CompletionFailed):  # its own code, even while closing
                    after = "" if self._limit is None else \
                        f" (asked once more without tools after {self._limit})"
                    return Stop(code=event.code, reason=event.message + after,
                                failure=event.failure)
                assert self._limit is not None  # tools called even without: the limit stands
                return Stop(code=ErrorCode.TURN_LIMIT, reason=self._limit)
            case TurnState.CANCELLED:
                return Abandon()
        raise AssertionError(f"the table never moves to {state.value}")

    def _check_answers(self, event: CoreEvent) -> None:
        """An event answers the action under way (the first, TurnStarted, answers none)."""
        awaiting = self._awaiting
        if awaiting is None or isinstance(event, Cancelled) or not self._machine.can(type(event)):
            return  # the table decides
        if not isinstance(event, _ANSWERS.get(type(awaiting), ())):
            self._machine.fail(f"{type(event).__name__} does not answer {awaiting!r}")
        if isinstance(event, ToolRecorded) and isinstance(awaiting, RecordNotRun | RunTool) \
                and event.call_id != awaiting.call.id:
            self._machine.fail(f"ToolRecorded for call {event.call_id!r}, but the call under "
                               f"way is {awaiting.call.id!r}")

    def _request(self) -> RequestCompletion:
        index, self._completions = self._completions, self._completions + 1
        choice = self._choices[index] if index < len(self._choices) else None
        return RequestCompletion(tool_choice=choice, thinking=self._thinking,
                                 reasoning_spent=self._reasoning)

    def _end_of_round(self) -> Action:
        self._limit = self._limits.end_of_round()
        if self._limit is not None:
            self._machine.process(LimitHit)
            self._completions += 1
            return RequestCompletion(tool_choice="none", thinking=self._thinking,
                                     reasoning_spent=self._reasoning)
        self._machine.process(RoundDone)
        return self._request()


def open_calls(records: Iterable[Record]) -> tuple[ToolCall, ...]:
    """The calls of the log's last completion that have no ToolResult, if nothing but their
    results (and the completion's Usage and CacheLoss) follows it: a crash or a cancellation
    cut its round short. Any other log has none. Results are written in the calls' order, and
    a model may give two calls one id: an id's results answer its first calls, one each."""
    answered: Counter[str] = Counter()
    for record in reversed(list(records)):
        match record:
            case ToolResult():
                answered[record.tool_call_id] += 1
            case Usage() | CacheLoss():
                continue
            case Assistant():
                unanswered = []
                for call in record.tool_calls or []:
                    if answered[call.id]:
                        answered[call.id] -= 1
                    else:
                        unanswered.append(call)
                return tuple(unanswered)
            case _:
                return ()
    return ()
