"""Schema migrations (bxcore.migrations), as memoryd's databases and gatewayd's queue use them:

- plain functions named ``m001_...``, applied in order, each once, each in its own transaction,
  recorded by name with the time it was applied;
- a database recording a migration this release does not know is refused, naming the file;
- a migration that fails is rolled back whole and named, with the file;
- a ``migrations`` table that records names alone (gatewayd's queue until 2026-12) is kept and
  gains the time column.
"""

from __future__ import annotations

import sqlite3

import pytest
from bxcore.errors import SchemaError
from bxcore.migrations import migrate, transaction
from bxcore.util import parse_rfc3339


def m001_notes(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")


def m002_tags(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE tags (note INTEGER NOT NULL, tag TEXT NOT NULL)")


def m003_broken(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE half (x INTEGER)")
    conn.execute("INSERT INTO no_such_table VALUES (1)")


@pytest.fixture
def conn(tmp_path):
    connection = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    yield connection
    connection.close()


def tables(conn):
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                       "ORDER BY name")]


def test_each_migration_is_applied_once_in_order_and_recorded_with_its_time(conn):
    migrate(conn, [m001_notes], "db.sqlite")
    migrate(conn, [m001_notes, m002_tags], "db.sqlite")
    migrate(conn, [m001_notes, m002_tags], "db.sqlite")
    rows = conn.execute("SELECT name, applied FROM migrations ORDER BY name").fetchall()
    assert [name for name, _ in rows] == ["m001_notes", "m002_tags"]
    for _, applied in rows:
        parse_rfc3339(applied)
    assert tables(conn) == ["migrations", "notes", "tags"]


def test_a_database_from_a_newer_release_is_refused_naming_the_file(conn):
    migrate(conn, [m001_notes, m002_tags], "db.sqlite")
    with pytest.raises(SchemaError, match=r"^db\.sqlite: made by a newer release \(migrations "
                                          r"m002_tags\)$"):
        migrate(conn, [m001_notes], "db.sqlite")


def test_a_failing_migration_is_rolled_back_whole_and_named(conn):
    with pytest.raises(SchemaError, match=r"^db\.sqlite: migration m003_broken failed: "):
        migrate(conn, [m001_notes, m003_broken], "db.sqlite")
    assert tables(conn) == ["migrations", "notes"]  # no "half"
    assert conn.execute("SELECT name FROM migrations").fetchall() == [("m001_notes",)]


@pytest.mark.parametrize("order", [[m002_tags, m001_notes], [m001_notes, m001_notes]])
def test_migrations_out_of_order_or_twice_are_a_bug(conn, order):
    with pytest.raises(ValueError, match="uniquely named and in order"):
        migrate(conn, order, "db.sqlite")


def test_a_table_of_names_alone_gains_the_time_column(conn):
    conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY)")
    conn.execute("INSERT INTO migrations (name) VALUES ('m001_notes')")
    m001_notes(conn)
    migrate(conn, [m001_notes, m002_tags], "db.sqlite")
    rows = dict(conn.execute("SELECT name, applied FROM migrations").fetchall())
    assert rows["m001_notes"] == ""
    parse_rfc3339(rows["m002_tags"])


def test_a_transaction_commits_at_the_end_and_rolls_back_on_an_error(conn):
    m001_notes(conn)
    with transaction(conn):
        conn.execute("INSERT INTO notes (text) VALUES ('kept')")
    with pytest.raises(RuntimeError), transaction(conn):
        conn.execute("INSERT INTO notes (text) VALUES ('dropped')")
        raise RuntimeError("stop")
    assert conn.execute("SELECT text FROM notes").fetchall() == [("kept",)]
