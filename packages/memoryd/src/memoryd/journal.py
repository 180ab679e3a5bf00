"""``memory/edits/``: every memory write, one JSON file per entry, never rewritten.

An entry records what the write did to which file: the whole text before and after (identity
files are small), the notes it appended, and who asked. Staging, accepting, rejecting and undoing
are entries too, so the directory is the complete history and ``memoryd log`` just lists it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from bxcore._base import Count, Flag, Model, Text
from bxcore.tools import DataClass
from bxcore.util import sha256, write_durably
from pydantic import BeforeValidator, ValidationError

from .errors import StoreError

Action = Literal[
    "note", "add", "replace", "remove", "consolidate", "undo", "accept", "reject"
]
JournalFile = Literal["memory.md", "user.md", "notes.md"]


def _note_id(value: object) -> object:
    # Entries written before per-label note ids hold plain numbers; they read as the id text.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


NoteId = Annotated[Text, BeforeValidator(_note_id)]


class PendingNote(Model):
    """A moved or dropped entry that goes to notes.md when the edit is applied."""

    kind: Literal["moved", "dropped"]
    text: Text


class Edit(Model):
    seq: Count
    time: Text
    session: Text | None  # None for the owner's own commands (undo, accept, reject)
    data_class: DataClass | None = None  # the writing session's class, for the notes it adds
    file: JournalFile
    action: Action
    summary: Text
    staged: Flag = False  # waits for the owner's accept; the file is unchanged
    before: Text | None = None  # the file's whole text before; None for notes
    after: Text | None = None
    notes: list[NoteId] = []  # ids of the notes.md entries this edit appended
    pending_notes: list[PendingNote] = []  # for a staged edit: appended on accept
    target: Count | None = None  # the edit an undo reverts or an accept/reject resolves

    @property
    def changes_file(self) -> bool:
        return not self.staged and self.before is not None and self.after is not None


class Journal:
    def __init__(self, directory: Path):
        self._dir = directory
        # Entries are never rewritten, so each is parsed once: listing the directory is what a
        # call costs, not reading every entry ever written (attack 31f).
        self._parsed: dict[str, Edit] = {}
        self._last: int | None = None  # the last entry's seq, once known (next_seq)

    def _names(self) -> list[str]:
        try:
            return sorted(p for p in os.listdir(self._dir) if p.endswith(".json"))
        except FileNotFoundError:
            return []

    def entries(self) -> list[Edit]:
        """Every entry, in order. One that does not parse is a StoreError naming its file."""
        names = self._names()
        if len(self._parsed) > len(names):
            self._parsed = {}  # entries were removed (a test's or an owner's fresh start)
        for name in names:
            if name not in self._parsed:
                path = self._dir / name
                try:
                    self._parsed[name] = Edit.model_validate_json(path.read_bytes())
                except (OSError, ValidationError) as exc:
                    raise StoreError(f"{path}: not a journal entry: {exc}") from None
        return [self._parsed[name] for name in names]

    def next_seq(self) -> int:
        """One past the last entry: the directory is listed once, then only the entries past
        the last one seen are looked for (one stat, not a listing of every write)."""
        if self._last is None:
            entries = self.entries()
            self._last = entries[-1].seq if entries else 0
        while self.path(self._last + 1).exists():
            self._last += 1
        return self._last + 1

    def path(self, seq: int) -> Path:
        return self._dir / f"{seq:08d}.json"

    def append(self, edit: Edit) -> Edit:
        path = self.path(edit.seq)
        if path.exists():
            raise StoreError(f"{path}: journal entry {edit.seq} exists already")
        self._dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        write_durably(path, edit.canonical() + b"\n", mode=0o640)
        return edit

    def undo_target(self, file: str) -> Edit | None:
        """The latest edit of ``file`` that changed it and is not itself undone or an undo."""
        entries = [e for e in self.entries() if e.file == file]
        undone = {e.target for e in entries if e.action == "undo"}
        for edit in reversed(entries):
            if edit.changes_file and edit.action != "undo" and edit.seq not in undone:
                return edit
        return None

    def staged(self) -> list[Edit]:
        """Staged edits the owner has neither accepted nor rejected."""
        entries = self.entries()
        resolved = {e.target for e in entries if e.action in ("accept", "reject")}
        return [e for e in entries if e.staged and e.seq not in resolved]


def text_hash(text: str) -> str:
    return sha256(text.encode("utf-8"))
