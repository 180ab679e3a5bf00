"""The taint file format, shared by brokerd (the writer) and memoryd (a reader)."""

from __future__ import annotations

import pytest
from bxcore.taint import CLEAN, Taint, TaintFileError, encode_taint, read_taint, taint_path
from bxcore.tools import DataClass


def test_a_session_without_a_file_is_clean(tmp_path):
    assert read_taint(tmp_path, "s1") == CLEAN


def test_written_taint_reads_back_and_classes_are_in_rank_order(tmp_path):
    taint = Taint(frozenset({DataClass.SECRET, DataClass.PUBLIC}), untrusted=True)
    data = encode_taint("s1", taint)
    assert data == b'{"classes":["public","secret"],"session":"s1","untrusted":true}\n'
    taint_path(tmp_path, "s1").write_bytes(data)
    assert read_taint(tmp_path, "s1") == taint


def test_seen_only_ever_grows():
    taint = CLEAN.seen(DataClass.PRIVATE, False).seen(DataClass.PUBLIC, True)
    assert taint.classes == {DataClass.PRIVATE, DataClass.PUBLIC}
    assert taint.untrusted and taint.highest is DataClass.PRIVATE


def test_a_file_naming_another_session_is_refused_with_its_path(tmp_path):
    taint_path(tmp_path, "s1").write_bytes(encode_taint("s2", CLEAN))
    with pytest.raises(TaintFileError, match=r"s1\.json: names session 's2'"):
        read_taint(tmp_path, "s1")


def test_garbage_is_refused_with_its_path(tmp_path):
    taint_path(tmp_path, "s1").write_bytes(b"{not json")
    with pytest.raises(TaintFileError, match=r"s1\.json: not a taint file"):
        read_taint(tmp_path, "s1")


def test_a_session_id_cannot_escape_the_directory(tmp_path):
    with pytest.raises(ValueError):
        taint_path(tmp_path, "../etc/passwd")
