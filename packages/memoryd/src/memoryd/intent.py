"""Write-ahead for memory writes, so that a crash at any point leaves the files agreeing.

A write (an identity edit, an undo, an accept of a staged edit, a note) changes up to three
files: the identity file, notes.md and the journal. Each step is durable on its own; a crash
between two of them used to leave an identity edit with no journal entry (invisible to
``memoryd log`` and ``undo``) or notes without their edit. Now every such write goes:

    1. memory/edits/<seq>.intent  the journal entry as it will be, with notes.md's size before
                                  and the exact bytes the write appends to it (written durably)
    2. memory/<file>              the identity file's new text (written durably): the commit point
    3. memory/notes.md            the bytes recorded in step 1, appended
    4. memory/edits/<seq>.json    the journal entry (written durably)
    5. the intent file is removed

``recover`` (run on start and, under the lock, before every write) takes an intent left behind
and decides from the files alone whether its write took effect: it did if notes.md holds any of
its bytes at the recorded offset, or if the identity file holds the new text (and that differs
from the old). If it did, the missing steps are done: the file is written only while it still
holds the old text, a torn append is completed from where it stopped, the entry is journalled.
If it did not, the intent is removed and nothing else changes. Either way the journal then says
exactly what the files hold, and each step is idempotent, so a crash during recovery is
recovered the same way. A ``.intent`` file is not a journal entry: ``Journal.entries`` never
reads it, so the journal's format is unchanged.

One writer at a time: every write and every recovery holds an flock on ``memory/edits/.lock``,
so ``memoryd undo`` run beside a serving memoryd never takes the other's write for a crash.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bxcore._base import Count, Model, Text
from bxcore.util import fsync_dir, write_durably
from pydantic import ValidationError

from .errors import StoreError
from .journal import Edit, Journal, text_hash
from .layout import Layout, read_text
from .notes import Note, append_bytes, render_append

log = logging.getLogger("memoryd")
SUFFIX = ".intent"


class Intent(Model):
    edit: Edit  # the journal entry, exactly as step 4 writes it
    notes_offset: Count  # notes.md's size in bytes before the write
    notes_data: Text  # exactly what the write appends to notes.md; "" for none


@contextmanager
def writer_lock(layout: Layout) -> Iterator[None]:
    """Hold memoryd's writer lock (released by the kernel if the holder dies)."""
    layout.edits.mkdir(mode=0o750, parents=True, exist_ok=True)
    fd = os.open(layout.edits / ".lock", os.O_RDWR | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def commit(layout: Layout, journal: Journal, edit: Edit, notes: list[Note]) -> Edit:
    """Do one write in the steps above. The caller holds the lock and has recovered."""
    data = render_append(notes, new_file=not layout.notes.exists())
    intent = Intent(edit=edit, notes_offset=_size(layout.notes), notes_data=data)
    write_durably(intent_path(layout, edit.seq), intent.canonical() + b"\n", mode=0o640)
    _finish(layout, journal, intent)
    return edit


def recover(layout: Layout, journal: Journal) -> list[str]:
    """Finish or drop every intent a crash left; returns one line per intent saying which."""
    outcomes = []
    for path in sorted(layout.edits.glob(f"*{SUFFIX}")):
        intent = _read(path)
        seq = intent.edit.seq
        if journal.path(seq).exists():
            _discard(path)
            outcome = "was complete"
        elif _took_effect(layout, intent, path):
            _finish(layout, journal, intent)
            outcome = "took effect; completed"
        else:
            _discard(path)
            outcome = "had not taken effect; dropped"
        log.warning(
            "recovered edit %d (%s of %s) after a crash: %s",
            seq,
            intent.edit.action,
            intent.edit.file,
            outcome,
        )
        outcomes.append(f"edit {seq}: {outcome}")
    return outcomes


def intent_path(layout: Layout, seq: int) -> Path:
    return layout.edits / f"{seq:08d}{SUFFIX}"


def _finish(layout: Layout, journal: Journal, intent: Intent) -> None:
    edit = intent.edit
    path = intent_path(layout, edit.seq)
    if edit.changes_file:
        assert edit.before is not None and edit.after is not None
        identity = layout.identity(edit.file)
        current = text_hash(read_text(identity))
        # Only over the old text: anything else is the owner's, written after the commit point.
        if current == text_hash(edit.before) != text_hash(edit.after):
            write_durably(identity, edit.after.encode("utf-8"), mode=0o640)
    written = _notes_written(layout, intent, path)
    append_bytes(layout.notes, intent.notes_data.encode("utf-8")[len(written) :])
    if not journal.path(edit.seq).exists():
        journal.append(edit)
    _discard(path)


def _took_effect(layout: Layout, intent: Intent, path: Path) -> bool:
    if _notes_written(layout, intent, path):
        return True
    edit = intent.edit
    if not edit.changes_file:
        return False
    assert edit.before is not None and edit.after is not None
    current = text_hash(read_text(layout.identity(edit.file)))
    return current == text_hash(edit.after) != text_hash(edit.before)


def _notes_written(layout: Layout, intent: Intent, path: Path) -> bytes:
    """The part of the intent's notes that notes.md already holds at its offset (a prefix)."""
    data = intent.notes_data.encode("utf-8")
    if not data:
        return b""
    offset = intent.notes_offset
    try:
        with layout.notes.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(offset)
            tail = handle.read(len(data) + 1)
    except FileNotFoundError:
        size, tail = 0, b""
    if size < offset or not data.startswith(tail):
        raise StoreError(
            f"{layout.notes}: what follows byte {offset} is not what {path.name} appends; "
            "notes.md was changed by hand after a crash, so memoryd will not guess"
        )
    return tail


def _read(path: Path) -> Intent:
    try:
        return Intent.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise StoreError(f"{path}: not an intent: {exc}") from None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _discard(path: Path) -> None:
    path.unlink()
    fsync_dir(path.parent)
