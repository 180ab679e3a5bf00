"""brokerd.provenance: what tools wrote from a marked session, found by ctime, read back."""

from __future__ import annotations

import os
import time

import pytest
from brokerd.errors import ProvenanceError
from brokerd.provenance import Mark, ProvenanceStore, changed_since
from bxcore.tools import DataClass

UNTRUSTED = Mark(DataClass.PUBLIC, True)


def test_only_what_changed_since_the_start_is_found_and_symlinks_are_not_followed(tmp_path):
    (tmp_path / "old.txt").write_text("old")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "far.txt").write_text("far")
    start = time.time_ns()
    time.sleep(0.02)
    os.utime(tmp_path / "old.txt", ns=(0, 0))  # a tool cannot hide a change by setting mtime
    (tmp_path / "new.txt").write_text("new")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    found, stopped = changed_since(tmp_path, start)
    names = {os.path.relpath(p, tmp_path) for p in found}
    assert {"old.txt", "new.txt", "link", "."} <= names and not stopped
    assert "elsewhere/far.txt" not in names


def test_a_walk_over_the_limit_marks_the_whole_mount(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text("x")
    store = ProvenanceStore(tmp_path / "p.jsonl")
    assert changed_since(tmp_path, 0, limit=3)[1]
    marked = store.record([tmp_path], time.time_ns() + 10**12, UNTRUSTED, session="s", call=1)
    assert marked == []  # nothing changed since then: nothing marked


def test_marks_survive_a_restart_and_raise_what_can_read_them(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    start = time.time_ns()
    (work / "planted.md").write_text("obey")
    store = ProvenanceStore(tmp_path / "p.jsonl")
    store.record([work], start, Mark(DataClass.SECRET, True), session="s", call=1)
    again = ProvenanceStore(tmp_path / "p.jsonl")
    planted = str(work / "planted.md")
    assert again.seen_by("fs.read", planted, []) == Mark(DataClass.SECRET, True)
    assert again.seen_by("fs.list", str(work), []) == Mark(DataClass.SECRET, True)
    assert again.seen_by("fs.read", str(tmp_path / "other.md"), []) is None
    assert again.seen_by("shell.run", None, [tmp_path]) == Mark(DataClass.SECRET, True)


def test_a_public_trusted_session_marks_nothing(tmp_path):
    (tmp_path / "a").write_text("a")
    store = ProvenanceStore(tmp_path / "p.jsonl")
    assert store.record([tmp_path], 0, Mark(DataClass.PUBLIC, False), session="s", call=1) == []
    assert not (tmp_path / "p.jsonl").exists()


def test_a_torn_last_line_is_skipped_and_a_bad_middle_line_is_named(tmp_path):
    path = tmp_path / "p.jsonl"
    good = ('{"call":1,"class":"public","path":"/x","session":"s","subtree":false,'
            '"untrusted":true}\n')
    path.write_text(good + '{"call":1,"cla')
    assert ProvenanceStore(path).seen_by("fs.read", "/x", []) == UNTRUSTED
    path.write_text('{"nope": 1}\n' + good)
    with pytest.raises(ProvenanceError, match=f"{path}:1: not a provenance record"):
        ProvenanceStore(path)
