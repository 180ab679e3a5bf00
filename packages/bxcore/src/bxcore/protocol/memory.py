"""``memory.sock`` (served by memoryd): finished turns and identity for loopd, memory tool calls
for brokerd. One connection per request; every answer is final. (The owner's commands go to
memoryd's other socket: bxcore.protocol.memory_owner.)

- ``turn_finished`` (loopd, TurnFinished: the records one turn appended to the session log),
  answered by ``turn_recorded``;
- ``identity_request`` (loopd, IdentityRequest: once per epoch, when the baseline is built),
  answered by ``identity_snapshot``;
- ``memory_call`` (brokerd, MemoryCall: a decided ``recall``, ``ask_memory`` or ``memory``
  call), answered by ``tool_response`` (a ToolResponse).

Any request may instead be answered by ``error`` (a WireError). The identity snapshot is the one
memoryd froze for that session's epoch: a write made during the epoch shows up in the next one.

Only what crosses these sockets is here, with the names of the tools a ``memory_call`` carries
(``MEMORY_TOOLS``: brokerd routes them here and allows them by built-in policy): the tools'
schemas and identity entries are bxcore/memory_tool.py, the tools' arguments (text inside a
ToolRequest) memoryd/arguments.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .._base import Count, Flag, Model, Text
from ..errors import WireError
from ..frames import ERROR as ERROR  # re-exported: each protocol names its error kind
from ..frames import kind_table
from ..ids import SessionId
from ..records import LogRecord
from ..tools import DataClass, ToolRequest, ToolResponse

TURN_FINISHED = "turn_finished"
TURN_RECORDED = "turn_recorded"
IDENTITY_REQUEST = "identity_request"
IDENTITY_SNAPSHOT = "identity_snapshot"
MEMORY_CALL = "memory_call"
TOOL_RESPONSE = "tool_response"

MEMORY_TOOLS = frozenset({"recall", "ask_memory", "memory"})  # the tools a memory_call carries

IdentityName = Literal["soul.md", "memory.md", "user.md"]
IDENTITY_ORDER: tuple[IdentityName, ...] = ("soul.md", "memory.md", "user.md")


class TurnFinished(Model):
    """The records of one finished turn, as loopd appended them to the session log
    ``sessions/<session>/<epoch>.jsonl``.

    ``first_line`` is the 1-based line number of the first record in that file, so memoryd indexes
    them under the same origin a reindex from the file gives.
    """

    session: SessionId
    epoch: Count
    first_line: Annotated[int, Field(ge=1, strict=True)]
    records: Annotated[list[LogRecord], Field(min_length=1)]


class TurnRecorded(Model):
    indexed: Count  # records added to the recall index (0 when the session is above the ceiling)


class IdentityRequest(Model):
    session: SessionId
    epoch: Count


class IdentityFile(Model):
    """One identity file as the baseline shows it. ``withheld`` is set (and ``text`` empty) when
    the file failed the sanitizer or its limit when the snapshot was taken."""

    name: IdentityName
    text: Text
    limit: Count
    used: Count  # characters
    withheld: Text | None = None

    @property
    def percent(self) -> int:
        return (100 * self.used) // self.limit if self.limit else 0


class IdentitySnapshot(Model):
    session: SessionId
    epoch: Count
    files: list[IdentityFile]  # always soul.md, memory.md, user.md, in that order


class MemoryCall(Model):
    """A memory tool call brokerd has decided (built-in policy ``auto``), with the session's
    taint as brokerd knows it."""

    request: ToolRequest
    data_class: DataClass = Field(alias="class")
    untrusted: Flag


# What each side sends, with each kind's body (bxcore.frames.Kinds).
TO_MEMORYD = kind_table({TURN_FINISHED: TurnFinished, IDENTITY_REQUEST: IdentityRequest,
                         MEMORY_CALL: MemoryCall})
FROM_MEMORYD = kind_table({TURN_RECORDED: TurnRecorded, IDENTITY_SNAPSHOT: IdentitySnapshot,
                           TOOL_RESPONSE: ToolResponse, ERROR: WireError})


__all__ = [
    "ERROR", "FROM_MEMORYD", "IDENTITY_ORDER", "IDENTITY_REQUEST", "IDENTITY_SNAPSHOT",
    "MEMORY_CALL", "MEMORY_TOOLS", "TOOL_RESPONSE", "TO_MEMORYD", "TURN_FINISHED",
    "TURN_RECORDED", "IdentityFile", "IdentityName", "IdentityRequest", "IdentitySnapshot",
    "MemoryCall", "TurnFinished", "TurnRecorded",
]
