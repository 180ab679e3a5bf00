"""fs.read, fs.list, fs.search, fs.write run directly, without a sandbox: the toolkit opens the
path brokerd decided (``--beneath``, ``--relative``) below its mount and follows no symlink
there (the sandbox's mounts are tested in tests/sandbox, the race in
tests/security/test_path_race.py)."""

from __future__ import annotations

import os
import re

import pytest
from toolkit import beneath


@pytest.fixture(params=["openat2", "per-component"])
def how_opened(request, monkeypatch):
    """Every test runs with openat2 and with the per-component walk it falls back to."""
    monkeypatch.setattr(beneath, "_openat2_works", None if request.param == "openat2" else False)
    yield request.param
    if request.param == "openat2":  # this kernel has it (5.6+): no silent fallback
        assert beneath._openat2_works is not False


@pytest.fixture
def grant(tmp_path, how_opened):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("alpha\nbeta: the key line\n")
    (notes / "sub").mkdir()
    (notes / "sub" / "b.md").write_text("gamma key\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("key=hunter2\n")
    return notes, outside


def decided(root, relative: str, *globs: str, descend: tuple[str, ...] = ()
            ) -> tuple[str, ...]:
    """The options brokerd passes for a path it resolved to ``root/relative``, ``root`` being
    both the mount's source and its target here."""
    host = os.path.join(root, relative) if relative else str(root)
    return ("--root", str(root), f"--beneath={root}", f"--relative={relative}",
            f"--host-path={host}", *(f"--glob={g}" for g in globs),
            *(f"--descend={d}" for d in descend))


def test_read_a_granted_file_with_the_class_brokerd_passed(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/a.md"}, "--class", "private",
                   *decided(notes, "a.md"))
    assert call.status == 0
    assert call.document == {
        "class": "private", "content": "alpha\nbeta: the key line\n", "truncated": False,
        "untrusted": False,
    }


def test_results_are_labelled_secret_when_no_class_is_passed(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/a.md"}, *decided(notes, "a.md"))
    assert call.document["class"] == "secret"


def test_the_decided_path_is_opened_not_the_models(bx_tool, grant):
    """The model's ``path`` only names the call: brokerd's resolved path is what opens."""
    notes, outside = grant
    call = bx_tool("fs.read", {"path": f"{outside}/secret.txt"}, *decided(notes, "a.md"))
    assert call.content.startswith("alpha")


@pytest.mark.parametrize("how", ["final", "directory", "inside", "dotdot"])
def test_a_symlink_below_the_mount_is_refused_as_a_symlink(bx_tool, grant, how):
    """What brokerd decided was a file; by the time the tool opens it, a component is a
    symlink (to outside, or to a file inside the mount): refused, never read through."""
    notes, outside = grant
    relative = {"final": "planted", "directory": "door/secret.txt", "inside": "inner",
                "dotdot": "sub/../a.md"}[how]
    os.symlink(outside / "secret.txt", notes / "planted")
    os.symlink(outside, notes / "door")
    os.symlink(notes / "a.md", notes / "inner")
    for tool, more in (("fs.read", {}), ("fs.search", {"pattern": "."})):
        call = bx_tool(tool, {"path": f"{notes}/{relative}", **more}, *decided(notes, relative))
        assert call.status == 1, call.document
        assert "symlink" in call.error or "plain path" in call.error
        assert "hunter2" not in str(call.document) and "alpha" not in str(call.document)


@pytest.mark.parametrize("options", [(), ("--root", "/elsewhere")])
def test_no_decided_path_in_a_granted_root_means_nothing_opens(bx_tool, grant, options):
    notes, _ = grant
    if options:
        options = (*options, f"--beneath={notes}", "--relative=a.md")
    call = bx_tool("fs.read", {"path": f"{notes}/a.md"}, *options)
    assert call.status == 1 and "outside the granted paths" in call.error


def test_relative_paths_are_refused(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": "a.md"}, *decided(notes, "a.md"))
    assert "absolute" in call.error


def test_read_is_capped_and_says_so(bx_tool, grant):
    notes, _ = grant
    (notes / "big.txt").write_text("é" * 100)  # two bytes each: the cap never splits one
    call = bx_tool("fs.read", {"path": f"{notes}/big.txt"}, *decided(notes, "big.txt"),
                   "--cap", "11")
    assert call.content == "é" * 5
    assert call.document["truncated"] is True


def test_read_from_an_offset(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/a.md", "offset": 6}, *decided(notes, "a.md"))
    assert call.content == "beta: the key line\n"


def test_a_missing_file_is_a_tool_error_naming_it(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.read", {"path": f"{notes}/nope"}, *decided(notes, "nope"))
    assert call.status == 1
    assert call.document == {"error": f"'{notes}/nope': No such file or directory", "kind": "tool"}


def test_list_marks_directories_symlinks_and_sizes(bx_tool, grant):
    notes, outside = grant
    os.symlink(outside, notes / "door")
    call = bx_tool("fs.list", {"path": str(notes)}, *decided(notes, ""))
    assert call.content == "a.md\t25\ndoor@\nsub/"
    below = bx_tool("fs.list", {"path": f"{notes}/sub"}, *decided(notes, "sub"))
    assert below.content == "b.md\t10"


def test_search_finds_lines_and_skips_files_leading_outside(bx_tool, grant):
    notes, outside = grant
    os.symlink(outside / "secret.txt", notes / "planted.md")
    os.symlink(outside, notes / "door")
    call = bx_tool("fs.search", {"path": str(notes), "pattern": "key"}, *decided(notes, ""))
    assert call.content == "a.md:2:beta: the key line\nsub/b.md:1:gamma key"


def test_search_reads_only_what_the_globs_match(bx_tool, grant):
    """A grant for ``notes/*.md`` (and the directory itself, to search it): sub/b.md is not
    read, nor a non-.md file beside a.md."""
    notes, _ = grant
    (notes / "c.txt").write_text("key in a text file\n")
    globs = (re.escape(str(notes)), re.escape(str(notes)) + r"/[^/]*\.md")
    call = bx_tool("fs.search", {"path": str(notes), "pattern": "key"},
                   *decided(notes, "", *globs, descend=(re.escape(str(notes)),)))
    assert call.content == "a.md:2:beta: the key line"


@pytest.mark.parametrize(("enters_sub", "found"), [
    (True, "a.md:2:beta: the key line\nsub/b.md:1:gamma key"),
    (False, "a.md:2:beta: the key line"),
])
def test_search_enters_only_the_directories_brokerd_names(bx_tool, grant, enters_sub, found):
    """The walk goes into a directory only when a ``--descend`` regex matches it (brokerd gives
    those that can hold a granted file), here told apart by a glob that alone would read
    sub/b.md."""
    notes, _ = grant
    top = re.escape(str(notes))
    descend = (top, top + "/sub") if enters_sub else (top,)
    call = bx_tool("fs.search", {"path": str(notes), "pattern": "key"},
                   *decided(notes, "", top + r"/.*\.md", descend=descend))
    assert call.content == found


def test_search_stops_at_max_matches(bx_tool, grant):
    notes, _ = grant
    args = {"path": str(notes), "pattern": ".", "max_matches": 1}
    call = bx_tool("fs.search", args, *decided(notes, ""))
    assert call.content == "a.md:1:alpha"
    assert call.document["truncated"] is True


def test_search_refuses_a_bad_regex(bx_tool, grant):
    notes, _ = grant
    call = bx_tool("fs.search", {"path": str(notes), "pattern": "("}, *decided(notes, ""))
    assert "regular expression" in call.error


def test_write_modes(bx_tool, grant):
    notes, _ = grant
    target = f"{notes}/new.md"
    root = decided(notes, "new.md")
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
    os.symlink(outside, notes / "door")
    for mode in ("create", "overwrite", "append"):
        for relative in ("planted", "inner", "door/new.md"):
            call = bx_tool("fs.write", {"path": f"{notes}/{relative}", "content": "owned",
                                        "mode": mode}, *decided(notes, relative))
            assert call.status == 1
    assert (outside / "secret.txt").read_text() == "key=hunter2\n"
    assert not (outside / "new.md").exists()
    assert (notes / "a.md").read_text().startswith("alpha")
