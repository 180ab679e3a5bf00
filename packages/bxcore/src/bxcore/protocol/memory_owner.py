"""``memory-owner.sock`` (served by memoryd; its directory admits only the owner's users): the
owner's maintenance commands that change memoryd's files, so they are done by memoryd's own
user: ``memory_command`` (MemoryCommand: undo, accept, reject, reindex), answered by
``command_done`` (CommandDone: the line ``memoryd`` prints) or ``error`` (a WireError). No role
can reach it, so the agent cannot accept its own staged identity edits.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .._base import Count, Model, Text
from ..errors import WireError
from ..frames import ERROR as ERROR  # re-exported: each protocol names its error kind
from ..frames import kind_table

MEMORY_COMMAND = "memory_command"
COMMAND_DONE = "command_done"


class UndoCommand(Model):
    command: Literal["undo"]
    file: Text  # memory.md or user.md; memoryd names any other file in its refusal


class ResolveCommand(Model):
    command: Literal["accept", "reject"]
    seq: Count  # the staged edit


class ReindexCommand(Model):
    command: Literal["reindex"]


MemoryCommand = Annotated[
    UndoCommand | ResolveCommand | ReindexCommand, Field(discriminator="command")
]


class CommandDone(Model):
    text: Text  # what was done, one line, as ``memoryd`` prints it


# What each side sends, with each kind's body (bxcore.frames.Kinds).
TO_MEMORYD_OWNER = kind_table({MEMORY_COMMAND: MemoryCommand})
FROM_MEMORYD_OWNER = kind_table({COMMAND_DONE: CommandDone, ERROR: WireError})


__all__ = [
    "COMMAND_DONE", "ERROR", "FROM_MEMORYD_OWNER", "MEMORY_COMMAND", "TO_MEMORYD_OWNER",
    "CommandDone", "MemoryCommand", "ReindexCommand", "ResolveCommand", "UndoCommand",
]
