"""What the recall index holds, derived from log records and notes by pure functions, so a live
turn and a reindex from the file give the same rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bxcore.records import Assistant, LogRecord, ToolResult, User
from bxcore.tools import DataClass

from ..notes import Note
from ..taint import SessionTaint


@dataclass(frozen=True, kw_only=True)
class Document:
    origin: str  # session:<id>/<epoch>#<line>, or note:<id>
    kind: str  # user, assistant, tool_result; note, moved, dropped
    session: str | None
    note: str | None
    data_class: DataClass
    untrusted: bool
    time: str
    text: str


def log_origin(session: str, epoch: int, line: int) -> str:
    return f"session:{session}/{epoch}#{line}"


def documents_from_records(
    session: str, epoch: int, first_line: int, records: Sequence[LogRecord]
) -> list[Document]:
    """User messages, assistant answers and tool results; the other records carry no text."""
    documents = []
    for offset, record in enumerate(records):
        data_class, untrusted, text = DataClass.PUBLIC, False, None
        if isinstance(record, User):
            kind, text = "user", record.content
        elif isinstance(record, Assistant):
            kind, text = "assistant", record.content
        elif isinstance(record, ToolResult):
            kind, text = "tool_result", record.content
            data_class, untrusted = record.data_class, record.untrusted
        if not text or not text.strip():
            continue
        documents.append(Document(
            origin=log_origin(session, epoch, first_line + offset), kind=kind, session=session,
            note=None, data_class=data_class, untrusted=untrusted, time=record.time, text=text,
        ))
    return documents


def taint_of_records(records: Sequence[LogRecord]) -> SessionTaint:
    taint = SessionTaint()
    for record in records:
        if isinstance(record, ToolResult):
            taint = taint.join(record.data_class, record.untrusted)
    return taint


def document_from_note(note: Note) -> Document:
    return Document(
        origin=f"note:{note.id}", kind=note.kind, session=None if note.session == "-" else
        note.session, note=note.id, data_class=note.data_class, untrusted=note.untrusted,
        time=note.time, text=note.text,
    )
