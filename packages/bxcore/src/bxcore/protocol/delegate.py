"""``delegate``: the model hands a task to a subagent, a child session on the background slot.

brokerd decides a ``delegate`` call like any other (grant-controlled, audited). An allowed call
does not go to a sandbox: on the same broker.sock connection brokerd sends loopd
``delegate_run`` (the child's session id, the task and its round limit); loopd runs the child's
one turn in process and sends back ``delegate_done`` (final) with the child's answer. brokerd
then answers the parent's call with that text, labelled with the child's taint as brokerd itself
recorded it (every tool call of the child went through brokerd), and keeps sending ``running``
notices meanwhile. A parent whose turn ends (loopd cancels it, or loopd stops) closes the
connection and cancels the child with it.

The tool as the model sees it (its schema) is loopd's, which offers it: loopd/subagents.py.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from .._base import Model, Text
from ..frames import kind_table
from ..ids import SessionId

DELEGATE: Final = "delegate"
DELEGATE_RUN: Final = "delegate_run"
DELEGATE_DONE: Final = "delegate_done"
MAX_ROUNDS: Final = 32  # the most rounds of tool calls a task may ask for
SUBAGENT_PREFIX: Final = "sub-"  # a child session's id starts with this

TaskText = Annotated[Text, Field(min_length=1, max_length=16 * 1024)]
Rounds = Annotated[int, Field(ge=1, le=MAX_ROUNDS, strict=True)]


class DelegateArgs(Model):
    """The model's arguments: what the subagent is to do, and at most how many rounds of tool
    calls its turn may take (loopd's ``[loop] tool_iterations`` when absent, never more)."""

    task: TaskText
    rounds: Rounds | None = None


class DelegateRun(Model):
    """brokerd to loopd: run ``task`` as the first turn of the new session ``session``."""

    session: SessionId
    task: TaskText
    rounds: Rounds | None = None


class DelegateDone(Model):
    """loopd to brokerd: the child's final answer (``ok``), or why it has none (``failed``)."""

    status: Literal["ok", "failed"]
    content: Text


# The kinds this adds to broker.sock (bxcore.protocol.broker includes them in its tables).
TO_BROKERD = kind_table({DELEGATE_DONE: DelegateDone})
FROM_BROKERD = kind_table({DELEGATE_RUN: DelegateRun})


__all__ = [
    "DELEGATE", "DELEGATE_DONE", "DELEGATE_RUN", "FROM_BROKERD", "MAX_ROUNDS", "SUBAGENT_PREFIX",
    "TO_BROKERD", "DelegateArgs", "DelegateDone", "DelegateRun",
]
