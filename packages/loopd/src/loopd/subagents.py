"""Subagents: the child session of an allowed ``delegate`` call, run in loopd's own process.

brokerd decides the call and sends ``delegate_run`` on the call's connection (tools/broker.py);
this runs the child's one turn as a new ``background`` session (the scheduled-runs and subagents
slot) with its own log and baseline, through the same ``Sessions`` as a channel's turn, so its tool
calls go to brokerd under the child's own session id. The child's events reach no channel: the
parent hears brokerd's ``running`` notices meanwhile. Its final answer, or why it has none, is
what brokerd labels and returns to the parent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bxcore.chat import ToolSchema
from bxcore.errors import ErrorCode
from bxcore.protocol.delegate import DELEGATE, MAX_ROUNDS, DelegateDone, DelegateRun
from bxcore.protocol.loop import Turn, TurnEventBody

from .errors import LoopError
from .sessions import Sessions

log = logging.getLogger("loopd.subagents")

# The delegate tool as the model sees it; loopd offers it, brokerd decides it by name.
DELEGATE_SCHEMA = ToolSchema(
    name=DELEGATE,
    description=(
        "Hand a self-contained task to a subagent: a fresh session with the same tools and no "
        "view of this conversation. It works on the task alone and its final answer comes back "
        "as this tool's result. Put everything it needs into the task text."
    ),
    parameters={
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "The whole task, in words."},
            "rounds": {"type": "integer", "minimum": 1, "maximum": MAX_ROUNDS,
                       "description": "At most this many rounds of tool calls."},
        },
        "required": ["task"],
    },
)


async def _unheard(_event: TurnEventBody) -> None:
    """A child's events: nobody is watching its turn."""


class Subagents:
    """The children's runner, and the sessions it runs them in: ``sessions`` builds those with
    this runner as their tool port's children, so the cycle (a turn of the sessions runs a
    child in the sessions) is closed while they are built, and nothing is set afterwards."""

    def __init__(self, sessions: Callable[[Subagents], Sessions]):
        self.sessions = sessions(self)

    async def run(self, order: DelegateRun) -> DelegateDone:
        turn = Turn(session=order.session, content=order.task, resume=False,
                    session_kind="background")
        log.info("subagent %s: started (rounds %s)", order.session, order.rounds or "default")
        try:
            done = await self.sessions.run(turn, _unheard, rounds=order.rounds)
        except LoopError as exc:
            code, message = exc.code, str(exc)
        except Exception as exc:  # a bug or a disk failure: the parent's call still ends
            log.exception("subagent %s: the turn failed", order.session)
            code, message = ErrorCode.INTERNAL, f"session {order.session}: {exc}"
        else:
            return DelegateDone(status="ok",
                                content=done.content or "(the subagent gave no answer)")
        log.warning("subagent %s: %s: %s", order.session, code, message)
        return DelegateDone(status="failed", content=f"The subagent failed ({code}): {message}")
