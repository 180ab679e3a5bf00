"""Where the audit log ends: its last record (seq and hash, to chain the next one to) and any
torn bytes after it, found by reading the newest file backwards from its end until the newline
before its last line. Start-up costs the length of the last record, however long that is, not
the length of the log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import AuditError
from .records import GENESIS, line_of, parse_line

CHUNK = 64 * 1024


@dataclass(frozen=True)
class End:
    """The durable end of the log: the file appended to, its length up to the last newline,
    and the last record's seq and hash (0 and GENESIS for an empty log)."""

    path: Path
    size: int
    seq: int
    head: str


@dataclass(frozen=True)
class Tail:
    """What follows a file's last newline: ``torn`` bytes that end no line (a write cut short
    by a crash), to be cut back to ``end.size``."""

    end: End
    torn: bytes


def _last_lines(path: Path) -> tuple[bytes | None, int, bytes]:
    """The file's last complete line (None when it has none), the length up to and including
    its newline, and the bytes after that newline."""
    try:
        with path.open("rb") as handle:
            position = handle.seek(0, os.SEEK_END)
            pieces: list[bytes] = []
            newlines: list[int] = []  # offsets in the file, the last one first
            while position > 0 and len(newlines) < 2:
                step = min(CHUNK, position)
                position -= step
                handle.seek(position)
                piece = handle.read(step)
                pieces.append(piece)
                at = len(piece)
                while len(newlines) < 2 and (at := piece.rfind(b"\n", 0, at)) >= 0:
                    newlines.append(position + at)
    except OSError as exc:
        raise AuditError(f"{path}: cannot read: {exc.strerror}") from None
    data = b"".join(reversed(pieces))  # the file from ``position`` to its end
    if not newlines:
        return None, 0, data
    start = newlines[1] + 1 if len(newlines) > 1 else 0
    return (data[start - position:newlines[0] - position], newlines[0] + 1,
            data[newlines[0] + 1 - position:])


def find_tail(files: list[Path], directory: Path) -> Tail:
    """The log's end, from the newest file back to the first that holds a record. Torn bytes
    are those of the newest file that has any bytes; a last complete line that is not a record
    or does not match its hash is refused (that is not a torn write)."""
    newest = files[-1] if files else directory / f"{1:08d}.jsonl"
    torn: bytes | None = None
    size = 0
    for path in reversed(files):
        line, length, after = _last_lines(path)
        if torn is None and (line is not None or after):
            newest, size, torn = path, length, after
        if line is None:
            continue
        try:
            entry, stored = parse_line(line)
        except ValueError:
            raise AuditError(f"{path}: the last line is not an audit record; run "
                             "'brokerd audit verify'") from None
        if line_of(entry)[1] != stored:
            raise AuditError(f"{path}: the last record (seq {entry.seq}) does not match "
                             "its hash; run 'brokerd audit verify'")
        return Tail(End(newest, size, entry.seq, stored), torn or b"")
    return Tail(End(newest, size, 0, GENESIS), torn or b"")
