"""Opening memoryd's databases: owner-only files, migrated by bxcore.migrations."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from bxcore.errors import SchemaError
from bxcore.migrations import Migration, migrate, transaction

from ..errors import IndexCorrupt


def connect(path: Path, migrations: Sequence[Migration], *, wal: bool) -> sqlite3.Connection:
    """Open (creating if needed) and migrate a database; any SQLite failure is IndexCorrupt.

    The recall index is replaced by renaming a new file over it, which a write-ahead log (named
    after the path, not the file) would not survive, so it uses a rollback journal (wal=False).
    """
    try:
        # The index holds session text: owner-only, like every state file. SQLite gives its
        # journal files the database file's mode, so setting it here covers them too.
        path.touch(mode=0o640, exist_ok=True)
        path.chmod(0o640)
        # Autocommit mode: every transaction is explicit (``transaction``), DDL included.
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(f"PRAGMA journal_mode={'WAL' if wal else 'DELETE'}")
        conn.execute("PRAGMA synchronous=NORMAL")
    except (sqlite3.Error, OSError) as exc:
        raise IndexCorrupt(f"{path}: cannot open: {exc}") from exc
    try:
        migrate(conn, migrations, path)
    except SchemaError as exc:
        conn.close()
        raise IndexCorrupt(str(exc)) from exc
    except sqlite3.Error as exc:
        conn.close()
        raise IndexCorrupt(f"{path}: cannot migrate: {exc}") from exc
    return conn


__all__ = ["Migration", "connect", "transaction"]
