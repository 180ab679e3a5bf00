"""The two databases under ``index/`` and their migrations.

``recall.sqlite`` is disposable: everything in it is derived from sessions/, memory/notes.md and
brokerd's taint files, and ``memoryd reindex`` rebuilds it. ``state.sqlite`` holds what cannot be
derived, so reindex keeps it: recall hit counts, and the ledger of what was written to Honcho
(Honcho does not de-duplicate).
"""

from __future__ import annotations

import sqlite3


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


RECALL_MIGRATIONS = (m001_documents, m002_sessions)


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
