"""The durable queue between the WebSocket and loop.sock (SQLite; the brief allows it for queues).

A post is offered once per Mattermost post id: the WebSocket, a replay after a reconnect and the
REST catch-up may all bring the same post, and only the first offer counts. Each session's posts
are delivered in order, one at a time; a post waits while loopd is busy or down and is delivered
once. A post counts as delivered when loopd has accepted its turn (its first frame that is not an
error), so a crash after that does not send it again. Once delivered, the text is cleared: the
session log is the copy that matters, and the queue keeps only ids and times.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bxcore.errors import SchemaError
from bxcore.migrations import Migration, migrate, transaction

from .errors import QueueError


def m001_inbox(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE inbox ("
        " post_id TEXT PRIMARY KEY, session TEXT NOT NULL, resume INTEGER NOT NULL,"
        " channel_id TEXT NOT NULL, root_id TEXT NOT NULL, user_id TEXT NOT NULL,"
        " content TEXT NOT NULL, create_at INTEGER NOT NULL,"
        " state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered')),"
        " attempts INTEGER NOT NULL DEFAULT 0, not_before REAL NOT NULL DEFAULT 0,"
        " placeholder TEXT NOT NULL DEFAULT '')"
    )
    db.execute("CREATE INDEX inbox_pending ON inbox (state, session, create_at)")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")


MIGRATIONS: list[Migration] = [m001_inbox]


@dataclass(frozen=True, kw_only=True)
class Item:
    post_id: str
    session: str
    resume: bool
    channel_id: str
    root_id: str  # the thread root: the post itself for a session's first message
    user_id: str
    content: str
    create_at: int
    attempts: int = 0
    placeholder: str = ""


class Queue:
    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            migrate(self._db, MIGRATIONS, path)
        except (OSError, sqlite3.Error, SchemaError) as exc:
            raise QueueError(f"{path}: cannot open the queue: {exc}") from None

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            with transaction(self._db):
                yield self._db
        except sqlite3.Error as exc:
            raise QueueError(f"{self.path}: {exc}") from None

    def offer(self, item: Item, *, handled: bool = False) -> bool:
        """Add a post; False when this post id was offered before (a duplicate).

        ``handled``: the post needs no delivery (an approval command); it is only remembered, so
        a replay or catch-up does not handle it twice."""
        with self._tx() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO inbox (post_id, session, resume, channel_id, root_id,"
                " user_id, content, create_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (item.post_id, item.session, int(item.resume), item.channel_id, item.root_id,
                 item.user_id, "" if handled else item.content, item.create_at,
                 "delivered" if handled else "pending"),
            )
            if cursor.rowcount:
                db.execute(
                    "INSERT INTO meta (key, value) VALUES ('watermark', ?) ON CONFLICT (key)"
                    " DO UPDATE SET value = max(value, excluded.value)", (item.create_at,),
                )
            return cursor.rowcount == 1

    def heads(self, now: float, busy: set[str]) -> list[Item]:
        """The oldest pending post of each session not in ``busy``, if it is due."""
        rows = self._db.execute(
            "SELECT post_id, session, resume, channel_id, root_id, user_id, content, create_at,"
            " attempts, placeholder, not_before FROM inbox WHERE state = 'pending'"
            " ORDER BY create_at, rowid"
        ).fetchall()
        heads: dict[str, Item] = {}
        seen: set[str] = set()
        for row in rows:
            session = row[1]
            if session in seen:
                continue
            seen.add(session)
            if session not in busy and row[10] <= now:
                heads[session] = Item(
                    post_id=row[0], session=session, resume=bool(row[2]), channel_id=row[3],
                    root_id=row[4], user_id=row[5], content=row[6], create_at=row[7],
                    attempts=row[8], placeholder=row[9],
                )
        return list(heads.values())

    def set_placeholder(self, post_id: str, placeholder: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE inbox SET placeholder = ? WHERE post_id = ?", (placeholder, post_id))

    def delivered(self, post_id: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE inbox SET state = 'delivered', content = '' WHERE post_id = ?", (post_id,)
            )

    def defer(self, post_id: str, not_before: float) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE inbox SET attempts = attempts + 1, not_before = ? WHERE post_id = ?",
                (not_before, post_id),
            )

    def pending_count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM inbox WHERE state = 'pending'")
                   .fetchone()[0])

    def watermark(self) -> int | None:
        """The newest create_at (ms, server clock) of any post offered: catch-up starts here."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        return None if row is None else int(row[0])

    def set_watermark(self, value: int) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO meta (key, value) VALUES ('watermark', ?) ON CONFLICT (key)"
                " DO UPDATE SET value = max(value, excluded.value)", (value,),
            )
