"""Schema migrations of a role's SQLite database (memoryd's index and state, gatewayd's queue):
plain ordered functions named ``m001_...``, each applied once, in its own transaction, and recorded
with its time in the ``migrations`` table (the llm pattern).

The connection must be in autocommit mode (``isolation_level=None``): every transaction is
explicit, DDL included.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .errors import SchemaError
from .util import now_rfc3339

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
    newer release made it) is refused rather than guessed at; a migration that fails is rolled
    back. Either is a SchemaError naming ``where``; any other SQLite failure is sqlite3.Error."""
    known = [m.__name__ for m in migrations]
    if known != sorted(known) or len(set(known)) != len(known):
        raise ValueError(f"migrations must be uniquely named and in order: {known}")
    with transaction(conn):
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied TEXT NOT NULL)"
        )
        columns = {row[1] for row in conn.execute("PRAGMA table_info(migrations)")}
        if "applied" not in columns:  # gatewayd's queue recorded names alone until 2026-12
            conn.execute("ALTER TABLE migrations ADD COLUMN applied TEXT NOT NULL DEFAULT ''")
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    unknown = sorted(done - set(known))
    if unknown:
        raise SchemaError(f"{where}: made by a newer release (migrations {', '.join(unknown)})")
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
            raise SchemaError(f"{where}: migration {migration.__name__} failed: {exc}") from exc
