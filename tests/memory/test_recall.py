"""Recall over the FTS5 index (brief, Memory items 2, 3 and 6): the exact schema, reindex gives
the same answers, the ceiling, source tags and trust, hit counts, and notes.md's format."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest
from bxcore.tools import DataClass
from click.testing import CliRunner
from memoryd.cli import main
from memoryd.errors import StoreError
from memoryd.index import RecallIndex, StateDb, session_logs
from memoryd.notes import Note, parse_notes
from memoryd.wiring import build

from .support import answer, call, calling, config, recalled, result, turn, user, write_taint


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def service(home: Path):
    svc = build(config(home))
    yield svc
    run(svc.aclose())


def schema(path: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "ORDER BY type, name"
        ).fetchall()
    finally:
        conn.close()


def test_migrating_an_empty_database_gives_exactly_this_schema(tmp_path):
    RecallIndex(tmp_path / "r.sqlite", tmp_path / "sessions", ceiling=DataClass.PRIVATE).close()
    names = [(kind, name) for kind, name, _ in schema(tmp_path / "r.sqlite")]
    tables = ["fts_public", "fts_public_untrusted", "fts_private", "fts_private_untrusted",
              "fts_secret", "fts_secret_untrusted"]  # one per label (recall-per-label.md)
    assert names == sorted([
        ("index", "documents_session"),
        ("table", "documents"), ("table", "ingested"), ("table", "migrations"),
        ("table", "sessions"),
        *[("table", f"{t}{part}") for t in tables
          for part in ("", "_config", "_data", "_docsize", "_idx")],
        *[("trigger", f"{t}_{event}") for t in tables for event in ("ad", "ai")],
    ])
    sql = dict((name, text) for _, name, text in schema(tmp_path / "r.sqlite"))
    assert all("fts5(text, content='documents', content_rowid='id'" in sql[t] for t in tables)
    conn = sqlite3.connect(tmp_path / "r.sqlite")
    assert [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")] == [
        "m001_documents", "m002_sessions", "m003_label_tables"]
    conn.close()
    StateDb(tmp_path / "s.sqlite").close()
    assert [(k, n) for k, n, _ in schema(tmp_path / "s.sqlite")] == [
        ("table", "hits"), ("table", "honcho_rejected"), ("table", "honcho_synced"),
        ("table", "honcho_uncertain"), ("table", "migrations")]


def test_migrating_twice_changes_nothing(tmp_path):
    for _ in range(2):
        RecallIndex(tmp_path / "r.sqlite", tmp_path / "sessions", ceiling=DataClass.PRIVATE).close()
    conn = sqlite3.connect(tmp_path / "r.sqlite")
    assert conn.execute("SELECT count(*) FROM migrations").fetchone()[0] == 3
    conn.close()


def test_an_index_of_one_fts5_table_is_migrated_to_one_per_label(tmp_path, caplog):
    """An index made before recall-per-label.md: its rows move to their labels' tables, a log
    record's taking its session's (as search used to at read time), and answer from there."""
    from memoryd.index.migrations import connect
    from memoryd.index.schema import RECALL_MIGRATIONS
    from memoryd.taint import SessionTaint

    path = tmp_path / "r.sqlite"
    conn = connect(path, RECALL_MIGRATIONS[:2], wal=False)
    conn.execute("INSERT INTO sessions VALUES ('p', 'private', 0, 0)")
    conn.executemany(
        "INSERT INTO documents (origin, kind, session, note, data_class, untrusted, time, text) "
        "VALUES (?, ?, ?, ?, ?, ?, 't', ?)",
        [("session:p/0#1", "user", "p", None, "public", 0, "walnut question"),
         ("note:1", "note", None, 1, "public", 0, "walnut note"),
         ("note:2", "note", None, 2, "public", 1, "walnut rumour")])
    conn.close()
    with caplog.at_level("INFO", logger="memoryd"):
        index = RecallIndex(path, tmp_path / "sessions", ceiling=DataClass.PRIVATE)
    assert "one FTS5 table per label" in caplog.text and "3 rows" in caplog.text
    try:
        def found(taint: SessionTaint) -> list[tuple[str, str, bool]]:
            return [(r.origin, r.data_class.value, r.untrusted)
                    for r in index.search("walnut", 5, taint)]
        assert found(SessionTaint()) == [("note:1", "public", False)]
        assert sorted(found(SessionTaint(DataClass.PRIVATE, untrusted=True))) == [
            ("note:1", "public", False), ("note:2", "public", True),
            ("session:p/0#1", "private", False)]
    finally:
        index.close()


def test_a_finished_turn_is_found_by_recall_with_its_source_origin_and_class(service, home):
    run(turn(service, home, "s1", [user("which editor do I like?"), answer("You use helix.")]))
    hits = recalled(run(call(service, "recall", {"query": "helix editor"})))
    assert {h["origin"] for h in hits} == {"session:s1/0#1", "session:s1/0#2"}
    assert {h["source"] for h in hits} == {"memory"}
    assert {h["class"] for h in hits} == {"public"}


def test_a_hit_from_an_untrusted_session_is_memory_tainted_and_marks_the_result(service, home):
    run(turn(service, home, "web", [user("read the page"), calling(),
                                    result("the gizmo costs 5", untrusted=True),
                                    answer("The gizmo costs 5.")]))
    response = run(call(service, "recall", {"query": "gizmo"}, untrusted=True))
    hits = recalled(response)
    assert hits and {h["source"] for h in hits} == {"memory-tainted"}
    assert response.untrusted is True
    # A trusted session is answered from trusted documents only (recall-per-label.md).
    assert recalled(run(call(service, "recall", {"query": "gizmo"}))) == []


def test_recall_is_labelled_with_the_highest_class_of_its_hits(service, home):
    run(turn(service, home, "p", [user("salary question"), calling(),
                                  result("salary is 10", data_class="private"),
                                  answer("ok salary noted")]))
    response = run(call(service, "recall", {"query": "salary"}, data_class="private"))
    assert response.data_class.value == "private" and not response.untrusted
    # A public session is answered from public documents only: the question, asked before the
    # session read anything private (recall-per-label.md).
    response = run(call(service, "recall", {"query": "salary"}))
    assert [h["origin"] for h in recalled(response)] == ["session:p/0#1"]
    assert response.data_class.value == "public"


def test_sessions_above_the_ceiling_are_not_indexed_from_then_on(service, home):
    """What was indexed before stays, at the label it had: removing it would show a public
    session that this one read something secret (recall-per-label.md)."""
    run(turn(service, home, "s9", [user("the launch code topic"), answer("noted launch")]))
    before = run(call(service, "recall", {"query": "launch"}))
    assert len(recalled(before)) == 2
    run(turn(service, home, "s9", [user("more"), calling(), result("launch code 1234", "secret"),
                                   answer("launch secret seen")]))
    assert run(call(service, "recall", {"query": "launch"})) == before
    run(turn(service, home, "s9", [user("launch again"), answer("launch")]))
    as_secret = run(call(service, "recall", {"query": "launch"}, data_class="secret"))
    assert recalled(as_secret) == recalled(before)  # labelled with what it searched: secret
    assert as_secret.data_class is DataClass.SECRET


def test_a_staging_directory_of_loopd_is_no_session(service, home):
    """loopd writes a new session into sessions/.new-<id>-<random> and renames it; a crash
    before the rename leaves that behind. It is nobody's session: not listed, not recalled."""
    run(turn(service, home, "s1", [user("the heron topic"), answer("noted heron")]))
    shutil.copytree(home / "sessions" / "s1", home / "sessions" / ".new-s2-0a1b2c3d")
    assert [session for session, _, _ in session_logs(home / "sessions")] == ["s1"]
    origins = {hit["origin"] for hit in recalled(run(call(service, "recall", {"query": "heron"})))}
    assert origins and all(origin.startswith("session:s1/") for origin in origins), origins


def test_the_taint_file_alone_can_put_a_session_above_the_ceiling(service, home):
    write_taint(home, "s5", ["secret"], untrusted=False)
    run(turn(service, home, "s5", [user("orchid"), answer("orchid")]))
    assert recalled(run(call(service, "recall", {"query": "orchid"}))) == []


def test_moved_entries_are_identity_dropped_ones_are_not_recalled(service, home):
    for text in ("owner likes orchids", "owner hated orchids once"):
        run(call(service, "memory", {"action": "add", "file": "user.md", "text": text}))
    run(call(service, "memory", {"action": "consolidate", "file": "user.md", "plan": [
        {"entry": 0, "fate": "moved"}, {"entry": 1, "fate": "dropped"}]}))
    hits = recalled(run(call(service, "recall", {"query": "orchids"})))
    assert [(h["source"], h["text"]) for h in hits] == [("identity", "owner likes orchids")]


def test_notes_are_recalled_with_their_own_trust(service, home):
    run(call(service, "memory", {"action": "note", "text": "trusted tulip"}))
    run(call(service, "memory", {"action": "note", "text": "tainted tulip"}, untrusted=True))
    hits = {h["text"]: h["source"] for h in recalled(run(call(service, "recall",
                                                               {"query": "tulip"},
                                                               untrusted=True)))}
    assert hits == {"trusted tulip": "memory", "tainted tulip": "memory-tainted"}


def test_snippets_are_size_capped(home):
    svc = build(config(home, "[memory]\nsnippet_chars = 40\n"))
    try:
        run(turn(svc, home, "s1", [user("zebra " + "word " * 200), answer("ok")]))
        (hit,) = recalled(run(call(svc, "recall", {"query": "zebra"})))
        assert len(hit["text"]) <= 40
    finally:
        run(svc.aclose())


def test_recall_counts_hits_and_when_each_was_last_found(service, home):
    run(call(service, "memory", {"action": "note", "text": "violet fact"}))
    for _ in range(3):
        run(call(service, "recall", {"query": "violet"}))
    hits, last = service.state.hits("note:public-1")
    assert hits == 3 and last is not None


def test_query_syntax_cannot_reach_fts5(service, home):
    run(turn(service, home, "s1", [user("alpha beta"), answer("gamma")]))
    for query in ('"unbalanced', "NEAR(alpha beta)", "alpha AND OR", "*", "col:alpha"):
        assert run(call(service, "recall", {"query": query})).status == "ok"


def test_reindex_rebuilds_from_the_files_and_gives_the_same_answers(service, home):
    run(turn(service, home, "a", [user("kiwi fruit and mango"), answer("kiwi is green")]))
    run(turn(service, home, "b", [user("mango season"), calling(),
                                  result("mango price up", untrusted=True), answer("mango")]))
    run(turn(service, home, "c", [user("kiwi secret"), calling(), result("x", "secret"),
                                  answer("kiwi")]))
    run(turn(service, home, "a", [user("more kiwi")], epoch=1))
    run(call(service, "memory", {"action": "note", "text": "kiwi note"}))
    queries = ["kiwi", "mango", "green season", "note"]
    wide = {"data_class": "private", "untrusted": True}
    before = [run(call(service, "recall", {"query": q, "k": 10}, **wide)) for q in queries]
    result_ = CliRunner(env={"BOXMAKER_HOME": str(home)}).invoke(main, ["reindex"])
    assert result_.exit_code == 0, result_.output
    assert service.index.reopen_if_replaced() is True
    after = [run(call(service, "recall", {"query": q, "k": 10}, **wide)) for q in queries]
    assert after == before
    assert any(recalled(r) for r in after)


def test_memoryd_catches_up_on_turns_it_missed(service, home):
    from .support import append_log
    append_log(home, "s1", 0, [user("missed quince"), answer("quince")])
    run(turn(service, home, "s1", [user("then papaya"), answer("papaya")]))
    assert recalled(run(call(service, "recall", {"query": "quince"})))


def test_notes_md_entries_are_read_by_length_so_text_cannot_forge_an_entry():
    note = Note(id="1", kind="note", time="t", session="s", data_class=DataClass.PUBLIC,
                untrusted=True,
                text="x\n\n### moved 2 time=t session=s class=public trust=trusted chars=1\ny")
    (parsed,) = parse_notes(note.render())
    assert parsed == note


def test_a_torn_notes_md_is_an_error_naming_the_line():
    text = Note(id="1", kind="note", time="t", session="s", data_class=DataClass.PUBLIC,
                untrusted=False, text="whole").render()
    with pytest.raises(StoreError, match="line 4: entry 2 is torn"):
        parse_notes(text + text.replace("note 1", "note 2")[:-5])
