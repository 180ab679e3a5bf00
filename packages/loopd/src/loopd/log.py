"""The session log's bytes, as a pure codec: records to lines and lines to records.

A log is one canonical-JSON record per line, each line ending in ``\\n``. Its first record is the
``session_start`` of its epoch and no other line is one; an ``epoch_end`` (compaction closed the
epoch) can only be its last line and names the epoch after it. A log whose last line has no
newline was cut short by a crash and is refused (``TornLog``); any other bad line is refused too
(``CorruptSession``). Both name the file and the line: nothing is repaired silently.
"""

from __future__ import annotations

from bxcore.frames import describe_validation
from bxcore.records import (
    Assistant,
    CacheLoss,
    EpochEnd,
    SessionStart,
    ToolResult,
    Usage,
    User,
    parse_record,
)
from pydantic import ValidationError

from .errors import CorruptSession, TornLog

Record = SessionStart | User | Assistant | Usage | ToolResult | CacheLoss | EpochEnd


def encode_record(record: Record) -> bytes:
    """One line of the log."""
    return record.canonical() + b"\n"


def parse_log(data: bytes, source: str, *, session: str, epoch: int) -> list[Record]:
    """Every record of one epoch's log, checked line by line and as a whole.

    ``source`` names the file in errors; ``session`` and ``epoch`` are what its
    ``session_start`` must say."""
    lines = data.split(b"\n")
    tail = lines.pop()  # what follows the last newline: nothing, in a log that is whole
    if tail:
        raise TornLog(
            f"{source}: line {len(lines) + 1} is incomplete (no newline after its "
            f"{len(tail)} bytes): a write was cut short; move the line away to resume"
        )
    records = [_parse_line(line, source, number) for number, line in enumerate(lines, 1)]
    _check_shape(records, source, session=session, epoch=epoch)
    return records


def _parse_line(line: bytes, source: str, number: int) -> Record:
    try:
        return parse_record(line)
    except ValidationError as exc:
        raise CorruptSession(f"{source}: line {number}: {describe_validation(exc)}") from None


def _check_shape(records: list[Record], source: str, *, session: str, epoch: int) -> None:
    if not records:
        raise CorruptSession(f"{source}: the log is empty; it must start with session_start")
    first = records[0]
    if not isinstance(first, SessionStart):
        raise CorruptSession(f"{source}: line 1 is {first.type}, not session_start")
    if first.session != session or first.epoch != epoch:
        raise CorruptSession(
            f"{source}: line 1 starts session {first.session!r} epoch {first.epoch}, "
            f"but the file is session {session!r} epoch {epoch}"
        )
    for number, record in enumerate(records[1:], 2):
        if isinstance(record, SessionStart):
            raise CorruptSession(f"{source}: line {number}: a second session_start")
        if isinstance(record, EpochEnd):
            if number != len(records):
                raise CorruptSession(f"{source}: line {number}: epoch_end is not the last line")
            if record.next_epoch != epoch + 1:
                raise CorruptSession(
                    f"{source}: line {number}: epoch_end names epoch {record.next_epoch}, "
                    f"not {epoch + 1}"
                )
