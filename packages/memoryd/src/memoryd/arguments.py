"""The arguments of the three memory tools, as the model writes them: read once, in
``MemoryService.memory_call``, from the call's JSON text, and handed on as these models. Only
memoryd reads them; loopd and brokerd know the tools by their schemas (bxcore/memory_tool.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from bxcore._base import Count, Flag, Model, Text
from bxcore.memory_tool import EditableFile
from bxcore.tools import DataClass
from pydantic import Field

Query = Annotated[Text, Field(min_length=1, max_length=1000)]
EntryText = Annotated[Text, Field(min_length=1, max_length=4000)]


class RecallArgs(Model):
    query: Query
    k: Annotated[int, Field(ge=1, le=100, strict=True)] = 5
    # Search memory up to this class (and untrusted memory too), above the session's own: the
    # answer, and so the session, is labelled with all it searched (docs/decisions/
    # recall-per-label.md). Default: the session's own taint, which the answer leaves as it is.
    reach: DataClass | None = None
    untrusted: Flag = False


class AskMemoryArgs(Model):
    query: Query
    workspace: Text | None = None  # default: our own workspace


class NoteArgs(Model):
    action: Literal["note"]
    text: EntryText


class AddArgs(Model):
    action: Literal["add"]
    file: EditableFile
    text: EntryText


class ReplaceArgs(Model):
    action: Literal["replace"]
    file: EditableFile
    old_text: EntryText  # a unique substring of the one entry to replace
    text: EntryText


class RemoveArgs(Model):
    action: Literal["remove"]
    file: EditableFile
    old_text: EntryText


class EntryPlan(Model):
    """What happens to one entry (by its 0-based position in the file) in a consolidate."""

    entry: Count
    fate: Literal["kept", "rewritten", "moved", "dropped"]
    text: EntryText | None = None  # the new text; required for, and only for, ``rewritten``


class ConsolidateArgs(Model):
    """One edit that marks every entry of a file kept, rewritten, moved or dropped."""

    action: Literal["consolidate"]
    file: EditableFile
    plan: Annotated[list[EntryPlan], Field(min_length=1)]


MemoryArgs = Annotated[
    NoteArgs | AddArgs | ReplaceArgs | RemoveArgs | ConsolidateArgs,
    Field(discriminator="action"),
]
