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

Room (docs/decisions/memory-writes-keep-the-reserve.md): a session's write is refused before
step 1 while the state filesystem would be left with less than the audit log's reserve free
(``[broker] audit_reserve_bytes`` and ``audit_reserve_inodes``), bytes or inodes, so memory
writes alone never eat the room kept for brokerd's record. A write that fails even so (another
writer filled the disk) is cut back: notes.md to its size before, the temporary files removed,
and the intent dropped unless the identity file already holds the new text (then the next
recovery completes it). notes.md is never left torn, so reads go on answering. A write whose
journal entry landed is done, whatever failed after it: nothing is cut back (that dropped a
note the journal listed, and its id was given again: attack 31f).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bxcore._base import Count, Model, Text
from bxcore.space import free_room, shortfall
from bxcore.util import fsync_dir, write_durably
from pydantic import ValidationError

from .errors import StoreError, WriteRefused
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


@dataclass(frozen=True)
class Reserve:
    """The room a session's memory write leaves free on the state filesystem: the audit log's
    reserve, read from ``[broker]`` (0 and 0: no check)."""

    size: int = 0  # bytes
    inodes: int = 0

    def check(self, directory: Path, needed: int, needed_inodes: int) -> None:
        """WriteRefused, saying the disk is low and naming the reserve, when writing
        ``needed`` bytes in ``needed_inodes`` new files where ``directory`` is would leave less
        than the reserve free."""
        if self.size <= 0 and self.inodes <= 0:
            return
        try:
            room = free_room(directory)
        except OSError as exc:
            raise WriteRefused(f"not written: the free space of the state filesystem cannot "
                               f"be read ({exc.strerror})") from None
        short = shortfall(room, self.size, self.inodes, needed=needed,
                          needed_inodes=needed_inodes, what_writes="this write takes")
        if short:
            log.error("a memory write refused: %d bytes and %s inodes free on the state "
                      "filesystem, reserves %d and %d", room.bytes,
                      room.inodes if room.counted else "uncounted", self.size, self.inodes)
            raise WriteRefused("not written: the disk is low: the state filesystem has " +
                               " and ".join(short) + "; nothing was written, memory still "
                               "answers reads; the owner can free space there, then write again")

    def check_entry(self, layout: Layout, entry: bytes) -> None:
        """The check for a journal entry written alone (a staged edit): one new file."""
        self.check(layout.edits, len(entry) + BLOCK, 1)


# What a new file may take beyond its bytes: its last block. A write counts one per file.
BLOCK = 4096
# New files a write makes: the intent (removed at the end), the journal entry, notes.md's first.
WRITE_INODES = 3


def commit(layout: Layout, journal: Journal, edit: Edit, notes: list[Note],
           reserve: Reserve | None = None) -> Edit:
    """Do one write in the steps above. The caller holds the lock and has recovered.
    ``reserve``: refuse (WriteRefused) before anything is written when the write would leave
    less than it free; a session's write passes one, the owner's commands do not."""
    data = render_append(notes, new_file=not layout.notes.exists())
    intent = Intent(edit=edit, notes_offset=_size(layout.notes), notes_data=data)
    encoded = intent.canonical() + b"\n"
    if reserve is not None:
        needed = len(encoded) + len(data.encode("utf-8")) + len(edit.canonical()) + 3 * BLOCK
        reserve.check(layout.edits, needed, WRITE_INODES)
    path = intent_path(layout, edit.seq)
    try:
        write_durably(path, encoded, mode=0o640)
    except OSError as exc:
        _remove(_temporary(path))
        raise WriteRefused(f"not written: {took_no_more(exc)}; nothing was written") from None
    try:
        _finish(layout, journal, intent)
    except OSError as exc:
        if journal.path(edit.seq).exists():  # recorded: only a step after the entry failed
            log.warning("memory edit %d is recorded; the step after its journal entry failed "
                        "(%s); the next recovery drops its intent", edit.seq, exc.strerror)
            return edit
        raise WriteRefused(_cut_back(layout, journal, intent, exc)) from None
    return edit


def _cut_back(layout: Layout, journal: Journal, intent: Intent, exc: OSError) -> str:
    """After a step failed: notes.md back to its size before (never torn), the temporary files
    removed, the intent dropped unless the write took effect (the identity file holds the new
    text): then the intent stays and the next recovery finishes the record. What to answer."""
    path = intent_path(layout, intent.edit.seq)
    with contextlib.suppress(OSError):
        if _size(layout.notes) > intent.notes_offset:
            os.truncate(layout.notes, intent.notes_offset)
    for temporary in (_temporary(journal.path(intent.edit.seq)),
                      _temporary(layout.identity(intent.edit.file))
                      if intent.edit.file != "notes.md" else None):
        _remove(temporary)
    log.error("memory edit %d (%s of %s) failed (%s); notes.md cut back to %d bytes",
              intent.edit.seq, intent.edit.action, intent.edit.file, exc.strerror,
              intent.notes_offset)
    if _took_effect(layout, intent, path):
        return (f"{intent.edit.file} was changed, but the record of the change could not be "
                f"finished ({exc.strerror}); memoryd finishes it at its next write")
    _remove(path)
    return f"not written: {took_no_more(exc)}; nothing was written"


def took_no_more(exc: OSError) -> str:
    """Why the state filesystem refused a write, as the model and the owner read it."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the state disk is full ({exc.strerror})"
    return f"the state filesystem took no more ({exc.strerror})"


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")  # bxcore.util.write_durably's


def _remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def recover(layout: Layout, journal: Journal, *, listing: bool = True) -> list[str]:
    """Finish or drop every intent a crash left; returns one line per intent saying which.
    ``listing`` False: only the intents the last write can have left are looked for, those of
    the last journal entry and the next: with one writer at a time, and every earlier intent
    finished or dropped by the recovery before that write, no other can be there. Listing the
    directory on every write cost as much as all writes ever made (attack 31f)."""
    outcomes = []
    if listing:
        with os.scandir(layout.edits) as found:
            intents = sorted(Path(entry.path) for entry in found if entry.name.endswith(SUFFIX))
    else:
        last = journal.next_seq() - 1
        intents = [path for path in (intent_path(layout, last), intent_path(layout, last + 1))
                   if path.exists()]
    for path in intents:
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
    before = _size(layout.notes)
    try:
        append_bytes(layout.notes, intent.notes_data.encode("utf-8")[len(written) :])
    except OSError:
        with contextlib.suppress(OSError):  # never a torn entry: readers parse the whole file
            os.truncate(layout.notes, before)
        raise
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
