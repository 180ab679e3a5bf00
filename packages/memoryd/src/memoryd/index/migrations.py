"""Opening memoryd's databases: owner-only files, migrated by bxcore.migrations; read-only while
their disk has no room to open them otherwise (docs/decisions/memoryd-full-disk-start.md)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from bxcore.errors import SchemaError
from bxcore.migrations import Migration, migrate, transaction

from ..errors import IndexCorrupt

log = logging.getLogger("memoryd")
# SQLite's files beside a database that can hold what its file does not yet: the write-ahead
# log's frames, or a rollback journal left hot by a crash.
JOURNALS = ("-wal", "-journal")


def connect(path: Path, migrations: Sequence[Migration], *, wal: bool) -> sqlite3.Connection:
    """Open (creating if needed) and migrate a database; any SQLite failure is IndexCorrupt.

    The recall index is replaced by renaming a new file over it, which a write-ahead log (named
    after the path, not the file) would not survive, so it uses a rollback journal (wal=False).
    """
    conn = None
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
        if conn is not None:  # no room for its -wal or -shm: memoryd tries again, so close it
            conn.close()
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


class NoRoomToWrite(sqlite3.OperationalError):
    """A write to a database open read-only that still cannot be opened read-write: a
    sqlite3.Error, as a write on a full disk is, so the same callers leave it for later."""


class Database:
    """One of memoryd's databases, read-write and migrated; or, when SQLite cannot open it so
    (on a disk full to the last byte or inode it cannot make its journal files, nor migrate),
    read-only, until a write finds it can open it read-write again."""

    def __init__(self, path: Path, migrations: Sequence[Migration], *, wal: bool,
                 pragmas: Sequence[str] = ()):
        self.path = path
        self._migrations, self._wal, self._pragmas = migrations, wal, pragmas
        self.conn, self.read_only_because = self._open()

    def _open(self) -> tuple[sqlite3.Connection, str | None]:
        try:
            conn, why = connect(self.path, self._migrations, wal=self._wal), None
        except IndexCorrupt as exc:
            conn, why = connect_read_only(self.path, self._migrations, str(exc)), str(exc)
            log.warning("opened read-only until a write finds room: %s", why)
        for pragma in self._pragmas:
            conn.execute(pragma)
        return conn, why

    def writable(self) -> sqlite3.Connection:
        """The connection, read-write: one open read-only is opened read-write first, or
        NoRoomToWrite. (Closed first: an immutable one must see no write while it is open.)"""
        if self.read_only_because is not None:
            self.conn.close()
            try:
                self.conn, self.read_only_because = self._open()
            except IndexCorrupt as exc:  # not even read-only now: the next write tries again
                raise NoRoomToWrite(str(exc)) from exc
            if self.read_only_because is not None:
                raise NoRoomToWrite(f"open read-only: {self.read_only_because}")
            log.info("%s is open read-write again", self.path)
        return self.conn

    def close(self) -> None:
        self.conn.close()


def connect_read_only(path: Path, migrations: Sequence[Migration], why: str
                      ) -> sqlite3.Connection:
    """Open a database that ``connect`` could not (``why``), writing nothing on its disk.

    With no journal holding anything (after a clean stop SQLite removes the write-ahead log
    and its index; a failed open may leave them empty), the file is the whole database, and
    ``immutable=1`` reads it with no -shm and no lock: safe because memoryd is its only writer
    and writes nothing while it is open so (``Database.writable`` closes it first). A journal
    that holds something (a crash's write-ahead log) is read with ``mode=ro``, through the
    -shm the crash left. A database never made is the empty one it would be."""
    if not path.exists():
        conn = sqlite3.connect(":memory:", isolation_level=None)
        migrate(conn, migrations, path)
        return conn
    journalled = any(_size(path.with_name(path.name + suffix)) for suffix in JOURNALS)
    uri = path.absolute().as_uri() + ("?mode=ro" if journalled else "?mode=ro&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        applied = [row[0] for row in conn.execute("SELECT name FROM migrations ORDER BY name")]
    except sqlite3.Error as exc:
        raise IndexCorrupt(f"{why}; read-only: {exc}") from exc
    if applied != [migration.__name__ for migration in migrations]:
        conn.close()
        raise IndexCorrupt(f"{why}; read-only, its schema is not this release's ({applied})")
    return conn


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


__all__ = ["Database", "Migration", "NoRoomToWrite", "connect", "transaction"]
