"""The two databases under ``index/`` and their migrations.

``recall.sqlite`` is disposable: everything in it is derived from sessions/, memory/notes.md and
brokerd's taint files, and ``memoryd reindex`` rebuilds it. ``state.sqlite`` holds what cannot be
derived, so reindex keeps it: recall hit counts, and the ledger of what was written to Honcho
(Honcho does not de-duplicate).
"""

from __future__ import annotations

import logging
import sqlite3

log = logging.getLogger("memoryd")


def m001_documents(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE documents (
            id INTEGER PRIMARY KEY,
            origin TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            session TEXT,
            note INTEGER,
            data_class TEXT NOT NULL,
            untrusted INTEGER NOT NULL,
            time TEXT NOT NULL,
            text TEXT NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX documents_session ON documents (session)")
    conn.execute(
        "CREATE VIRTUAL TABLE documents_fts USING fts5(text, content='documents', "
        "content_rowid='id', tokenize='unicode61 remove_diacritics 2')"
    )
    conn.execute(
        """CREATE TRIGGER documents_ai AFTER INSERT ON documents BEGIN
            INSERT INTO documents_fts (rowid, text) VALUES (new.id, new.text);
        END"""
    )
    conn.execute(
        """CREATE TRIGGER documents_ad AFTER DELETE ON documents BEGIN
            INSERT INTO documents_fts (documents_fts, rowid, text)
                VALUES ('delete', old.id, old.text);
        END"""
    )
    conn.execute(
        """CREATE TRIGGER documents_au AFTER UPDATE ON documents BEGIN
            INSERT INTO documents_fts (documents_fts, rowid, text)
                VALUES ('delete', old.id, old.text);
            INSERT INTO documents_fts (rowid, text) VALUES (new.id, new.text);
        END"""
    )


def m002_sessions(conn: sqlite3.Connection) -> None:
    # A session's worst taint so far; excluded sessions (above the ceiling) keep a row and no
    # documents, so later turns are not indexed either.
    conn.execute(
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            data_class TEXT NOT NULL,
            untrusted INTEGER NOT NULL,
            excluded INTEGER NOT NULL
        )"""
    )
    # How many lines of each session log, and which notes, are in the index.
    conn.execute("CREATE TABLE ingested (source TEXT PRIMARY KEY, upto INTEGER NOT NULL)")


# The labels a document can have: one FTS5 table each, so bm25's statistics (document count,
# average length, each word's document frequency) in one table cover documents of that label
# only, and a search reads only the tables at or below the asking session's taint
# (docs/decisions/recall-per-label.md).
LABELS: tuple[tuple[str, bool], ...] = tuple(
    (data_class, untrusted) for data_class in ("public", "private", "secret")
    for untrusted in (False, True)
)


def label_table(data_class: str, untrusted: bool) -> str:
    return f"fts_{data_class}{'_untrusted' if untrusted else ''}"


def m003_label_tables(conn: sqlite3.Connection) -> None:
    """One FTS5 table per label instead of one for all. A row's label is fixed when it is
    written (a log record's is its session's taint then); rows written before this migration
    take their session's label as it is now, as search used to join at read time."""
    for trigger in ("documents_ai", "documents_ad", "documents_au"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE documents_fts")
    rank = {"public": 0, "private": 1, "secret": 2}
    raised = conn.execute(
        "SELECT d.id, d.data_class, d.untrusted, s.data_class, s.untrusted FROM documents d "
        "JOIN sessions s ON s.id = d.session WHERE d.note IS NULL"
    ).fetchall()
    conn.executemany(
        "UPDATE documents SET data_class = ?, untrusted = ? WHERE id = ?",
        [(max(own, session, key=rank.__getitem__), int(bool(own_u) or bool(session_u)), rowid)
         for rowid, own, own_u, session, session_u in raised],
    )
    for data_class, untrusted in LABELS:
        table = label_table(data_class, untrusted)
        when = f"data_class = '{data_class}' AND untrusted = {int(untrusted)}"
        conn.execute(
            f"CREATE VIRTUAL TABLE {table} USING fts5(text, content='documents', "
            "content_rowid='id', tokenize='unicode61 remove_diacritics 2')"
        )
        conn.execute(f"INSERT INTO {table} (rowid, text) SELECT id, text FROM documents "
                     f"WHERE {when}")
        new = when.replace("data_class", "new.data_class").replace("untrusted", "new.untrusted")
        old = when.replace("data_class", "old.data_class").replace("untrusted", "old.untrusted")
        conn.execute(f"""CREATE TRIGGER {table}_ai AFTER INSERT ON documents WHEN {new} BEGIN
            INSERT INTO {table} (rowid, text) VALUES (new.id, new.text);
        END""")
        conn.execute(f"""CREATE TRIGGER {table}_ad AFTER DELETE ON documents WHEN {old} BEGIN
            INSERT INTO {table} ({table}, rowid, text) VALUES ('delete', old.id, old.text);
        END""")
    log.info("recall index: migrated to one FTS5 table per label (class and trust), %d rows "
             "re-indexed; recall now reads only the tables at or below the asking session",
             conn.execute("SELECT count(*) FROM documents").fetchone()[0])


RECALL_MIGRATIONS = (m001_documents, m002_sessions, m003_label_tables)


def m001_hits(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE hits (
            origin TEXT PRIMARY KEY,
            hits INTEGER NOT NULL,
            last_found TEXT NOT NULL
        )"""
    )


def m002_honcho_ledger(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE honcho_synced (
            key TEXT PRIMARY KEY,
            workspace TEXT NOT NULL,
            honcho_session TEXT NOT NULL,
            message_id TEXT NOT NULL,
            time TEXT NOT NULL
        )"""
    )
    # Keys of a write whose outcome is unknown (a timeout after sending): before writing them
    # again, memoryd asks Honcho whether they arrived.
    conn.execute("CREATE TABLE honcho_uncertain (key TEXT PRIMARY KEY)")
    # Keys Honcho refused with a 4xx: not retried every pass; the log says why.
    conn.execute("CREATE TABLE honcho_rejected (key TEXT PRIMARY KEY, time TEXT NOT NULL)")


STATE_MIGRATIONS = (m001_hits, m002_honcho_ledger)
