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
        line_no = text.count("\n", 0, position) + 1
        end_of_header = text.find("\n", position)
        if end_of_header < 0:
            raise StoreError(f"{where}: line {line_no}: the entry header is torn")
        match = _HEADER.fullmatch(text, position, end_of_header)
        if match is None:
            raise StoreError(f"{where}: line {line_no}: not a notes.md entry header")
        start = end_of_header + 1
        end = start + int(match["chars"])
        if text[end : end + 2] != "\n\n":
            raise StoreError(
                f"{where}: line {line_no}: entry {match['id']} is torn or its length is wrong"
            )
        data_class, untrusted = DataClass(match["cls"]), match["trust"] == "untrusted"
        if not match["id"].isdigit() and match["id"].rpartition("-")[0] != label_of(
                data_class, untrusted):
            raise StoreError(f"{where}: line {line_no}: note {match['id']}'s id does not name "
                             f"its label, {label_of(data_class, untrusted)}")
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


def label_of(data_class: DataClass, untrusted: bool) -> str:
    """The label part of a note id: ``public``, ``private-untrusted``..."""
    return data_class.value + ("-untrusted" if untrusted else "")


def next_ids(notes: list[Note], labels: list[tuple[DataClass, bool]]) -> list[str]:
    """Ids for new notes of ``labels`` (in order) after ``notes``: each the next number of its
    own label. Only the ids of that label are read, so an id says nothing of other labels."""
    highest: dict[str, int] = {}
    for note in notes:
        label, _, number = note.id.rpartition("-")
        if label:
            highest[label] = max(highest.get(label, 0), int(number))
    ids = []
    for data_class, untrusted in labels:
        label = label_of(data_class, untrusted)
        highest[label] = highest.get(label, 0) + 1
        ids.append(f"{label}-{highest[label]}")
    return ids


def read_notes(path: Path) -> list[Note]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from None
    return parse_notes(text, path)


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
