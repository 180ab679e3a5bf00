"""``memory/notes.md``: experience, append-only, readable by the owner and parsed by memoryd.

Each entry is a header line, then exactly ``chars`` characters of text, then a blank line::

    ### note 17 time=2026-11-30T07:00:00.000000Z session=s1 class=private trust=untrusted chars=31
    The owner's CI runs on Fridays.

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
    r"### (?P<kind>note|moved|dropped) (?P<id>\d+) time=(?P<time>\S+) session=(?P<session>\S+)"
    r" class=(?P<cls>public|private|secret) trust=(?P<trust>trusted|untrusted)"
    r"(?: from=(?P<source>memory\.md|user\.md))? chars=(?P<chars>\d+)"
)


@dataclass(frozen=True, kw_only=True)
class Note:
    id: int
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
        notes.append(
            Note(
                id=int(match["id"]), kind=match["kind"], time=match["time"],  # type: ignore[arg-type]
                session=match["session"], data_class=DataClass(match["cls"]),
                untrusted=match["trust"] == "untrusted", text=text[start:end],
                source=match["source"],
            )
        )
        position = end + 2
    return notes


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
