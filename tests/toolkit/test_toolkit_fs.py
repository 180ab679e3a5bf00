"""fs.read, fs.list, fs.search, fs.write run directly, without a sandbox: the toolkit's own
confinement to the granted roots (the sandbox's mounts are tested in tests/sandbox)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def grant(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("alpha\nbeta: the key line\n")
    (notes / "sub").mkdir()
    (notes / "sub" / "b.md").write_text("gamma key\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("key=hunter2\n")
    return notes, outside


def test_read_a_granted_file_with_the_class_brokerd_passed(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/a.md"}, "--class", "private", "--root", str(notes))
    assert call.status == 0
    assert call.document == {
        "class": "private", "content": "alpha\nbeta: the key line\n", "truncated": False,
        "untrusted": False,
    }


def test_results_are_labelled_secret_when_no_class_is_passed(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/a.md"}, "--root", str(notes))
    assert call.document["class"] == "secret"


@pytest.mark.parametrize(
    "how", ["direct", "dotdot", "symlink", "symlinked-dir"],
)
def test_a_path_outside_the_roots_is_refused(bx_tool, grant, how):
    notes, outside = grant
    if how == "symlink":
        os.symlink(outside / "secret.txt", notes / "planted")
    if how == "symlinked-dir":
        os.symlink(outside, notes / "door")
    path = {
        "direct": f"{outside}/secret.txt",
        "dotdot": f"{notes}/../outside/secret.txt",
        "symlink": f"{notes}/planted",
        "symlinked-dir": f"{notes}/door/secret.txt",
    }[how]
    call = bx_tool("fs.read", {"path": path}, "--root", str(notes))
    assert call.status == 1
    assert "outside the granted paths" in call.error
    assert "hunter2" not in str(call.document)


def test_no_root_means_no_path(bx_tool, grant):
    notes, _ = grant
    assert bx_tool("fs.read", {"path": f"{notes}/a.md"}).status == 1


def test_relative_paths_are_refused(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": "a.md"}, "--root", str(notes))
    assert "absolute" in call.error


def test_read_is_capped_and_says_so(bx_tool, grant):
    notes, _ = grant
    (notes / "big.txt").write_text("é" * 100)  # two bytes each: the cap never splits one
    call = bx_tool("fs.read", {"path": f"{notes}/big.txt"}, "--root", str(notes), "--cap", "11")
    assert call.content == "é" * 5
    assert call.document["truncated"] is True


def test_read_from_an_offset(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/a.md", "offset": 6}, "--root", str(notes))
    assert call.content == "beta: the key line\n"


def test_a_missing_file_is_a_tool_error_naming_it(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/nope"}, "--root", str(notes))
    assert call.status == 1
    assert call.document == {"error": f"'{notes}/nope': No such file or directory", "kind": "tool"}


def test_list_marks_directories_symlinks_and_sizes(bx_tool, grant):
    notes, outside = grant
    os.symlink(outside, notes / "door")
    call = bx_tool("fs.list", {"path": str(notes)}, "--root", str(notes))
    assert call.content == "a.md\t25\ndoor@\nsub/"


def test_search_finds_lines_and_skips_files_leading_outside(bx_tool, grant):
    notes, outside = grant
    os.symlink(outside / "secret.txt", notes / "planted.md")
    call = bx_tool("fs.search", {"path": str(notes), "pattern": "key"}, "--root", str(notes))
    assert call.content == "a.md:2:beta: the key line\nsub/b.md:1:gamma key"


def test_search_stops_at_max_matches(bx_tool, grant):
    notes, _ = grant
    args = {"path": str(notes), "pattern": ".", "max_matches": 1}
    call = bx_tool("fs.search", args, "--root", str(notes))
    assert call.content == "a.md:1:alpha"
    assert call.document["truncated"] is True


def test_search_refuses_a_bad_regex(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.search", {"path": str(notes), "pattern": "("}, "--root", str(notes))
    assert "regular expression" in call.error


def test_write_modes(bx_tool, grant):
    notes, _ = grant
    target = f"{notes}/new.md"
    root = ("--root", str(notes))
    assert bx_tool("fs.write", {"path": target, "content": "one\n"}, *root).status == 0
    again = bx_tool("fs.write", {"path": target, "content": "x"}, *root)
    assert again.status == 1 and "exists" in again.error
    bx_tool("fs.write", {"path": target, "content": "two\n", "mode": "append"}, *root)
    assert (notes / "new.md").read_text() == "one\ntwo\n"
    bx_tool("fs.write", {"path": target, "content": "three\n", "mode": "overwrite"}, *root)
    assert (notes / "new.md").read_text() == "three\n"


def test_write_never_follows_a_symlink(bx_tool, grant):
    notes, outside = grant
    os.symlink(outside / "secret.txt", notes / "planted")
    os.symlink(notes / "a.md", notes / "inner")
    args = {"content": "owned", "mode": "overwrite"}
    for name in ("planted", "inner"):
        call = bx_tool("fs.write", {"path": f"{notes}/{name}", **args}, "--root", str(notes))
        assert call.status == 1
    assert (outside / "secret.txt").read_text() == "key=hunter2\n"
    assert (notes / "a.md").read_text().startswith("alpha")
