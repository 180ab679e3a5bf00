"""Which documents recall returns, and in what order: the k best by bm25, ties broken by origin,
dropped notes never. The index ranks with FTS5's ``ORDER BY rank LIMIT`` and joins and snippets
only the rows it keeps; it must return exactly what ranking every match would."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bxcore.tools import DataClass
from hypothesis import given, settings
from hypothesis import strategies as st
from memoryd.index import RecallIndex, fts_query
from memoryd.notes import Note
from memoryd.taint import CLEAN

from .support import answer, user

TIME = "2026-12-01T10:00:00.000000Z"
WORDS = ["heron", "kiwi", "mango", "quince", "tulip", "zebra"]
# The definition: every match ranked by bm25, then origin, dropped notes left out.
# (Every document here is public and trusted, so all of them are in the one table fts_public.)
EVERY_MATCH = """SELECT d.origin, round(bm25(fts_public), 6) AS score
    FROM fts_public JOIN documents d ON d.id = fts_public.rowid
    WHERE fts_public MATCH ? AND d.kind != 'dropped' ORDER BY score, d.origin LIMIT ?"""


def index_of(directory: Path, texts: list[str], dropped: list[str] = ()) -> RecallIndex:
    index = RecallIndex(directory / "recall.sqlite", directory / "sessions", DataClass.PRIVATE)
    records = [user(text) if i % 2 == 0 else answer(text) for i, text in enumerate(texts)]
    index.add_records("s1", 0, 1, records, CLEAN)
    index.add_notes([Note(id=str(i + 1), kind="dropped", time=TIME, session="s1",
                          data_class=DataClass.PUBLIC, untrusted=False, text=text)
                     for i, text in enumerate(dropped)])
    return index


def test_the_document_that_matches_best_comes_first(tmp_path):
    index = index_of(tmp_path, [
        "the weather was grey and the heron stood still by the long grey water",
        "heron heron",
        "a list of birds: heron, crane, stork, egret, ibis, spoonbill, bittern, pelican",
        *[f"quince jam recipe {n} with no birds in it at all" for n in range(20)],
    ])
    rows = index.search("heron", 5, CLEAN)
    assert [row.origin for row in rows] == [
        "session:s1/0#2",  # the word twice, in the shortest text
        "session:s1/0#3", "session:s1/0#1",  # once each: the shorter text ranks higher
    ]
    assert rows[0].score < rows[1].score < rows[2].score
    assert "heron" in rows[0].snippet


def test_a_rare_word_outranks_a_common_one(tmp_path):
    common = [f"mango number {i} of many" for i in range(40)]
    index = index_of(tmp_path, [*common, "one mango and one quince"])
    (best,) = index.search("mango quince", 1, CLEAN)
    assert best.origin == f"session:s1/0#{len(common) + 1}"


def test_ties_beyond_the_first_ranking_pass_are_broken_by_origin(tmp_path):
    """100 documents of one score: the pass that fetches the first few cannot know which of
    them come first by origin, so it must look further."""
    index = index_of(tmp_path, ["zebra crossing here"] * 100)
    origins = [row.origin for row in index.search("zebra", 5, CLEAN)]
    assert origins == sorted(f"session:s1/0#{n}" for n in range(1, 101))[:5]


def test_dropped_notes_are_skipped_however_many_rank_above(tmp_path):
    index = index_of(tmp_path, ["tulip bulbs in a long sentence about the garden beds"],
                     dropped=["tulip tulip"] * 80)
    assert [row.origin for row in index.search("tulip", 3, CLEAN)] == ["session:s1/0#1"]


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
                      min_size=1, max_size=150),
       dropped=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), max_size=60),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       k=st.integers(min_value=1, max_value=12))
def test_search_returns_exactly_what_ranking_every_match_returns(tmp_path_factory, texts,
                                                                  dropped, query, k):
    directory = tmp_path_factory.mktemp("ranking")
    index = index_of(directory, [" ".join(t) for t in texts], [" ".join(t) for t in dropped])
    try:
        conn = sqlite3.connect(directory / "recall.sqlite")
        expected = conn.execute(EVERY_MATCH, (fts_query(" ".join(query)), k)).fetchall()
        conn.close()
        got = [(row.origin, row.score) for row in index.search(" ".join(query), k, CLEAN)]
        assert got == expected
    finally:
        index.close()
