"""``broker.sock``: loopd asks brokerd to run one tool call; one connection per call.

loopd sends ``tool_call`` (a ToolRequest); brokerd may send ``tool_waiting`` frames (an approval
is pending) and ends with ``tool_response`` (final) or ``error`` (final).
"""

from __future__ import annotations

from .._base import Model, Text

TOOL_CALL = "tool_call"
TOOL_WAITING = "tool_waiting"
TOOL_RESPONSE = "tool_response"
ERROR = "error"

TO_BROKERD = frozenset({TOOL_CALL})
FROM_BROKERD = frozenset({TOOL_WAITING, TOOL_RESPONSE, ERROR})


class ToolWaiting(Model):
    """The call is suspended: an approval was requested and has not been answered yet."""

    approval: Text  # the approval id shown to the owner
    expires: Text  # RFC 3339
