"""The ``memory`` tool and the owner's commands on memory files: the rules, then the I/O.

The taint rule (brief, Memory item 1): ``note`` in any session; ``add``, ``replace``, ``remove``
and ``consolidate`` only in a session that has not read untrusted content and whose class is at
or below ``identity_ceiling`` (default public: identity is in every session's prompt, and brokerd
starts every session at that class). In any other session an identity ``add`` becomes a ``note``
of the session's class and the other edits are refused. An entry that leaves identity becomes a
note of the class it was written at (the journal's edit that brought it in), never lower. Files
change on disk at once; the prompt sees them at the next epoch, because memoryd freezes each
epoch's identity snapshot.

Every public method holds the writer lock and first recovers what a crash left (intent.py), so
each write starts from files that agree with the journal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from bxcore.memory_tool import split_entries
from bxcore.tools import DataClass
from bxcore.util import now_rfc3339

from .arguments import AddArgs, MemoryArgs, NoteArgs
from .edits import IdentityChange, plan_identity_edit, sanitized
from .errors import CommandRefused, TaintRefused, WriteRefused
from .intent import Reserve, commit, recover, took_no_more, writer_lock
from .journal import Edit, Journal, PendingNote, text_hash
from .layout import IDENTITY_LIMITS, Layout, read_text
from .notes import Note, NotesFile

log = logging.getLogger("memoryd")


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who is writing: the session, and its taint as brokerd reported it (and memoryd checked)."""

    session: str
    data_class: DataClass
    untrusted: bool


class MemoryWriter:
    def __init__(self, layout: Layout, *, stage_identity_writes: bool,
                 identity_ceiling: DataClass = DataClass.PUBLIC,
                 clock: Callable[[], str] = now_rfc3339, reserve: Reserve | None = None,
                 notes: NotesFile | None = None):
        self.layout = layout
        self.notes = notes or NotesFile(layout.notes)  # parsed once, kept (shared with recall)
        self._reserve = reserve or Reserve()  # kept free by a session's writes, not the owner's
        self.journal = Journal(layout.edits)
        self._stage = stage_identity_writes
        self._ceiling = identity_ceiling
        self._clock = clock
        try:
            self.recover()
        except OSError as exc:  # finishing needs room: memoryd starts, each write tries again
            log.warning("an earlier memory write is not finished yet: %s", took_no_more(exc))

    def recover(self) -> list[str]:
        """Finish or drop what a crash left half done (see intent.py); one line per edit."""
        with writer_lock(self.layout):
            return recover(self.layout, self.journal)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with writer_lock(self.layout):
            try:
                # The start's recovery listed every intent; since then only this writer's
                # last write can have left one (the lock keeps other writers out meanwhile).
                recover(self.layout, self.journal, listing=False)
            except OSError as exc:  # finishing an earlier write needs room too
                raise WriteRefused(f"not written: an earlier write could not be finished yet: "
                                   f"{took_no_more(exc)}; nothing more was written") from None
            yield

    # -- the memory tool ------------------------------------------------------------------

    def write(self, args: MemoryArgs, caller: Caller) -> str:
        """Do one memory tool call; returns the text for the model. Raises WriteRefused."""
        with self._transaction():
            return self._write(args, caller)

    def _write(self, args: MemoryArgs, caller: Caller) -> str:
        if isinstance(args, NoteArgs):
            note = self._note(sanitized(args.text), caller)
            return f"Noted as note {note.id} in notes.md."
        why = self._identity_barred(caller)
        if why is not None:
            if isinstance(args, AddArgs):
                note = self._note(sanitized(args.text), caller)
                return (
                    f"This session {why}, so it cannot edit {args.file}; the entry was recorded "
                    f"as note {note.id} in notes.md instead."
                )
            raise TaintRefused(
                f"{args.action} of {args.file} refused: this session {why}, so it may only "
                "write notes"
            )
        # What the session is told depends on its own call, the identity file (in every
        # session's prompt, written only at or below every session's label) and notes of its
        # own label: never the journal's sequence number, which counts every write of every
        # class (docs/decisions/memory-ids-per-label.md). The owner finds the number in
        # ``memoryd staged`` and ``memoryd log``.
        change = plan_identity_edit(args, read_text(self.layout.identity(args.file)))
        if self._stage:
            self._record(change, args.action, caller, staged=True)
            return (
                f"Staged for the owner's review (memoryd staged lists it); if accepted, the edit "
                f"of {args.file} takes effect at the next epoch."
            )
        self._apply(change, args.action, caller.session, caller.data_class,
                    reserve=self._reserve)
        size = len(change.after.strip())
        return (
            f"{args.file} updated ({size:,} of {IDENTITY_LIMITS[args.file]:,} characters). "
            "It takes effect at the next epoch."
        )

    def _identity_barred(self, caller: Caller) -> str | None:
        """Why ``caller`` may not edit identity, or None."""
        if caller.untrusted:
            return "has read untrusted content"
        if caller.data_class > self._ceiling:
            return (f"holds {caller.data_class.value} data, above what identity may hold "
                    f"({self._ceiling.value}: identity is in every session's prompt)")
        return None

    def _note(self, text: str, caller: Caller) -> Note:
        (note_id,) = self.notes.next_ids([(caller.data_class, caller.untrusted)])
        note = Note(
            id=note_id, kind="note", time=self._clock(), session=caller.session,
            data_class=caller.data_class, untrusted=caller.untrusted, text=text,
        )
        commit(self.layout, self.journal, Edit(
            seq=self.journal.next_seq(), time=note.time, session=caller.session,
            data_class=caller.data_class, file="notes.md", action="note",
            summary=text[:60], notes=[note.id],
        ), [note], self._reserve)
        return note

    def _record(self, change: IdentityChange, action: str, caller: Caller, *,
                staged: bool) -> Edit:
        edit = Edit(
            seq=self.journal.next_seq(), time=self._clock(), session=caller.session,
            data_class=caller.data_class, file=change.file,  # type: ignore[arg-type]
            action=action,  # type: ignore[arg-type]
            summary=change.summary, staged=staged, before=change.before, after=change.after,
            pending_notes=list(change.pending),
        )
        self._reserve.check_entry(self.layout, edit.canonical())
        return self.journal.append(edit)

    def _apply(self, change: IdentityChange, action: str, session: str | None,
               data_class: DataClass | None, target: int | None = None, *,
               reserve: Reserve | None = None) -> Edit:
        """Write the file, append what left it to notes.md, journal the edit (intent.commit);
        ``reserve``: the room a session's write leaves (the owner's commands pass none)."""
        time = self._clock()
        notes = self._pending_to_notes(change.pending, change.file, session, data_class, time)
        return commit(self.layout, self.journal, Edit(
            seq=self.journal.next_seq(), time=time, session=session, data_class=data_class,
            file=change.file,  # type: ignore[arg-type]
            action=action,  # type: ignore[arg-type]
            summary=change.summary, before=change.before, after=change.after,
            notes=[n.id for n in notes], target=target,
        ), notes, reserve)

    def _pending_to_notes(self, pending: tuple[PendingNote, ...], file: str,
                          session: str | None, data_class: DataClass | None,
                          time: str) -> list[Note]:
        edits = self.journal.entries()
        classes = [max(data_class or DataClass.PUBLIC, origin_class(edits, file, p.text))
                   for p in pending]
        ids = self.notes.next_ids([(c, False) for c in classes])
        return [
            Note(id=note_id, kind=p.kind, time=time, session=session or "-",
                 data_class=note_class, untrusted=False, text=p.text, source=file)
            for note_id, note_class, p in zip(ids, classes, pending, strict=True)
        ]

    # -- the owner's commands ---------------------------------------------------------------

    def undo(self, file: str) -> Edit:
        """Revert the latest edit of ``file`` that is not undone; journalled as an ``undo``."""
        with self._transaction():
            return self._undo(file)

    def _undo(self, file: str) -> Edit:
        if file == "notes.md":
            raise CommandRefused("notes.md is append-only: its entries cannot be undone")
        if file not in ("memory.md", "user.md"):
            raise CommandRefused(f"{file}: only memory.md and user.md are edited by memoryd")
        target = self.journal.undo_target(file)
        if target is None:
            raise CommandRefused(f"{file}: no edit to undo")
        assert target.before is not None and target.after is not None
        current = read_text(self.layout.identity(file))
        if text_hash(current) != text_hash(target.after):
            raise CommandRefused(
                f"{self.layout.identity(file)} changed after edit {target.seq}; undo will not "
                "overwrite it (edit the file by hand, or undo the later change first)"
            )
        change = IdentityChange(
            file=file, before=current, after=target.before,
            summary=f"undo edit {target.seq} ({target.action})",
        )
        return self._apply(change, "undo", None, None, target=target.seq)

    def accept(self, seq: int) -> Edit:
        with self._transaction():
            return self._accept(seq)

    def _accept(self, seq: int) -> Edit:
        staged = self._staged(seq)
        assert staged.before is not None and staged.after is not None
        current = read_text(self.layout.identity(staged.file))
        if text_hash(current) != text_hash(staged.before):
            raise CommandRefused(
                f"{staged.file} changed since edit {seq} was staged; reject it and let the "
                "agent write it again"
            )
        change = IdentityChange(
            file=staged.file, before=current, after=staged.after,
            summary=f"accept edit {seq}: {staged.summary}", pending=tuple(staged.pending_notes),
        )
        return self._apply(change, "accept", staged.session, staged.data_class, target=seq)

    def reject(self, seq: int) -> Edit:
        with self._transaction():
            staged = self._staged(seq)
            return self.journal.append(Edit(
                seq=self.journal.next_seq(), time=self._clock(), session=None, file=staged.file,
                action="reject", summary=f"reject edit {seq}: {staged.summary}", target=seq,
            ))

    def _staged(self, seq: int) -> Edit:
        for edit in self.journal.staged():
            if edit.seq == seq:
                return edit
        raise CommandRefused(f"edit {seq} is not a staged edit waiting for review")


def origin_class(edits: list[Edit], file: str, entry: str) -> DataClass:
    """The class ``entry`` of ``file`` was written at: the highest of the applied edits that
    brought it into the file. An entry no edit brought (the owner wrote it by hand, or before
    the journal) is private, as the owner's own words are."""
    found: DataClass | None = None
    for edit in edits:
        if (edit.file != file or not edit.changes_file or edit.after is None
                or edit.data_class is None):
            continue
        if entry in split_entries(edit.after) and entry not in split_entries(edit.before or ""):
            found = edit.data_class if found is None else max(found, edit.data_class)
    return DataClass.PRIVATE if found is None else found
