"""``index/state.sqlite``: what memoryd knows that the files do not say, so reindex keeps it.

- ``hits``: how often each note (and log record) was found by recall, and when last. Counted
  in memory and written when memoryd stops: a recall writes nothing to the state disk (attack
  31f: counting each recall in the write-ahead log grew it by 4 MiB unchecked, below the audit
  log's reserve, and failed recalls on a full disk). A crash loses the counts since the start;
  the table holds at most one row per document found.
- the Honcho ledger: which messages were written to which Honcho session, and which writes have
  an unknown outcome. Losing the file loses hit counts; the sync then asks Honcho about each
  message before writing it (see honcho/sync.py), so nothing is written twice.

On a disk with no room it is open read-only, and each write first tries to open it read-write
again (migrations.Database).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from .migrations import Database, transaction
from .schema import STATE_MIGRATIONS

log = logging.getLogger("memoryd")


class StateDb:
    def __init__(self, path: Path):
        self.path = path
        self.fresh = not path.exists()  # no ledger: every write must be checked with Honcho
        self._db = Database(path, STATE_MIGRATIONS, wal=True)
        self._hits: dict[str, tuple[int, str]] = {}  # origin: (recalls since the start, last)

    def close(self) -> None:
        """Write the hit counts kept in memory (a failure is logged: they are only counts)."""
        try:
            self._write_hits()
        except sqlite3.Error as exc:
            log.warning("recall hit counts of %d documents not written: %s",
                        len(self._hits), exc)
        self._db.close()

    def count_hits(self, origins: Iterable[str], now: str) -> None:
        """Count a recall's hits, in memory only: see the module's docstring."""
        for origin in origins:
            count, _ = self._hits.get(origin, (0, now))
            self._hits[origin] = (count + 1, now)

    def _write_hits(self) -> None:
        if not self._hits:
            return
        conn = self._db.writable()
        with transaction(conn):
            conn.executemany(
                "INSERT INTO hits (origin, hits, last_found) VALUES (?, ?, ?) ON CONFLICT "
                "(origin) DO UPDATE SET hits = hits + excluded.hits, "
                "last_found = excluded.last_found",
                [(origin, count, last) for origin, (count, last) in self._hits.items()],
            )
        self._hits = {}

    def hits(self, origin: str) -> tuple[int, str | None]:
        row = self._db.conn.execute(
            "SELECT hits, last_found FROM hits WHERE origin = ?", (origin,)
        ).fetchone()
        written, last = (int(row[0]), str(row[1])) if row else (0, None)
        counted, found = self._hits.get(origin, (0, last))
        return written + counted, found

    def settled(self, keys: Iterable[str]) -> set[str]:
        """The keys that are in Honcho, or that Honcho refused: nothing more to do for them."""
        return self._present(keys, "SELECT key FROM honcho_synced WHERE key IN ({marks}) UNION "
                                   "SELECT key FROM honcho_rejected WHERE key IN ({marks})")

    def synced(self, keys: Iterable[str]) -> set[str]:
        """The keys that Honcho holds (written, or found there)."""
        return self._present(keys, "SELECT key FROM honcho_synced WHERE key IN ({marks})")

    def _present(self, keys: Iterable[str], query: str) -> set[str]:
        keys = list(keys)
        found: set[str] = set()
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            sql = query.format(marks=",".join("?" * len(chunk)))
            found.update(row[0] for row in
                         self._db.conn.execute(sql, chunk * sql.count("IN (")))
        return found

    def uncertain(self) -> set[str]:
        return {row[0] for row in self._db.conn.execute("SELECT key FROM honcho_uncertain")}

    def mark_uncertain(self, keys: Iterable[str]) -> None:
        conn = self._db.writable()
        with transaction(conn):
            conn.executemany(
                "INSERT OR IGNORE INTO honcho_uncertain (key) VALUES (?)", [(k,) for k in keys]
            )

    def record_synced(self, entries: Iterable[tuple[str, str, str, str]], now: str) -> None:
        """(key, workspace, honcho session, message id) for each message Honcho holds."""
        rows = list(entries)
        conn = self._db.writable()
        with transaction(conn):
            conn.executemany(
                "INSERT OR IGNORE INTO honcho_synced (key, workspace, honcho_session, message_id,"
                " time) VALUES (?, ?, ?, ?, ?)",
                [(*row, now) for row in rows],
            )
            conn.executemany(
                "DELETE FROM honcho_uncertain WHERE key = ?", [(row[0],) for row in rows]
            )

    def record_rejected(self, keys: Iterable[str], now: str) -> None:
        rows = [(key, now) for key in keys]
        conn = self._db.writable()
        with transaction(conn):
            conn.executemany("INSERT OR IGNORE INTO honcho_rejected VALUES (?, ?)", rows)
            conn.executemany(
                "DELETE FROM honcho_uncertain WHERE key = ?", [(r[0],) for r in rows]
            )

    def synced_count(self) -> int:
        return int(self._db.conn.execute("SELECT count(*) FROM honcho_synced").fetchone()[0])
