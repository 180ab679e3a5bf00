"""``index/state.sqlite``: what memoryd knows that the files do not say, so reindex keeps it.

- ``hits``: how often each note (and log record) was found by recall, and when last;
- the Honcho ledger: which messages were written to which Honcho session, and which writes have
  an unknown outcome. Losing the file loses hit counts; the sync then asks Honcho about each
  message before writing it (see honcho/sync.py), so nothing is written twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .migrations import connect, transaction
from .schema import STATE_MIGRATIONS


class StateDb:
    def __init__(self, path: Path):
        self.path = path
        self.fresh = not path.exists()  # no ledger: every write must be checked with Honcho
        self._conn = connect(path, STATE_MIGRATIONS, wal=True)

    def close(self) -> None:
        self._conn.close()

    def count_hits(self, origins: Iterable[str], now: str) -> None:
        with transaction(self._conn):
            self._conn.executemany(
                "INSERT INTO hits (origin, hits, last_found) VALUES (?, 1, ?) ON CONFLICT (origin)"
                " DO UPDATE SET hits = hits + 1, last_found = excluded.last_found",
                [(origin, now) for origin in origins],
            )

    def hits(self, origin: str) -> tuple[int, str | None]:
        row = self._conn.execute(
            "SELECT hits, last_found FROM hits WHERE origin = ?", (origin,)
        ).fetchone()
        return (int(row[0]), str(row[1])) if row else (0, None)

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
                         self._conn.execute(sql, chunk * sql.count("IN (")))
        return found

    def uncertain(self) -> set[str]:
        return {row[0] for row in self._conn.execute("SELECT key FROM honcho_uncertain")}

    def mark_uncertain(self, keys: Iterable[str]) -> None:
        with transaction(self._conn):
            self._conn.executemany(
                "INSERT OR IGNORE INTO honcho_uncertain (key) VALUES (?)", [(k,) for k in keys]
            )

    def record_synced(self, entries: Iterable[tuple[str, str, str, str]], now: str) -> None:
        """(key, workspace, honcho session, message id) for each message Honcho holds."""
        rows = list(entries)
        with transaction(self._conn):
            self._conn.executemany(
                "INSERT OR IGNORE INTO honcho_synced (key, workspace, honcho_session, message_id,"
                " time) VALUES (?, ?, ?, ?, ?)",
                [(*row, now) for row in rows],
            )
            self._conn.executemany(
                "DELETE FROM honcho_uncertain WHERE key = ?", [(row[0],) for row in rows]
            )

    def record_rejected(self, keys: Iterable[str], now: str) -> None:
        rows = [(key, now) for key in keys]
        with transaction(self._conn):
            self._conn.executemany("INSERT OR IGNORE INTO honcho_rejected VALUES (?, ?)", rows)
            self._conn.executemany(
                "DELETE FROM honcho_uncertain WHERE key = ?", [(r[0],) for r in rows]
            )

    def synced_count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM honcho_synced").fetchone()[0])
