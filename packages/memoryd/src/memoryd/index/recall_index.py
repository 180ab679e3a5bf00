"""The recall index: SQLite FTS5 over the session logs and notes.md, kept by memoryd.

Disposable. ``reindex`` builds a fresh database beside the old one from the files alone and
renames it into place, so a crash mid-build leaves the old index, and a running memoryd notices
the new file and reopens it. A session's records are indexed while its taint is at or below the
ceiling; from the first one above it (in the log or brokerd's taint file) on, nothing more of it.

Each label (class, and whether untrusted) has its own FTS5 table, and a search reads only the
tables at or below the asking session's taint: bm25's statistics are per table, so nothing above
the session moves its answer (docs/decisions/recall-per-label.md).
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bxcore.ids import is_session_id
from bxcore.records import LogRecord, parse_record
from bxcore.tools import DataClass
from pydantic import ValidationError

from ..errors import IndexCorrupt, StoreError
from ..notes import Note
from ..taint import SessionTaint
from .documents import (
    Document,
    document_from_note,
    documents_from_records,
    log_origin,
    taint_of_records,
)
from .migrations import Database, transaction
from .schema import LABELS, RECALL_MIGRATIONS, label_table

TaintLookup = Callable[[str], SessionTaint]
# SQLite's page cache for the recall index, in KiB: ranking reads the doclists of the query's
# words and one docsize row per match, and at 1M records these pages no longer fit the default
# 2 MiB, so each query went back to the file (pread) for them. Pages are cached as read.
CACHE_KIB = 32 * 1024
_EPOCH_FILE = re.compile(r"(\d+)\.jsonl")
NOTES_SOURCE = "notes.md"


@dataclass(frozen=True, kw_only=True)
class Row:
    origin: str
    kind: str
    session: str | None
    data_class: DataClass
    untrusted: bool
    time: str
    snippet: str
    score: float


class RecallIndex:
    def __init__(self, path: Path, sessions_dir: Path, ceiling: DataClass):
        self.path = path
        self._sessions = sessions_dir
        self._ceiling = ceiling
        self._db = _open(path)
        self._inode = _inode(path)
        self._notes_unchecked = True  # see add_notes
        self._logs_read: dict[Path, tuple[int, int, int]] = {}  # see catch_up

    @property
    def _conn(self) -> sqlite3.Connection:
        return self._db.conn

    def close(self) -> None:
        self._db.close()

    def reopen_if_replaced(self) -> bool:
        """Reopen when ``memoryd reindex`` renamed a new database into place."""
        if _inode(self.path) == self._inode:
            return False
        self._db.close()
        self._db = _open(self.path)
        self._inode = _inode(self.path)
        self._notes_unchecked, self._logs_read = True, {}
        return True

    # -- writing ----------------------------------------------------------------------------

    def upto(self, source: str) -> int:
        row = self._conn.execute("SELECT upto FROM ingested WHERE source = ?", (source,)).fetchone()
        return int(row[0]) if row else 0

    def add_records(self, session: str, epoch: int, first_line: int,
                    records: Sequence[LogRecord], broker_taint: SessionTaint) -> int:
        """Index the records of lines ``first_line``...; returns how many documents were added.

        Each record is labelled with its session's taint when it is indexed: what the index
        had, brokerd's taint file now, and the tool results up to and including it. That label
        never changes: a session that rises later leaves its earlier rows where they are, since
        moving or deleting them would show a session below what the higher read was. From the
        first record above the ceiling on, the session is excluded and nothing more of it is
        indexed."""
        source = f"{session}/{epoch}.jsonl"
        last_line = first_line + len(records) - 1
        with transaction(self._db.writable()):
            known = self._conn.execute(
                "SELECT data_class, untrusted, excluded FROM sessions WHERE id = ?", (session,)
            ).fetchone()
            taint = SessionTaint(DataClass(known[0]), bool(known[1])) if known else SessionTaint()
            excluded = bool(known[2]) if known else False
            documents = {d.origin: d for d in
                         documents_from_records(session, epoch, first_line, records)}
            kept: list[Document] = []
            taint = taint | broker_taint
            for offset, record in enumerate(records):
                taint = taint | taint_of_records([record])
                excluded = excluded or taint.data_class > self._ceiling
                document = documents.get(log_origin(session, epoch, first_line + offset))
                if document is not None and not excluded:
                    kept.append(replace(document, data_class=taint.data_class,
                                        untrusted=taint.untrusted))
            excluded = excluded or taint.data_class > self._ceiling
            self._conn.execute(
                "INSERT INTO sessions (id, data_class, untrusted, excluded) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET data_class = excluded.data_class, "
                "untrusted = excluded.untrusted, excluded = excluded.excluded",
                (session, taint.data_class.value, int(taint.untrusted), int(excluded)),
            )
            added = self._insert(kept)
            self._conn.execute(
                "INSERT INTO ingested (source, upto) VALUES (?, ?) ON CONFLICT (source) "
                "DO UPDATE SET upto = max(upto, excluded.upto)",
                (source, last_line),
            )
        return added

    def add_notes(self, notes: Sequence[Note]) -> int:
        """Index the notes past the ones indexed: ``ingested`` holds how many entries of
        notes.md (append-only) are in. Before per-label note ids it held the highest id, which
        is that number only while the plain ids ran 1, 2, 3... in file order: an old file whose
        numbers skip one left that many new notes out (attack 31f). So the first call after the
        index is opened offers every note (one already in is ignored by its origin), and counts
        from there on."""
        done = 0 if self._notes_unchecked else self.upto(NOTES_SOURCE)
        fresh = notes[done:]
        if not fresh:
            return 0
        with transaction(self._db.writable()):
            added = self._insert(
                [document_from_note(n) for n in fresh if n.data_class <= self._ceiling]
            )
            self._conn.execute(
                "INSERT INTO ingested (source, upto) VALUES (?, ?) ON CONFLICT (source) "
                "DO UPDATE SET upto = excluded.upto",
                (NOTES_SOURCE, len(notes)),
            )
        self._notes_unchecked = False
        return added

    def _insert(self, documents: list[Document]) -> int:
        cursor = self._conn.executemany(
            "INSERT OR IGNORE INTO documents (origin, kind, session, note, data_class, "
            "untrusted, time, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(d.origin, d.kind, d.session, d.note, d.data_class.value, int(d.untrusted), d.time,
              d.text) for d in documents],
        )
        return max(cursor.rowcount, 0)  # rows of documents only; the FTS triggers' do not count

    def catch_up(self, taint_of: TaintLookup, notes: Sequence[Note]) -> int:
        """Index whatever the files hold beyond what is indexed: new lines of every session log,
        new notes. Only complete lines are read; a line that is not a record is a StoreError.
        A log whose inode, size and mtime are as when it was last read here is not read again:
        it holds nothing new (memoryd is told of each turn), and reading every log on every
        recall cost as much as all sessions ever logged."""
        added = 0
        for session, epoch, path in session_logs(self._sessions):
            seen = _stamp(path)
            if seen is not None and self._logs_read.get(path) == seen:
                continue
            done = self.upto(f"{session}/{epoch}.jsonl")
            records = read_log(path, skip=done)
            if records:
                added += self.add_records(session, epoch, done + 1, records, taint_of(session))
            if seen is not None:
                self._logs_read[path] = seen
        return added + self.add_notes(notes)

    # -- reading ----------------------------------------------------------------------------

    def search(self, query: str, k: int, taint: SessionTaint,
               snippet_tokens: int = 48) -> list[Row]:
        """The ``k`` best documents for ``query`` among those at or below ``taint`` (the asking
        session's): bm25 ascending, then origin, dropped notes left out.

        Each label has its own FTS5 table, whose bm25 statistics cover its own rows only, and
        only the tables at or below ``taint`` are read, so the answer (hits, order, scores,
        emptiness) depends on nothing above it. FTS5 ranks every match of each table, but only
        the ``k`` rows kept are joined and get a snippet."""
        match = fts_query(query)
        if match is None or k <= 0:
            return []
        reach = min(taint.data_class, self._ceiling)  # nothing above the ceiling is indexed
        tables = [label_table(data_class, untrusted) for data_class, untrusted in LABELS
                  if DataClass(data_class) <= reach and untrusted <= taint.untrusted]
        try:
            chosen = sorted((best for table in tables for best in self._best(table, match, k)),
                            key=lambda best: (best[1], best[2]))[:k]
            rows: list[tuple[Any, ...]] = [
                self._conn.execute(_DETAIL.format(table=table),
                                   (snippet_tokens, match, rowid)).fetchone()
                for rowid, _, _, table in chosen
            ]
        except sqlite3.Error as exc:
            raise IndexCorrupt(f"{self.path}: search failed: {exc}") from exc
        return [_row(row, score) for row, (_, score, _, _) in zip(rows, chosen, strict=True)]

    def _best(self, table: str, match: str, k: int) -> list[tuple[int, float, str, str]]:
        """(rowid, score, origin, table) of the ``k`` best of one label's table, in order.
        FTS5's ``ORDER BY rank LIMIT`` takes the first ``limit`` by bm25; the limit grows while
        dropped notes leave fewer than ``k``, or while the k-th score ties the last one fetched
        (the tie is broken by origin, so every row of that score must be seen)."""
        limit = max(4 * k, 32)
        ranked = _RANKED.format(table=table)
        while True:
            fetched = self._conn.execute(ranked, (match, limit)).fetchall()
            kept = sorted((row for row in fetched if row[3] != "dropped"),
                          key=lambda row: (row[1], row[2]))[:k]
            exhausted = len(fetched) < limit
            if exhausted or (len(kept) == k and kept[-1][1] < max(row[1] for row in fetched)):
                return [(rowid, score, origin, table) for rowid, score, origin, _ in kept]
            limit *= 4

    def counts(self) -> dict[str, int]:
        return {
            table: int(self._conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            for table in ("documents", "sessions", "ingested")
        }


# The ranking pass: FTS5 scores every match with bm25 (``rank``) and keeps the best ``limit``;
# only those are joined, for the origin (the tie-break) and the kind (dropped notes).
_RANKED = """SELECT f.rowid, round(f.rank, 6), d.origin, d.kind
    FROM (SELECT rowid, rank FROM {table} WHERE {table} MATCH ?
          ORDER BY rank LIMIT ?) AS f
    JOIN documents d ON d.id = f.rowid"""
# One chosen row with its snippet; its label is its table's (a log record's is its session's).
_DETAIL = """SELECT d.origin, d.kind, d.session, d.data_class, d.untrusted, d.time,
        snippet({table}, 0, '', '', '…', ?)
    FROM {table} JOIN documents d ON d.id = {table}.rowid
    WHERE {table} MATCH ? AND {table}.rowid = ?"""


def _row(detail: tuple[Any, ...], score: float) -> Row:
    """A result from one ``_DETAIL`` row and its bm25 score."""
    origin, kind, session, data_class, untrusted, time, snippet = detail
    return Row(origin=origin, kind=kind, session=session, data_class=DataClass(data_class),
               untrusted=bool(untrusted), time=time, snippet=snippet, score=score)


_WORD = re.compile(r"\w+", re.UNICODE)


def fts_query(query: str) -> str | None:
    """The model's free text as an FTS5 query: each word quoted (so no FTS5 syntax gets through),
    any of them may match, bm25 ranks. None when the query has no words."""
    words = _WORD.findall(query)[:32]
    if not words:
        return None
    return " OR ".join(f'"{word}"' for word in words)


def session_logs(sessions_dir: Path) -> list[tuple[str, int, Path]]:
    """Every ``sessions/<id>/<epoch>.jsonl``, sessions by name, epochs in order. A directory
    whose name is no session id (loopd's ``.new-*`` staging of a session not yet created) is no
    session."""
    logs = []
    try:
        session_dirs = sorted(p for p in sessions_dir.iterdir()
                              if p.is_dir() and is_session_id(p.name))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"{sessions_dir}: cannot list the sessions: {exc.strerror}") from None
    for directory in session_dirs:
        try:
            names = [path.name for path in directory.iterdir()]
        except OSError as exc:  # loopd's user owns it: it must be readable by the units' group
            raise StoreError(f"{directory}: cannot list the session: {exc.strerror}") from None
        for name in names:
            match = _EPOCH_FILE.fullmatch(name)
            if match:
                logs.append((directory.name, int(match[1]), directory / name))
    return sorted(logs, key=lambda item: (item[0], item[1]))


def read_log(path: Path, skip: int = 0) -> list[LogRecord]:
    """The complete lines of a session log after the first ``skip``; a torn last line (loopd is
    writing it) is left for later."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror}") from None
    lines = data.split(b"\n")[:-1]  # the part after the last newline is not complete yet
    records: list[LogRecord] = []
    for number, line in enumerate(lines[skip:], start=skip + 1):
        try:
            records.append(parse_record(line))
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"]
            raise StoreError(f"{path}: line {number}: not a log record: {problem}") from None
    return records


def _open(path: Path) -> Database:
    return Database(path, RECALL_MIGRATIONS, wal=False, pragmas=[f"PRAGMA cache_size=-{CACHE_KIB}"])


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return -1
