"""``memory/notes.md``: experience, append-only, readable by the owner and parsed by memoryd.

Each entry is a header line, then exactly ``chars`` characters of text, then a blank line::

  ### note public-4 time=2026-11-30T07:00:00.000000Z session=s1 class=public trust=trusted chars=31
    The owner's CI runs on Fridays.

A note's id is its label (class, and ``-untrusted`` when untrusted) and its number among the
notes of that label: ``public-3`` is the third public trusted note. Numbering per label means an
id (which the writing session is told, and which recall shows as the origin ``note:<id>``)
counts only notes at the note's own label, never how many notes sessions of other labels wrote
(docs/decisions/memory-ids-per-label.md). Notes written before that carry a plain number, one
counter over the whole file; they keep it, and new numbering never produces one.

Kinds: ``note`` (the memory tool's note), ``moved`` and ``dropped`` (what left an identity file;
they carry ``from=memory.md`` or ``from=user.md``). Because the header gives the length, text
that happens to look like a header is read as text, never as a new entry.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bxcore.tools import DataClass
from bxcore.util import fsync_dir

from .errors import StoreError

NoteKind = Literal["note", "moved", "dropped"]
PREAMBLE = "# notes.md: append-only experience. Each header gives its entry's length.\n\n"
_HEADER = re.compile(
    r"### (?P<kind>note|moved|dropped) (?P<id>\d+|(?:public|private|secret)(?:-untrusted)?-\d+)"
    r" time=(?P<time>\S+) session=(?P<session>\S+)"
    r" class=(?P<cls>public|private|secret) trust=(?P<trust>trusted|untrusted)"
    r"(?: from=(?P<source>memory\.md|user\.md))? chars=(?P<chars>\d+)"
)


@dataclass(frozen=True, kw_only=True)
class Note:
    id: str  # "<label>-<n>" (label_of), or a plain number for a note from before per-label ids
    kind: NoteKind
    time: str
    session: str  # "-" when no session wrote it (an owner's accept of a staged edit)
    data_class: DataClass
    untrusted: bool
    text: str
    source: str | None = None  # the identity file a moved or dropped entry left

    def render(self) -> str:
        trust = "untrusted" if self.untrusted else "trusted"
        origin = f" from={self.source}" if self.source else ""
        return (
            f"### {self.kind} {self.id} time={self.time} session={self.session} "
            f"class={self.data_class.value} trust={trust}{origin} chars={len(self.text)}\n"
            f"{self.text}\n\n"
        )


def parse_notes(text: str, where: Path | str = "notes.md") -> list[Note]:
    """Every entry of a notes.md text. A torn or malformed entry is a StoreError naming the line."""
    notes: list[Note] = []
    position = text.find("### ") if not text.startswith("### ") else 0
    if position < 0:
        if text.strip() and text != PREAMBLE:
            raise StoreError(f"{where}: line 1: no entry header found")
        return notes
    while position < len(text):
        end_of_header = text.find("\n", position)
        if end_of_header < 0:
            raise _bad(text, position, where, "the entry header is torn")
        match = _HEADER.fullmatch(text, position, end_of_header)
        if match is None:
            raise _bad(text, position, where, "not a notes.md entry header")
        start = end_of_header + 1
        end = start + int(match["chars"])
        if text[end : end + 2] != "\n\n":
            raise _bad(text, position, where, f"entry {match['id']} is torn or its length is wrong")
        data_class, untrusted = DataClass(match["cls"]), match["trust"] == "untrusted"
        if not match["id"].isdigit() and match["id"].rpartition("-")[0] != label_of(
                data_class, untrusted):
            raise _bad(text, position, where, f"note {match['id']}'s id does not name its "
                       f"label, {label_of(data_class, untrusted)}")
        notes.append(
            Note(
                id=match["id"], kind=match["kind"], time=match["time"],  # type: ignore[arg-type]
                session=match["session"], data_class=data_class,
                untrusted=untrusted, text=text[start:end],
                source=match["source"],
            )
        )
        position = end + 2
    return notes


def _bad(text: str, position: int, where: Path | str, problem: str) -> StoreError:
    """The error for the entry at ``position``, naming its line: counted only here, since
    counting lines for every entry made a parse quadratic in the file's size (attack 31f)."""
    line = text.count("\n", 0, position) + 1
    return StoreError(f"{where}: line {line}: {problem}")


def label_of(data_class: DataClass, untrusted: bool) -> str:
    """The label part of a note id: ``public``, ``private-untrusted``..."""
    return data_class.value + ("-untrusted" if untrusted else "")


def highest_numbers(notes: Iterable[Note], highest: dict[str, int] | None = None
                    ) -> dict[str, int]:
    """Each label's highest note number among ``notes`` (added to ``highest``); plain numbers,
    from before per-label ids, belong to no label."""
    highest = {} if highest is None else highest
    for note in notes:
        label, _, number = note.id.rpartition("-")
        if label:
            highest[label] = max(highest.get(label, 0), int(number))
    return highest


def next_ids(highest: Mapping[str, int], labels: list[tuple[DataClass, bool]]) -> list[str]:
    """Ids for new notes of ``labels`` (in order) after notes whose ``highest_numbers`` are
    ``highest``: each the next number of its own label. Only the ids of that label are read, so
    an id says nothing of other labels."""
    taken = dict(highest)
    ids = []
    for data_class, untrusted in labels:
        label = label_of(data_class, untrusted)
        taken[label] = taken.get(label, 0) + 1
        ids.append(f"{label}-{taken[label]}")
    return ids


def read_notes(path: Path) -> list[Note]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from None
    return parse_notes(text, path)


class NotesFile:
    """notes.md as parsed, kept between calls: parsing it whole for every memory call made a
    call's cost grow with every note ever written (attack 31f: 55 s a call at 8,000 notes).
    Each read stats the file and parses only what changed: nothing when its inode, size and
    mtime are as last parsed; what was appended past the parsed part when the same file only
    grew (memoryd's own writes, and appends by anyone: the file is append-only); the whole file
    when it was replaced, cut back (a failed write) or rewritten at its size."""

    def __init__(self, path: Path):
        self.path = path
        self._notes: list[Note] = []
        self._highest: dict[str, int] = {}
        self._parsed: tuple[int, int, int, int] | None = None  # dev, inode, size, mtime_ns

    def notes(self) -> Sequence[Note]:
        """Every entry, as ``read_notes`` gives them. A StoreError if the file is torn."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._notes, self._highest, self._parsed = [], {}, None
            return self._notes
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot read: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if now == self._parsed:
                return self._notes
            last = self._parsed
            grown = last is not None and last[:2] == now[:2] and now[2] > last[2]
            start = last[2] if grown and last is not None else 0
            data = _read_from(fd, start)
        finally:
            os.close(fd)
        try:
            fresh = parse_notes(data.decode("utf-8"), self.path)
        except UnicodeDecodeError as exc:
            raise StoreError(f"{self.path}: cannot read: {exc}") from None
        except StoreError:
            if not grown:
                raise
            self._parsed = None  # the whole file names the line that is wrong
            return self.notes()
        if grown:
            self._notes.extend(fresh)
        else:
            self._notes, self._highest = fresh, {}
        highest_numbers(fresh, self._highest)
        self._parsed = (*now[:2], start + len(data), now[3])
        return self._notes

    def next_ids(self, labels: list[tuple[DataClass, bool]]) -> list[str]:
        """``next_ids`` after the notes the file holds now."""
        self.notes()
        return next_ids(self._highest, labels)


def _read_from(fd: int, offset: int) -> bytes:
    chunks = []
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def render_append(notes: list[Note], *, new_file: bool) -> str:
    """What appending ``notes`` adds to notes.md: their entries, after the preamble if the file
    does not exist yet."""
    data = "".join(note.render() for note in notes)
    return PREAMBLE + data if new_file and data else data


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` durably (one write, then fsync). notes.md is only ever appended to."""
    if not data:
        return
    new_file = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if new_file:
        fsync_dir(path.parent)
