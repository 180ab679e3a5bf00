"""``broker.sock``: loopd asks brokerd to run one tool call; one connection per call.

loopd sends ``tool_call`` (a ToolRequest); brokerd may send ``tool_waiting`` frames (an approval
is pending, or the decided call is still running) and ends with ``tool_response`` (final) or
``error`` (final). For an allowed ``delegate`` call brokerd first sends ``delegate_run`` and loopd
answers ``delegate_done`` on the same connection (bxcore.protocol.delegate).
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import model_validator

from .._base import Count, Model, Text
from ..errors import WireError
from ..frames import ERROR as ERROR  # re-exported: each protocol names its error kind
from ..frames import kind_table
from ..tools import ToolRequest, ToolResponse
from . import delegate

TOOL_CALL = "tool_call"
TOOL_WAITING = "tool_waiting"
TOOL_RESPONSE = "tool_response"



WaitReason = Literal["approval", "running"]


class ToolWaiting(Model):
    """The call has not finished yet; sent every ``[broker] waiting_interval`` while that lasts.

    ``reason`` says why: ``approval``, it is suspended on the owner's approval, which
    ``approval`` (the id shown to the owner) and ``expires`` (RFC 3339) name; ``running``, it was
    decided and runs (in its sandbox, or in memoryd), and both are null. ``elapsed`` is whole
    seconds since that began (the approval was asked for, the run started). A body from before
    ``reason`` and ``elapsed`` existed reads as an approval wait at 0 seconds.
    """

    reason: WaitReason = "approval"
    approval: Text | None = None
    expires: Text | None = None
    elapsed: Count = 0

    @model_validator(mode="after")
    def _approval_named_only_when_waiting_for_one(self) -> Self:
        named = (self.approval is not None, self.expires is not None)
        if self.reason == "approval" and named != (True, True):
            raise ValueError("an approval wait names its approval and expires")
        if self.reason == "running" and any(named):
            raise ValueError("a running call has no approval or expires")
        return self


# What each side sends, with each kind's body (bxcore.frames.Kinds).
TO_BROKERD = kind_table({TOOL_CALL: ToolRequest, **delegate.TO_BROKERD})
FROM_BROKERD = kind_table({TOOL_WAITING: ToolWaiting, TOOL_RESPONSE: ToolResponse,
                           ERROR: WireError, **delegate.FROM_BROKERD})
