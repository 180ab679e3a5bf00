"""Schema migrations: plain ordered functions named ``m001_...``, each applied once, in one
transaction, and recorded in the ``migrations`` table (the llm pattern)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bxcore.util import now_rfc3339

from ..errors import IndexCorrupt

Migration = Callable[[sqlite3.Connection], None]


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: committed when the block ends, rolled back if it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration], where: Path | str) -> None:
    """Apply every migration not yet recorded. A database with a migration we do not know (a
    newer memoryd made it) is refused rather than guessed at."""
    known = [m.__name__ for m in migrations]
    if known != sorted(known) or len(set(known)) != len(known):
        raise ValueError(f"migrations must be uniquely named and in order: {known}")
    with transaction(conn):
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied TEXT NOT NULL)"
        )
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    unknown = sorted(done - set(known))
    if unknown:
        raise IndexCorrupt(f"{where}: made by a newer memoryd (migrations {', '.join(unknown)})")
    for migration in migrations:
        if migration.__name__ in done:
            continue
        try:
            with transaction(conn):
                migration(conn)
                conn.execute(
                    "INSERT INTO migrations (name, applied) VALUES (?, ?)",
                    (migration.__name__, now_rfc3339()),
                )
        except sqlite3.Error as exc:
            raise IndexCorrupt(f"{where}: migration {migration.__name__} failed: {exc}") from exc


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
    migrate(conn, migrations, path)
    return conn
